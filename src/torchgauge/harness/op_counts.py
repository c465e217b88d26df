"""``op_counts`` metric: ATen operators dispatched in one step, by operator (deterministic).

Reuses the coverage pass's :class:`~torchgauge.harness.api_recorders.OpRecorder` (a
``TorchDispatchMode``): it sees every operator that reaches the dispatcher below autograd,
in forward and backward, with overloads folded (``aten::add.Tensor`` and
``aten::add.Scalar`` both count as ``aten::add``). With autograd active, composite
operators appear as what they decompose into (``aten::linear`` as ``aten::t`` +
``aten::addmm``); under ``inference_mode`` the autograd keys are skipped and a composite
such as ``aten::matmul`` is counted before it decomposes. Counts are therefore comparable
between runs of the same mode, not between train and eval.

For a given torch build, model and shapes the counts are exact and identical from run to
run, so a CPU CI can gate on them with a plain threshold (``stats/deterministic.py``): an
operator that starts being called twice per layer, or a new copy, shows up regardless of
timing noise. The counted step comes after warm-up (and after timing when measured), so
lazy first-step work such as optimizer state creation is not in it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..stats.deterministic import COUNT_THRESHOLD
from .metrics import Quantity, register_metric

if TYPE_CHECKING:  # pragma: no cover
    from ..results.schema import RunConfig
    from ..workload import Workload

__all__ = ["count_ops"]


def count_ops(fn: Callable[[], Any]) -> dict[str, int]:
    """Run ``fn`` once and return ``{"aten::mm": calls, ...}`` sorted by name.

    Example:
        >>> import torch
        >>> a = torch.ones(2, 2)
        >>> count_ops(lambda: (a @ a).relu() @ a)
        {'aten::mm': 2, 'aten::relu': 1}
    """
    from .api_recorders import OpRecorder  # torch: only when the metric runs

    recorder = OpRecorder()
    with recorder:
        fn()
    return dict(sorted(recorder.calls.items()))


@register_metric(
    "op_counts",
    "ATen operators dispatched per step, by operator (deterministic)",
    quantities=[
        Quantity(
            "op_counts",
            ("op_counts", "total"),
            "ops/iter",
            deterministic=True,
            threshold=COUNT_THRESHOLD,
            rule="exact",
            title="ATen operators per step",
        )
    ],
)
def collect_op_counts(workload: Workload, config: RunConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """One warm step under the operator recorder."""
    by_op = count_ops(workload.step)
    return {"op_counts": {"total": sum(by_op.values()), "by_op": by_op}}
