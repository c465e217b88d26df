"""Presenting a scaling sweep: the fit table and a log-log plot per cost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..workflows.scale import SWEEP_METRICS, ScalingCurve

__all__ = ["FIT_COLUMNS", "fit_rows", "write_scaling_plot"]

FIT_COLUMNS = (
    "mode",
    "metric",
    "vs",
    "held at",
    "points",
    "fit: a * x^b + c",
    "b",
    "b 95% interval",
    "R^2",
    "max residual",
)
_FIT_SAMPLES = 50  # points drawn along each fitted curve


def _fixed_label(fixed: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in fixed.items()) or "-"


def fit_rows(curves: Sequence[ScalingCurve]) -> list[list[Any]]:
    """One row per curve; curves without a fit say why."""
    rows = []
    for c in curves:
        label = f"{c.metric} ({SWEEP_METRICS.get(c.metric, '')})"
        if c.fit is None:
            rows.append([c.mode, label, c.parameter, _fixed_label(c.fixed), len(c.xs), c.note, None, None, None, None])
            continue
        f = c.fit
        formula = f"{f.a:.3g} * x^{f.b:.3g} + {f.c:.3g}" + (
            " (b at search bound: ill-determined)" if f.at_bound else ""
        )
        interval = ("none (no dof)" if f.b_low is None or f.b_high is None else f"{f.b_low:.3g}..{f.b_high:.3g}") + (
            " WIDE" if f.b_interval_wide else ""
        )
        rows.append(
            [
                c.mode,
                label,
                c.parameter,
                _fixed_label(c.fixed),
                f.n,
                formula,
                round(f.b, 3),
                interval,
                round(f.r2, 4),
                f"{f.max_rel_residual:.1%}",
            ]
        )
    return rows


def write_scaling_plot(curves: Sequence[ScalingCurve], path: str, title: str = "") -> str:
    """Log-log plot, one panel per cost: measured points and fitted curves; returns ``path``."""
    from .plotting import pyplot

    plt = pyplot()
    metrics = [m for m in SWEEP_METRICS if any(c.metric == m for c in curves)]
    if not metrics:
        raise ValueError("nothing to plot: no run of the sweep finished")
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for c in (c for c in curves if c.metric == metric):
            label = f"{c.mode} vs {c.parameter}" + (f" ({_fixed_label(c.fixed)})" if c.fixed else "")
            points = ax.plot(c.xs, c.ys, "o", label=label)[0]
            if c.fit is not None:
                lo, hi = min(c.xs), max(c.xs)
                grid = [lo * (hi / lo) ** (i / (_FIT_SAMPLES - 1)) for i in range(_FIT_SAMPLES)]
                ax.plot(
                    grid,
                    [c.fit.predict(x) for x in grid],
                    "-",
                    color=points.get_color(),
                    alpha=0.7,
                    label=f"b = {c.fit.b:.2f}",
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{metric} ({SWEEP_METRICS[metric]})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="x-small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
