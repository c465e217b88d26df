"""Tables and charts of backend and device comparisons (presenting only; compare/ judges)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .charts import LogBarPanel, grouped_log_bars

if TYPE_CHECKING:  # pragma: no cover
    from ..compare.backends import BackendComparison
    from ..compare.devices import DeviceComparison

__all__ = [
    "BACKEND_COLUMNS",
    "BACKEND_JUSTIFY",
    "DEVICE_COLUMNS",
    "DEVICE_JUSTIFY",
    "UNMATCHED_COLUMNS",
    "backend_chart",
    "backend_rows",
    "backend_summary_rows",
    "device_chart",
    "device_rows",
    "device_summary_rows",
    "unmatched_rows",
]

BACKEND_COLUMNS = ("model", "mode", "batch", "base ms", "cand ms", "time x", "candidate", "CPU mem x", "GPU mem x",
                   "compile s", "graph breaks", "accuracy")
BACKEND_JUSTIFY = ("left", "left", "right", "right", "right", "right", "left", "right", "right", "right", "right", "left")
DEVICE_COLUMNS = ("model", "mode", "precision", "backend", "batch", "A ms", "B ms", "A / B", "A is")
DEVICE_JUSTIFY = ("left", "left", "left", "left", "right", "right", "right", "right", "left")
UNMATCHED_COLUMNS = ("configuration", "reason", "detail")


def backend_rows(cmp: "BackendComparison") -> list[list[Any]]:
    """One table row per compared model and mode."""
    return [
        [r.model, r.mode, r.batch_size, r.baseline.get("time"), r.candidate.get("time"), r.ratios.get("time"),
         r.verdict, r.ratios.get("cpu_mem"), r.ratios.get("gpu_mem"), r.compile_s, r.graph_breaks, r.accuracy]
        for r in cmp.rows
    ]


def backend_summary_rows(cmp: "BackendComparison") -> list[list[Any]]:
    """Geometric means: one row per mode, columns time / CPU mem / GPU mem (with counts)."""
    out = []
    for mode, by_metric in cmp.geomeans.items():
        cells: list[Any] = [mode]
        for metric in ("time", "cpu_mem", "gpu_mem"):
            g = by_metric.get(metric, {})
            cells.append(None if g.get("geomean") is None else f"{g['geomean']:.3f} (n={g['n']})")
        out.append(cells)
    return out


def device_rows(cmp: "DeviceComparison") -> list[list[Any]]:
    """One table row per compared model and mode."""
    return [[r.model, r.mode, r.precision, r.backend, r.batch_size, r.a_ms, r.b_ms, r.ratio, r.verdict]
            for r in cmp.rows]


def device_summary_rows(cmp: "DeviceComparison") -> list[list[Any]]:
    """Per mode: geometric mean A / B and the win counts."""
    out = []
    for mode, g in cmp.geomeans.items():
        w = cmp.wins.get(mode, {})
        gm = None if g["geomean"] is None else f"{g['geomean']:.3f} (n={g['n']})"
        out.append([mode, gm, w.get("a", 0), w.get("b", 0), w.get("ties", 0)])
    return out


def unmatched_rows(unmatched) -> list[list[Any]]:
    """One row per configuration that could not be compared: label, reason, detail."""
    return [[u.config, u.reason, u.detail] for u in unmatched]


def _modes(rows) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r.mode not in seen:
            seen.append(r.mode)
    return seen


def backend_chart(cmp: "BackendComparison", path: str | Path) -> Path:
    """Bar chart: per mode a panel, per model one bar per metric, candidate / baseline on a log axis."""
    from ..compare.backends import METRIC_TITLES, METRICS

    panels = []
    for mode in _modes(cmp.rows):
        rows = [r for r in cmp.rows if r.mode == mode]
        # Leave out a metric no row has (GPU memory on a CPU run) rather than draw an empty legend entry.
        metrics = [m for m in METRICS if any(r.ratios.get(m) is not None for r in rows)]
        panels.append(LogBarPanel(
            title=f"{mode}: {cmp.candidate} / {cmp.baseline}",
            categories=[r.model + (" (fail_accuracy)" if r.failed_accuracy else "") for r in rows],
            series={METRIC_TITLES[m]: [r.ratios.get(m) for r in rows] for m in metrics},
        ))
    return grouped_log_bars(panels, path, ylabel=f"{cmp.candidate} / {cmp.baseline}",
                            title=f"{cmp.candidate} versus {cmp.baseline} (< 1: {cmp.candidate} better)")


def device_chart(cmp: "DeviceComparison", path: str | Path) -> Path:
    """Bar chart: per mode a panel, one bar per model, time A / B on a log axis."""
    panels = []
    for mode in _modes(cmp.rows):
        rows = [r for r in cmp.rows if r.mode == mode]
        panels.append(LogBarPanel(title=f"{mode}: time {cmp.a} / {cmp.b}", categories=[r.model for r in rows],
                                  series={"time": [r.ratio for r in rows]}))
    return grouped_log_bars(panels, path, ylabel=f"time {cmp.a} / {cmp.b}",
                            title=f"{cmp.a} versus {cmp.b} (< 1: {cmp.a} faster)")
