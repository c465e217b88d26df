"""Scaling sweeps: run one model over a grid of numeric parameters and fit cost = a * x^b + c.

``torchgauge scale dlrm --vary embedding_dim=16,32,64,128 --vary batch_size=256,512,1024``
runs every grid point as an ordinary isolated run (one RunConfig each, so results files,
the runner's statuses and timeouts all apply), then, for every varied parameter and every
setting of the others, fits a power law plus constant to each recorded cost against it.
``batch_size`` is a run parameter; any other name is passed to the model builder as an
architecture override (like ``run --model-arg``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..results.schema import RunConfig, RunRecord
from ..stats.power_law import MIN_POINTS, PowerLawFit, fit_power_law

__all__ = ["RUN_PARAMETERS", "SWEEP_METRICS", "Axis", "ScalingCurve", "parse_vary", "plan_sweep", "point_costs",
           "fit_curves"]

# Parameters that belong to the run rather than to the model's architecture.
RUN_PARAMETERS = ("batch_size",)
# Cost name -> unit, in report order. ``throughput`` is samples per second.
SWEEP_METRICS = {"time_ms": "ms", "throughput": "samples/s", "cpu_peak_mb": "MiB", "gpu_peak_mb": "MiB",
                 "flops": "FLOP/iter"}


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


def plan_sweep(model: str, axes: Sequence[Axis], base: RunConfig) -> list[tuple[dict[str, Any], RunConfig]]:
    """Every grid point (``{axis name: value}``) with its RunConfig, for each mode in order.

    ``base`` carries everything that is not varied (mode, device, size, repeat, metrics...).
    """
    names = [a.name for a in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"a parameter is varied twice: {', '.join(names)}")
    points = []
    for values in itertools.product(*(a.values for a in axes)):
        point = dict(zip(names, values))
        run_params = {k: v for k, v in point.items() if k in RUN_PARAMETERS}
        arch = {k: v for k, v in point.items() if k not in RUN_PARAMETERS}
        config = base.with_(model=model, model_kwargs={**base.model_kwargs, **arch}, **run_params)
        points.append((point, config))
    return points


def point_costs(record: RunRecord) -> dict[str, float]:
    """The costs a finished run contributes to the fits (absent ones are left out)."""
    if not record.ok:
        return {}
    costs: dict[str, float] = {}
    median = (record.metrics.get("time_ms") or {}).get("median")
    if median:
        costs["time_ms"] = median
        if record.batch_size:
            costs["throughput"] = record.batch_size / (median / 1000.0)
    for key in ("cpu_peak_mb", "gpu_peak_mb"):
        if record.metrics.get(key):
            costs[key] = record.metrics[key]
    flops = record.metrics.get("flops")
    if isinstance(flops, dict) and flops.get("total"):
        costs["flops"] = float(flops["total"])
    return costs


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


def fit_curves(measured: Iterable[tuple[dict[str, Any], str, dict[str, float]]], axes: Sequence[Axis]) -> list[ScalingCurve]:
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
