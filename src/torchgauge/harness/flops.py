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

from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..stats.deterministic import COUNT_THRESHOLD
from .metrics import Quantity, register_metric
from .peaks import peak_tflops

if TYPE_CHECKING:  # pragma: no cover
    from ..results.schema import RunConfig
    from ..workload import Workload

__all__ = ["FlopCount", "achieved_tflops", "count_flops", "device_name", "flops_record"]


def _packet_name(packet: Any) -> str:
    """``aten.mm`` (an OpOverloadPacket) -> ``aten::mm``, the name op_counts uses too."""
    namespace, _, base = str(packet).partition(".")
    return f"{namespace}::{base}" if base else str(packet)


class FlopCount(FlopCounterMode):
    """A ``FlopCounterMode`` that also splits each counted operator into forward/backward.

    Attributes (after the ``with`` block):
        forward: FLOPs counted outside backward.
        backward: FLOPs counted while the autograd engine ran a backward node.
        by_op: ``{"aten::mm": flops}`` over the whole block.
    """

    def __init__(self) -> None:
        super().__init__(display=False)
        self.forward = 0
        self.backward = 0

    def __enter__(self) -> "FlopCount":
        self.forward = self.backward = 0
        super().__enter__()
        return self

    def _count_flops(self, func_packet, out, args, kwargs):
        # Same arithmetic as the parent (its registry), read before and after to split it.
        before = self.flop_counts["Global"].get(func_packet, 0)
        result = super()._count_flops(func_packet, out, args, kwargs)
        added = self.flop_counts["Global"].get(func_packet, 0) - before
        if added:
            if torch._C._current_autograd_node() is not None:
                self.backward += added
            else:
                self.forward += added
        return result

    @property
    def total(self) -> int:
        return self.get_total_flops()

    @property
    def by_op(self) -> dict[str, int]:
        counts = self.get_flop_counts().get("Global", {})
        return {_packet_name(p): int(v) for p, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v}


def count_flops(fn: Callable[[], Any]) -> FlopCount:
    """Run ``fn`` once under :class:`FlopCount` and return the counter.

    Example:
        >>> lin, x = torch.nn.Linear(8, 4), torch.randn(3, 8)
        >>> count_flops(lambda: lin(x)).total  # 2 * B * I * O
        192
    """
    counter = FlopCount()
    with counter:
        fn()
    return counter


def achieved_tflops(flops: int, median_ms: float | None) -> float | None:
    """``flops`` per step over a median step time in ms, in TFLOP/s (None without a time).

    Example:
        >>> achieved_tflops(2_000_000_000_000, 1000.0)
        2.0
    """
    if median_ms is None or not median_ms > 0:
        return None
    return flops / (median_ms / 1e3) / 1e12


def device_name(device: torch.device) -> str:
    """Marketing name of ``device`` for the peak table ("cpu" for CPUs)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


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
    Quantity("flops", ("flops", "total"), "FLOP/iter", deterministic=True, threshold=COUNT_THRESHOLD, rule="exact",
             title="FLOPs per step"),
    Quantity("tflops", ("flops", "tflops"), "TFLOP/s", better="higher", rule="none", title="achieved TFLOP/s"),
)


@register_metric("flops", "FLOPs per step (forward/backward, by operator), achieved TFLOP/s and fraction of peak",
                 quantities=FLOPS_QUANTITIES)
def collect_flops(workload: "Workload", config: "RunConfig", measured: dict[str, Any]) -> dict[str, Any]:
    """One step under the FLOP counter; TFLOP/s from the timed median when present."""
    counter = count_flops(workload.step)
    median_ms = (measured.get("time_ms") or {}).get("median")
    return {"flops": flops_record(counter, median_ms, device_name(workload.device), config.precision)}
