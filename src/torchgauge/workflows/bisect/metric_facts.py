"""The facts bisection needs about the metric it follows, read from the metric registry
(:mod:`torchgauge.harness.metrics`): where its value sits in a record, whether it is
deterministic, and the threshold ``compare`` uses for it.

A bisection follows a timed quantity (rule ``rank_test``: the raw samples of each point are
rank-tested) or an exact count (rule ``exact``: one value per point, judged by the threshold
alone, immune to machine load; instructions need valgrind). Memory peaks and flags are not
bisectable: one peak per process gives no sample to test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...harness.metrics import Quantity, quantities, quantity

__all__ = ["BISECTABLE_RULES", "bisect_metrics", "default_threshold", "is_deterministic", "record_values"]

BISECTABLE_RULES = ("rank_test", "exact")


def bisect_metrics() -> list[str]:
    """Names of the quantities a bisection can follow, in the registry's order."""
    return [q.name for q in quantities() if q.rule in BISECTABLE_RULES]


def _bisectable(metric: str) -> Quantity:
    q = quantity(metric)
    if q.rule not in BISECTABLE_RULES:
        raise ValueError(f"metric {metric!r} cannot be bisected; accepted: {', '.join(bisect_metrics())}")
    return q


def default_threshold(metric: str) -> float:
    """The threshold ``compare`` uses for ``metric`` (7% for time, tighter for exact counts)."""
    return _bisectable(metric).threshold


def is_deterministic(metric: str) -> bool:
    """One exact value per point (a count), rather than timing samples."""
    return _bisectable(metric).rule == "exact"


def record_values(record_metrics: Mapping[str, Any], metric: str) -> list[Any] | None:
    """A run record's values of ``metric``: its timing samples, or ``[count]``; None when absent."""
    q = _bisectable(metric)
    if q.rule == "rank_test":
        raw: Any = record_metrics
        for key in q.samples:
            raw = raw.get(key) if isinstance(raw, Mapping) else None
        return list(raw) if isinstance(raw, list) else None
    value = q.value(record_metrics)
    return [value] if value is not None else None
