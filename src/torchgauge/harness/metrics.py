"""The metric registry: what ``torchgauge run --metrics a,b`` can collect, and the facts of each quantity.

``time`` and ``memory`` come from the timed pass itself. Every other metric is a function
registered here that runs in its own pass after timing (never inside the timed samples)
and returns keys to merge into the run record's ``metrics``. The metric declares, in the
same call, the :class:`Quantity` values it produces: where each sits in the record, its
unit, which way is better and how two sides are compared. The store (``history``),
``compare``, ``bisect``, ``scale`` and the backend/device tables read those facts from
here, so adding a metric is one file::

    @register_metric("flops", "FLOPs per iteration and achieved TFLOP/s",
                     quantities=[Quantity("flops", ("flops", "total"), "FLOP", deterministic=True,
                                          threshold=COUNT_THRESHOLD, rule="exact")])
    def collect_flops(workload, config, measured):  # measured: metrics gathered so far
        return {"flops": {"total": ..., "tflops": ...}}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..stats.compare import DEFAULT_THRESHOLD, median

if TYPE_CHECKING:  # pragma: no cover
    from ..results.schema import RunConfig
    from ..workload import Workload

__all__ = [
    "CPU_PEAK_SPREAD",
    "GPU_PEAK_SPREAD",
    "RULES",
    "TIMED_PASS_METRICS",
    "MetricSpec",
    "collected_once",
    "Quantity",
    "declare_quantities",
    "get_metric",
    "list_metrics",
    "quantities",
    "quantity",
    "register_metric",
    "validate_metrics",
]

MetricFn = Callable[["Workload", "RunConfig", dict[str, Any]], dict[str, Any]]
# Metrics produced by the timed pass rather than by a registered function (their quantities: below).
TIMED_PASS_METRICS = {
    "time": "median/IQR/min/max of the timed samples (ms)",
    "memory": "peak CPU RSS and GPU memory (MiB)",
}
# How ``compare`` judges a quantity between two sides:
#   rank_test: median change beyond the threshold AND a one-sided rank test on the raw samples;
#   memory:    the threshold plus a floor scaled to the run-to-run spread (peaks move a little);
#   exact:     the threshold alone (a deterministic count: no noise to clear);
#   flag:      a boolean state turning on (regression) or off (improvement); the value is shown;
#   none:      followed in ``history`` and the site, not judged by ``compare``.
RULES = ("rank_test", "memory", "exact", "flag", "none")
BETTER = ("lower", "higher")


@dataclass(frozen=True)
class Quantity:
    """One number a metric puts in ``RunRecord.metrics``, with everything needed to compare it."""

    name: str  # the name users type: `history --metric`, `bisect --metric`
    path: tuple[str, ...]  # keys down to the per-step value in RunRecord.metrics; path[0] is its record
    unit: str  # of the value: "ms", "MiB", "FLOP", ...
    better: str = "lower"  # "lower" or "higher"
    deterministic: bool = False  # True: one value per run is exact (no sampling noise)
    threshold: float = DEFAULT_THRESHOLD  # default relative change that counts
    rule: str = "rank_test"  # one of RULES
    title: str = ""  # short human title in table headers and chart legends, e.g. "CPU mem"
    samples: tuple[str, ...] = ()  # path of the raw per-step samples (rank_test); value() falls back to their median
    ratio_key: str | None = None  # the column name in compare-backends/-devices ratios; None: not a ratio column
    # The largest run-to-run spread (max - min over fresh processes) measured for it, as a fraction
    # of its median: rule "memory" scales its floor with it (benchmarks/memory_spread.py); for a
    # deterministic quantity it is the wobble within which two processes' values still agree
    # (0: exactly equal; compare says so when one side's records disagree beyond it)
    spread: float = 0.0

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError(f"quantity {self.name!r} needs a path into RunRecord.metrics")
        if self.rule not in RULES:
            raise ValueError(f"quantity {self.name!r}: invalid rule {self.rule!r}; accepted: {', '.join(RULES)}")
        if self.better not in BETTER:
            raise ValueError(f"quantity {self.name!r}: invalid better {self.better!r}; accepted: lower, higher")
        if not 0 <= self.spread < 1:
            raise ValueError(f"quantity {self.name!r}: invalid spread {self.spread}; accepted: a fraction in [0, 1)")
        if self.rule == "rank_test" and not self.samples:
            raise ValueError(f"quantity {self.name!r}: a rank test needs the path of its raw samples")

    @property
    def record_key(self) -> str:
        """The key of ``RunRecord.metrics`` holding it; ``compare``'s findings name the quantity by it."""
        return self.path[0]

    def value(self, record_metrics: Mapping[str, Any]) -> float | None:
        """The finite per-step value in a record's metrics, or None (absent, not a number)."""
        value = _follow(record_metrics, self.path)
        if value is None and self.samples:
            raw = _follow(record_metrics, self.samples)
            clean = [float(s) for s in raw if _number(s)] if isinstance(raw, list) else []
            value = median(clean) if clean else None
        return float(value) if _number(value) else None


def _follow(metrics: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        metrics = metrics.get(part) if isinstance(metrics, Mapping) else None
    return metrics


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    description: str
    collect: MetricFn
    quantities: tuple[Quantity, ...] = ()

    @property
    def deterministic(self) -> bool:
        """Every value it judges is the same in every process of a configuration: it declares
        quantities, and each one ``compare`` judges (rule other than ``none``) is deterministic.
        A quantity only shown beside them (``tflops``: the count over this process's timed
        median) does not make the pass worth repeating."""
        judged = [q for q in self.quantities if q.rule != "none"]
        return bool(judged) and all(q.deterministic for q in judged)


_METRICS: dict[str, MetricSpec] = {}
_QUANTITIES: dict[str, Quantity] = {}


def declare_quantities(*declared: Quantity) -> None:
    """Add quantities to the registry (duplicate names raise); metrics declare theirs via :func:`register_metric`."""
    for q in declared:
        if q.name in _QUANTITIES:
            raise ValueError(f"quantity {q.name!r} is already declared")
    for q in declared:
        _QUANTITIES[q.name] = q


def register_metric(name: str, description: str, quantities: Iterable[Quantity] = ()) -> Callable[[MetricFn], MetricFn]:
    """Register ``fn(workload, config, measured) -> dict`` as metric ``name`` with the quantities it produces.

    Duplicate metric or quantity names raise.
    """
    declared = tuple(quantities)

    def decorator(fn: MetricFn) -> MetricFn:
        if name in _METRICS or name in TIMED_PASS_METRICS:
            raise ValueError(f"metric {name!r} is already registered")
        declare_quantities(*declared)
        _METRICS[name] = MetricSpec(name, description, fn, declared)
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


def collected_once(name: str) -> bool:
    """Whether metric ``name`` needs collecting in one process per configuration only (its
    :attr:`MetricSpec.deterministic`): ``run --rounds k`` collects it in the first round
    (:func:`torchgauge.config.plan`). The timed pass's metrics are measured in every process.

    Example:
        >>> collected_once("op_counts"), collected_once("time"), collected_once("leak")
        (True, False, False)
    """
    if name in TIMED_PASS_METRICS:
        return False
    _load_metric_modules()
    return get_metric(name).deterministic


def quantities() -> tuple[Quantity, ...]:
    """Every declared quantity: the timed pass's first, then the metrics' in import order."""
    _load_metric_modules()
    return tuple(_QUANTITIES.values())


def quantity(name: str) -> Quantity:
    """The quantity called ``name``; an unknown name raises ValueError listing the accepted ones."""
    _load_metric_modules()
    try:
        return _QUANTITIES[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; accepted: {', '.join(_QUANTITIES)}") from None


def _load_metric_modules() -> None:
    # The package imports every built-in metric module (they register on import); a caller
    # that imported only this module (``from torchgauge.harness.metrics import ...``) has
    # therefore already run it: importing it again is a dictionary look-up.
    from .. import harness  # noqa: F401  (imported for its side effect: the metric modules register)


# Run-to-run spread of the timed pass's peaks (their Quantity.spread): the largest (max - min) /
# median of cpu_peak_mb over fresh processes measured at full size (benchmarks/memory_spread.py;
# docs/regression-detection.md, "Measured run-to-run spread of peak memory"): 7.2% (hf_Bert eval,
# one thread) over 7 models x 5 processes, rounded up; glibc keeps a different amount of freed
# heap in each process (steps of 20-66 MiB). Smoke sizes spread at most 2.2%.
CPU_PEAK_SPREAD = 0.075
# Unmeasured: no recorded GPU run exists yet, so the CPU figure stands in; set it from recorded
# CUDA results with the same benchmark (``--reuse`` analyses results files placed in its workdir).
GPU_PEAK_SPREAD = CPU_PEAK_SPREAD

# The timed pass's quantities (measurement.py fills time_ms, the peaks and, for compiling
# backends, metrics["compile"] during warm-up).
declare_quantities(
    Quantity("time", ("time_ms", "median"), "ms", title="time", samples=("time_ms", "samples"), ratio_key="time"),
    Quantity(
        "cpu_peak_mb",
        ("cpu_peak_mb",),
        "MiB",
        rule="memory",
        title="CPU mem",
        ratio_key="cpu_mem",
        spread=CPU_PEAK_SPREAD,
    ),
    Quantity(
        "gpu_peak_mb",
        ("gpu_peak_mb",),
        "MiB",
        rule="memory",
        title="GPU mem",
        ratio_key="gpu_mem",
        spread=GPU_PEAK_SPREAD,
    ),
    Quantity("compile_s", ("compile", "compile_s"), "s", rule="none", title="compile time"),
)
