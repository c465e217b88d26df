"""``flops`` metric: FLOPs of one full step, split into forward and backward, and TFLOP/s.

Counting uses ``torch.utils.flop_counter.FlopCounterMode`` (matmuls, convolutions,
attention and the other operators in its registry; pointwise ops and optimizer updates
count zero, as in every MFU figure). One ``step()`` runs under the counter, so whatever the
workload does in a step is counted, including custom training loops (GANs, RL).

Forward and backward are separated per operator while the step runs: an operator counted
while the autograd engine is executing a backward node
(``torch._C._current_autograd_node()`` is not None) is backward, every other one forward.
That is exact for one step, needs no second pass, and puts activation-checkpoint
recomputation where it runs (backward). Training steps only; eval steps are all forward.

Achieved TFLOP/s = total FLOPs / median step time of the timed pass (when ``time`` was
measured in the same run); the fraction of peak uses :mod:`torchgauge.harness.peaks` with
the run's precision, on devices the table knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..stats.deterministic import COUNT_THRESHOLD
from .metrics import Quantity, register_metric
from .peaks import peak_tflops

if TYPE_CHECKING:  # pragma: no cover
    from ..config import RunConfig
    from ..workload import Workload
    from .flop_counter import FlopCount

__all__ = ["FLOPS_QUANTITIES", "achieved_tflops", "collect_flops", "flops_record"]


def achieved_tflops(flops: int, median_ms: float | None) -> float | None:
    """``flops`` per step over a median step time in ms, in TFLOP/s (None without a time).

    Example:
        >>> achieved_tflops(2_000_000_000_000, 1000.0)
        2.0
    """
    if median_ms is None or not median_ms > 0:
        return None
    return flops / (median_ms / 1e3) / 1e12


def flops_record(counter: FlopCount, median_ms: float | None, device: str, precision: str) -> dict[str, Any]:
    """The ``metrics["flops"]`` record from a finished counter and the timed median.

    Args:
        counter: a :class:`FlopCount` that has run one step.
        median_ms: median step time of the timed pass, or None when time was not measured.
        device: device name for the peak table (see :func:`device_name`).
        precision: the run's precision (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``amp``).
    """
    tflops = achieved_tflops(counter.total, median_ms)
    peak = peak_tflops(device, precision)
    return {
        "total": int(counter.total),
        "forward": int(counter.forward),
        "backward": int(counter.backward),
        "by_op": counter.by_op,
        "tflops": tflops,
        "peak_tflops": peak,
        "fraction_of_peak": tflops / peak if tflops is not None and peak else None,
        "device_name": device,
    }


FLOPS_QUANTITIES = (
    Quantity(
        "flops",
        ("flops", "total"),
        "FLOP/iter",
        deterministic=True,
        threshold=COUNT_THRESHOLD,
        rule="exact",
        title="FLOPs per step",
    ),
    Quantity("tflops", ("flops", "tflops"), "TFLOP/s", better="higher", rule="none", title="achieved TFLOP/s"),
)


@register_metric(
    "flops",
    "FLOPs per step (forward/backward, by operator), achieved TFLOP/s and fraction of peak",
    quantities=FLOPS_QUANTITIES,
)
def collect_flops(workload: Workload, config: RunConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """One step under the FLOP counter; TFLOP/s from the timed median when present."""
    from .flop_counter import count_flops, device_name  # torch: only when the metric runs

    counter = count_flops(workload.step)
    median_ms = (measured.get("time_ms") or {}).get("median")
    return {"flops": flops_record(counter, median_ms, device_name(workload.device), config.precision)}
