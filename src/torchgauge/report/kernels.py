"""Kernel tables of a device trace: top kernels by total time, time per kernel type, launches per step.

The figures HTA's ``get_gpu_kernel_breakdown`` gives, from the same records the breakdown
uses, so one tool answers both questions. Pure functions over a :class:`ProfileTrace`
(one device); durations are summed (not unions), as HTA sums them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from ..harness.events import ProfileTrace, TraceEvent
from ..harness.kernel_types import KERNEL_TYPES, kernel_type

__all__ = ["TOP_KERNELS", "KernelRow", "kernel_type_shares", "launches_per_step", "top_kernels"]

# Kernels listed by default: HTA's default for its top-kernels view.
TOP_KERNELS = 10
_WORK = ("kernel", "memcpy", "memset")


@dataclass(frozen=True)
class KernelRow:
    """One kernel name's totals over the trace."""

    name: str
    kind: str  # one of KERNEL_TYPES
    calls: int
    total_us: float
    mean_us: float
    share: float  # of the summed time of all device work (kernels, copies, fills)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _work(trace: ProfileTrace) -> list[TraceEvent]:
    return [e for e in trace.events if e.on_device and e.category in _WORK]


def top_kernels(trace: ProfileTrace, n: int = TOP_KERNELS) -> list[KernelRow]:
    """The ``n`` device-work names with the largest summed duration, largest first."""
    work = _work(trace)
    grand = sum(e.duration_us for e in work)
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    kinds: dict[str, str] = {}
    for e in work:
        t = totals[e.name]
        t[0] += 1
        t[1] += e.duration_us
        kinds.setdefault(e.name, kernel_type(e))
    rows = [
        KernelRow(name, kinds[name], int(c), s, s / c, s / grand if grand > 0 else 0.0)
        for name, (c, s) in totals.items()
    ]
    rows.sort(key=lambda r: (-r.total_us, r.name))
    return rows[:n]


def kernel_type_shares(trace: ProfileTrace) -> dict[str, dict[str, float]]:
    """Per kernel type: summed time (us), share of all device-work time, and event count."""
    work = _work(trace)
    grand = sum(e.duration_us for e in work)
    out = {t: {"time_us": 0.0, "share": 0.0, "count": 0} for t in KERNEL_TYPES}
    for e in work:
        row = out[kernel_type(e)]
        row["time_us"] += e.duration_us
        row["count"] += 1
    for row in out.values():
        row["share"] = row["time_us"] / grand if grand > 0 else 0.0
    return out


def launches_per_step(trace: ProfileTrace) -> list[dict[str, Any]]:
    """Per step: kernels, copies and fills launched in it, and their summed device time (us)."""
    out = [{"step": i, "kernels": 0, "memcpy": 0, "memset": 0, "device_us": 0.0} for i in range(len(trace.steps))]
    for e in _work(trace):
        if e.step is None or not 0 <= e.step < len(out):
            continue
        row = out[e.step]
        row["kernels" if e.category == "kernel" else e.category] += 1
        row["device_us"] += e.duration_us
    return out
