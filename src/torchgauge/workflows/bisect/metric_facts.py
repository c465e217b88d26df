"""The facts bisection needs about the metric it follows: where its value sits in a record,
whether it is deterministic, and the threshold ``compare`` uses for it.

One small table on purpose: the metric registry (:mod:`torchgauge.harness.metrics`) owns
these facts; this module is what is swapped for it.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...stats.compare import DEFAULT_THRESHOLD
from ...stats.deterministic import COUNT_THRESHOLD, INSTRUCTIONS_THRESHOLD

__all__ = ["METRICS", "default_threshold", "is_deterministic", "record_values"]

# Metrics a bisection can follow -> where its per-step value sits in RunRecord.metrics
# (None: the timing samples). Counts are deterministic: one value per point, judged by the
# threshold alone (stats.deterministic), immune to machine load; instructions need valgrind.
METRICS = {
    "time": None,
    "instructions": ("instructions", "per_step"),
    "op_counts": ("op_counts", "total"),
    "flops": ("flops", "total"),
}


def default_threshold(metric: str) -> float:
    """The threshold ``compare`` uses for ``metric``: 7% for time, tighter for exact counts."""
    return {"time": DEFAULT_THRESHOLD, "instructions": INSTRUCTIONS_THRESHOLD}.get(metric, COUNT_THRESHOLD)


def is_deterministic(metric: str) -> bool:
    """One exact value per point (a count), rather than timing samples."""
    return METRICS[metric] is not None


def record_values(record_metrics: Mapping[str, Any], metric: str) -> list[Any] | None:
    """A run record's values of ``metric``: its timing samples, or ``[count]``; None when absent."""
    path = METRICS[metric]
    if path is None:
        return (record_metrics.get("time_ms") or {}).get("samples")
    value = (record_metrics.get(path[0]) or {}).get(path[1])
    return [value] if value is not None else None
