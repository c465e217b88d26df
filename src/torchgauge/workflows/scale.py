"""Scaling sweeps: run one model over a grid of numeric parameters and fit cost = a * x^b + c.

``torchgauge scale dlrm --vary embedding_dim=16,32,64,128 --vary batch_size=256,512,1024``
runs every grid point as an ordinary isolated run (one RunConfig each, so results files,
the runner's statuses and timeouts all apply), then, for every varied parameter and every
setting of the others, fits a power law plus constant to each recorded cost against it.
``batch_size`` is a run parameter; any other name is passed to the model builder as an
architecture override (like ``run --model-arg``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import RunConfig, plan
from ..harness.metrics import quantity
from ..results.schema import RunRecord
from ..stats.power_law import MIN_POINTS, PowerLawFit, fit_power_law

__all__ = [
    "RUN_PARAMETERS",
    "SWEEP_METRICS",
    "SWEPT_QUANTITIES",
    "Axis",
    "ScalingCurve",
    "Sweep",
    "parse_vary",
    "plan_sweep",
    "point_of",
    "point_costs",
    "fit_curves",
    "run_sweep",
]

# Parameters that belong to the run rather than to the model's architecture.
RUN_PARAMETERS = ("batch_size",)
# Cost name -> unit, in report order. ``throughput`` is samples per second.
# The registry's quantities a sweep fits, keyed in the sweep by their record key (the names its
# reports have always used); ``throughput`` (samples/s) is derived from the time and the batch.
SWEPT_QUANTITIES = ("time", "cpu_peak_mb", "gpu_peak_mb", "flops")


def sweep_metrics() -> dict[str, str]:
    """Cost name -> unit, in report order: the time, throughput, then the other swept quantities."""
    units = {quantity(name).record_key: quantity(name).unit for name in SWEPT_QUANTITIES}
    time_key = quantity("time").record_key
    return {time_key: units.pop(time_key), "throughput": "samples/s", **units}


SWEEP_METRICS = sweep_metrics()


@dataclass(frozen=True)
class Axis:
    """One varied parameter and its values, in the order given."""

    name: str
    values: tuple[int | float, ...]


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_vary(text: str) -> Axis:
    """``"embedding_dim=16,32,64"`` -> Axis; one-line ValueError on anything else."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ValueError(f"invalid --vary {text!r}; accepted: NAME=V1,V2,... e.g. embedding_dim=16,32,64")
    try:
        values = tuple(_number(v.strip()) for v in raw.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"invalid --vary {text!r}: values must be numbers, e.g. {name}=16,32,64") from None
    if not values:
        raise ValueError(f"invalid --vary {text!r}: no values; accepted: NAME=V1,V2,...")
    if any(not math.isfinite(v) or v <= 0 for v in values):  # nan compares false with everything
        raise ValueError(f"invalid --vary {text!r}: values must be > 0 and finite (a power law needs positive x)")
    if len(set(values)) != len(values):
        raise ValueError(f"invalid --vary {text!r}: repeated values")
    if name == "batch_size" and any(not isinstance(v, int) for v in values):
        raise ValueError(f"invalid --vary {text!r}: batch sizes must be integers")
    return Axis(name, values)


def plan_sweep(
    model: str, axes: Sequence[Axis], base: RunConfig | None = None, modes: Sequence[str] | None = None, **settings: Any
) -> list[tuple[dict[str, Any], RunConfig]]:
    """Every grid point (``{axis name: value}``) with its RunConfig, for each mode in order
    (``base.mode`` when ``modes`` is None), planned by :func:`torchgauge.config.plan`.

    ``base`` and ``settings`` (RunConfig fields) carry everything that is not varied
    (device, size, repeat, metrics...).
    """
    base = base if base is not None else RunConfig(model)
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"a parameter is varied twice: {', '.join(names)}")
    configs = plan([model], base, modes=modes or (base.mode,), vary={a.name: a.values for a in axes}, **settings)
    return [(point_of(c, axes), c) for c in configs]


def point_of(config: RunConfig, axes: Sequence[Axis]) -> dict[str, Any]:
    """The grid point of a planned config: ``{axis name: value}``."""
    return {a.name: getattr(config, a.name) if a.name in RUN_PARAMETERS else config.model_kwargs[a.name] for a in axes}


def point_costs(record: RunRecord) -> dict[str, float]:
    """The costs a finished run contributes to the fits (absent ones are left out)."""
    if not record.ok:
        return {}
    costs: dict[str, float] = {}
    for swept in map(quantity, SWEPT_QUANTITIES):
        value = swept.value(record.metrics)
        if value:  # zero or absent: nothing to fit (a CPU run's GPU peak)
            costs[swept.record_key] = value
    time_key = quantity("time").record_key
    if time_key in costs and record.batch_size:
        costs["throughput"] = _step_samples(record) / (costs[time_key] / 1000.0)
    return costs


def _step_samples(record: RunRecord) -> int:
    """Samples the record's step processed: its batch, unless the model's step processes a fixed count."""
    from ..registry import UnknownModelError, get_spec

    try:
        spec = get_spec(record.config.model)
    except UnknownModelError:  # a record of a model no longer registered (or a --model-file not loaded)
        return record.batch_size
    return spec.step_samples(record.config.mode, record.batch_size)


@dataclass(frozen=True)
class ScalingCurve:
    """One cost against one varied parameter, the other parameters held at ``fixed``."""

    parameter: str
    metric: str
    mode: str
    fixed: dict[str, Any]
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    fit: PowerLawFit | None
    note: str = ""  # why there is no fit

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameter": self.parameter,
            "metric": self.metric,
            "unit": SWEEP_METRICS.get(self.metric, ""),
            "mode": self.mode,
            "fixed": self.fixed,
            "xs": list(self.xs),
            "ys": list(self.ys),
            "fit": self.fit.to_dict() if self.fit else None,
            "note": self.note,
        }


def fit_curves(
    measured: Iterable[tuple[dict[str, Any], str, dict[str, float]]], axes: Sequence[Axis]
) -> list[ScalingCurve]:
    """Fit every (parameter, fixed others, mode, metric) slice of ``(point, mode, costs)`` triples."""
    measured = list(measured)
    curves: list[ScalingCurve] = []
    for axis in axes:
        slices: dict[tuple, list[tuple[float, dict[str, float]]]] = {}
        for point, mode, costs in measured:
            fixed = tuple((k, v) for k, v in point.items() if k != axis.name)
            slices.setdefault((mode, fixed), []).append((point[axis.name], costs))
        for (mode, fixed), rows in slices.items():
            for metric in SWEEP_METRICS:
                pairs = sorted((x, c[metric]) for x, c in rows if metric in c)
                if not pairs:
                    continue
                xs, ys = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
                fit, note = None, ""
                if len(xs) < MIN_POINTS:
                    note = f"{len(xs)} point(s) measured; a fit needs {MIN_POINTS}"
                else:
                    try:
                        fit = fit_power_law(xs, ys)
                    except ValueError as exc:
                        note = str(exc)
                curves.append(ScalingCurve(axis.name, metric, mode, dict(fixed), xs, ys, fit, note))
    return curves


@dataclass
class Sweep:
    """A finished sweep: its runs (in plan order), their points and costs, and the fits."""

    model: str
    axes: Sequence[Axis]
    results_path: Path
    runs: list[RunRecord]
    curves: list[ScalingCurve]

    def point(self, record: RunRecord) -> dict[str, Any]:
        return point_of(record.config, self.axes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "axes": {a.name: list(a.values) for a in self.axes},
            "results": str(self.results_path),
            "points": [
                {**self.point(r), "mode": r.config.mode, "status": r.status, "costs": point_costs(r)} for r in self.runs
            ],
            "fits": [c.to_dict() for c in self.curves],
        }


def run_sweep(
    points: Sequence[tuple[dict[str, Any], RunConfig]],
    axes: Sequence[Axis],
    runner_options: Any,
    results_path: Path,
    *,
    on_start: Callable[[RunConfig], None] | None = None,
    on_result: Callable[[RunRecord], None] | None = None,
) -> Sweep:
    """Run the planned points (:func:`plan_sweep`), saving ``results_path`` after each, and fit them."""
    from ..suite import run_and_save

    results = run_and_save([c for _, c in points], runner_options, results_path, on_start=on_start, on_result=on_result)
    measured = [(point_of(r.config, axes), r.config.mode, point_costs(r)) for r in results.runs]
    model = points[0][1].model if points else ""
    return Sweep(model, axes, results_path, results.runs, fit_curves(measured, axes))
