"""Steps that ran without being descheduled, told apart by their CPU/wall ratio.

A single-threaded step that held its CPU for its whole duration spent about as much process
CPU time as wall time; one that was descheduled (another process took the CPU) spent less CPU
time than wall time, by the time it waited. On a shared machine the wall-time median of all
steps therefore measures the process's share of the CPU as well as its code, while the steps
whose ratio stays near 1 measure the code. Pure functions over per-step series; meaningful for
one intra-op thread only (with several, a thread that waits for a descheduled peer may spin
and count CPU time, so the ratio no longer shows the wait).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = [
    "UNDISTURBED_MIN_RATIO",
    "UNDISTURBED_MIN_STEPS",
    "cpu_time_unfit",
    "undisturbed_median",
    "undisturbed_steps",
]

# A step counts as undisturbed when its CPU time is at least this fraction of its wall time.
# Under load the ratios of one-thread steps are bimodal: 0.98-1.01 (held the CPU) or 0.03-0.2
# (waited for it) for resnet18 and dlrm smoke at load 14-18 (benchmarks/thread_settings.py,
# 2026-11-25); 0.9 separates the two and rejects a step that waited 10% of its time or more.
UNDISTURBED_MIN_RATIO = 0.9
# Fewer undisturbed steps than this give no median (None): the process was never left alone.
UNDISTURBED_MIN_STEPS = 3


def undisturbed_steps(
    wall: Sequence[float], cpu: Sequence[float], *, min_ratio: float = UNDISTURBED_MIN_RATIO
) -> list[float]:
    """Wall times of the steps whose CPU time is at least ``min_ratio`` of their wall time.

    Args:
        wall, cpu: per-step wall and process CPU times in one unit, step by step (equal lengths).
        min_ratio: in (0, 1]; see :data:`UNDISTURBED_MIN_RATIO`.

    Returns:
        The qualifying steps' wall times, in step order (NaN or non-positive steps are dropped).

    Example:
        >>> undisturbed_steps([10.0, 30.0, 10.2], [9.9, 10.1, 10.0])
        [10.0, 10.2]
    """
    if len(wall) != len(cpu):
        raise ValueError(f"wall and cpu need one value per step; got {len(wall)} and {len(cpu)}")
    if not 0 < min_ratio <= 1:
        raise ValueError(f"invalid min_ratio {min_ratio}; accepted: a fraction in (0, 1]")
    kept = []
    for w, c in zip(wall, cpu):
        if w is None or c is None or math.isnan(w) or math.isnan(c) or w <= 0:
            continue
        if c / w >= min_ratio:
            kept.append(float(w))
    return kept


def undisturbed_median(
    wall: Sequence[float],
    cpu: Sequence[float],
    *,
    min_ratio: float = UNDISTURBED_MIN_RATIO,
    min_steps: int = UNDISTURBED_MIN_STEPS,
) -> float | None:
    """Median wall time of the undisturbed steps, or None when fewer than ``min_steps`` qualify.

    Example:
        >>> undisturbed_median([10.0, 30.0, 10.2, 9.8], [9.9, 10.1, 10.0, 9.7])
        10.0
        >>> undisturbed_median([30.0, 31.0, 10.0], [10.0, 10.0, 10.0]) is None
        True
    """
    if min_steps < 1:
        raise ValueError(f"invalid min_steps {min_steps}; accepted: an integer >= 1")
    kept = undisturbed_steps(wall, cpu, min_ratio=min_ratio)
    return statistics.median(kept) if len(kept) >= min_steps else None


def cpu_time_unfit(device: str, intra_op_threads: int | None) -> str | None:
    """Why a run's process CPU time per step is not its step's cost; None when it is.

    It is on a CPU device with one intra-op thread: then it leaves out only the time the
    process spent descheduled. ``compare --time-signal auto`` tests CPU time where this is None,
    and the adaptive rules judge it there (:mod:`torchgauge.measurement`).

    Example:
        >>> cpu_time_unfit("cpu", 1) is None
        True
        >>> cpu_time_unfit("cpu", 2)
        "2 intra-op threads: CPU time adds the threads' waits"
    """
    if device != "cpu":
        return f"device {device}: CPU time leaves out the device's work"
    if intra_op_threads is None:
        return "intra-op threads not recorded"
    if intra_op_threads != 1:
        return f"{intra_op_threads} intra-op threads: CPU time adds the threads' waits"
    return None
