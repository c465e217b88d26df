"""The metric registry: what ``torchgauge run --metrics a,b`` can collect.

``time`` and ``memory`` come from the timed pass itself. Every other metric is a function
registered here that runs in its own pass after timing (never inside the timed samples)
and returns keys to merge into the run record's ``metrics``::

    @register_metric("flops", "FLOPs per iteration and achieved TFLOP/s")
    def collect_flops(workload, config, measured):  # measured: metrics gathered so far
        return {"flops": ..., "tflops": ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from ..results.schema import RunConfig
    from ..workload import Workload

__all__ = ["TIMED_PASS_METRICS", "MetricSpec", "register_metric", "get_metric", "list_metrics", "validate_metrics"]

MetricFn = Callable[["Workload", "RunConfig", dict[str, Any]], dict[str, Any]]
# Metrics produced by the timed pass rather than by a registered function.
TIMED_PASS_METRICS = {"time": "median/IQR/min/max of the timed samples (ms)", "memory": "peak CPU RSS and GPU memory (MiB)"}


@dataclass(frozen=True)
class MetricSpec:
    name: str
    description: str
    collect: MetricFn


_METRICS: dict[str, MetricSpec] = {}


def register_metric(name: str, description: str) -> Callable[[MetricFn], MetricFn]:
    """Register ``fn(workload, config, measured) -> dict`` as metric ``name`` (duplicates raise)."""

    def decorator(fn: MetricFn) -> MetricFn:
        if name in _METRICS or name in TIMED_PASS_METRICS:
            raise ValueError(f"metric {name!r} is already registered")
        _METRICS[name] = MetricSpec(name, description, fn)
        return fn

    return decorator


def get_metric(name: str) -> MetricSpec:
    try:
        return _METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; accepted: {', '.join(list_metrics())}") from None


def list_metrics() -> list[str]:
    """Every metric name, timed-pass ones first."""
    return [*TIMED_PASS_METRICS, *sorted(_METRICS)]


def validate_metrics(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Return ``names`` de-duplicated in order; raise on an unknown name."""
    known = set(list_metrics())
    seen: list[str] = []
    for n in names:
        if n not in known:
            raise ValueError(f"unknown metric {n!r}; accepted: {', '.join(list_metrics())}")
        if n not in seen:
            seen.append(n)
    return tuple(seen)
