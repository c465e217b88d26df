"""Tables and charts of backend and device comparisons (presenting only; compare/ judges)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .charts import LogBarPanel, grouped_log_bars

if TYPE_CHECKING:  # pragma: no cover
    from ..compare.backend_ratios import BackendComparison
    from ..compare.devices import DeviceComparison

__all__ = [
    "DEVICE_COLUMNS",
    "DEVICE_JUSTIFY",
    "UNMATCHED_COLUMNS",
    "backend_chart",
    "backend_columns",
    "backend_rows",
    "compiler_summary_columns",
    "compiler_summary_rows",
    "device_chart",
    "device_rows",
    "device_summary_rows",
    "unmatched_rows",
]

# The ratio column that also gets base/candidate values, the speedup and the verdict (BackendRow.speedup).
TIME_RATIO = "time"
# "A speedup": B time / A time (> 1: A faster), beside the ratio A / B (< 1: A faster).
DEVICE_COLUMNS = ("model", "mode", "precision", "backend", "batch", "A ms", "B ms", "A speedup", "A / B", "A is")
DEVICE_JUSTIFY = ("left", "left", "left", "left", "right", "right", "right", "right", "right", "left")
UNMATCHED_COLUMNS = ("configuration", "reason", "detail")


def _other_ratios() -> dict[str, str]:
    from ..compare.backend_ratios import ratio_metrics

    return {k: title for k, title in ratio_metrics().items() if k != TIME_RATIO}


def backend_columns() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Columns and their justification of :func:`backend_rows`: one "cand/base" column per ratio quantity.

    "speedup" is baseline / candidate time (> 1: candidate faster, the HUD's direction); the
    "cand/base" columns are the ratios the other way round (< 1: candidate faster or leaner).
    """
    others = [f"{title} cand/base" for title in _other_ratios().values()]
    columns = (
        "model",
        "mode",
        "batch",
        "base ms",
        "cand ms",
        "speedup",
        "time cand/base",
        "candidate",
        *others,
        "compile s",
        "graph breaks",
        "accuracy",
    )
    justify = (
        "left",
        "left",
        "right",
        "right",
        "right",
        "right",
        "right",
        "left",
        *("right",) * len(others),
        "right",
        "right",
        "left",
    )
    return columns, justify


def backend_rows(cmp: BackendComparison) -> list[list[Any]]:
    """One table row per compared model and mode (:func:`backend_columns`)."""
    others = list(_other_ratios())
    return [
        [
            r.model,
            r.mode,
            r.batch_size,
            r.baseline.get(TIME_RATIO),
            r.candidate.get(TIME_RATIO),
            _times(r.speedup),
            r.ratios.get(TIME_RATIO),
            r.verdict,
            *(r.ratios.get(k) for k in others),
            r.compile_s,
            r.graph_breaks,
            r.accuracy,
        ]
        for r in cmp.rows
    ]


def _times(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}x"


def compiler_summary_columns() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Columns and their justification of :func:`compiler_summary_rows`: a geomean per ratio quantity."""
    from ..compare.backend_ratios import ratio_metrics

    geomeans = [f"{title} cand/base geomean" for title in ratio_metrics().values()]
    columns = ("mode", "pass rate", "speedup geomean", "compression ratio", "compilation latency s", *geomeans)
    return columns, ("left",) + ("right",) * (len(columns) - 1)


def compiler_summary_rows(cmp: BackendComparison) -> list[list[Any]]:
    """Per mode: pass rate, speedup geomean, compression ratio, compilation latency, then the ratio geomeans."""
    from ..compare.backend_ratios import compiler_summary, ratio_metrics

    out = []
    for mode, s in compiler_summary(cmp).items():
        g = cmp.geomeans.get(mode, {})
        ratios = [
            None if g.get(m, {}).get("geomean") is None else f"{g[m]['geomean']:.3f} (n={g[m]['n']})"
            for m in ratio_metrics()
        ]
        rate = None if s["pass_rate"] is None else f"{100 * s['pass_rate']:.0f}%, {s['passed']}/{s['total']}"
        out.append(
            [
                mode,
                rate,
                _times(s["speedup_geomean"]),
                _times(s["compression_ratio"]),
                s["compilation_latency_s"],
                *ratios,
            ]
        )
    return out


def device_rows(cmp: DeviceComparison) -> list[list[Any]]:
    """One table row per compared model and mode."""
    return [
        [
            r.model,
            r.mode,
            r.precision,
            r.backend,
            r.batch_size,
            r.a_ms,
            r.b_ms,
            _times(1.0 / r.ratio if r.ratio else None),
            r.ratio,
            r.verdict,
        ]
        for r in cmp.rows
    ]


def device_summary_rows(cmp: DeviceComparison) -> list[list[Any]]:
    """Per mode: A's speedup geomean (B / A), geometric mean A / B and the win counts."""
    out = []
    for mode, g in cmp.geomeans.items():
        w = cmp.wins.get(mode, {})
        gm = None if g["geomean"] is None else f"{g['geomean']:.3f} (n={g['n']})"
        speedup = _times(1.0 / g["geomean"] if g["geomean"] else None)
        out.append([mode, speedup, gm, w.get("a", 0), w.get("b", 0), w.get("ties", 0)])
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


def backend_chart(cmp: BackendComparison, path: str | Path) -> Path:
    """Bar chart: per mode a panel, per model one bar per metric, candidate / baseline on a log axis."""
    from ..compare.backend_ratios import ratio_metrics

    titles = ratio_metrics()
    panels = []
    for mode in _modes(cmp.rows):
        rows = [r for r in cmp.rows if r.mode == mode]
        # Leave out a metric no row has (GPU memory on a CPU run) rather than draw an empty legend entry.
        metrics = [m for m in titles if any(r.ratios.get(m) is not None for r in rows)]
        panels.append(
            LogBarPanel(
                title=f"{mode}: {cmp.candidate} / {cmp.baseline}",
                categories=[r.model + (" (fail_accuracy)" if r.failed_accuracy else "") for r in rows],
                series={titles[m]: [r.ratios.get(m) for r in rows] for m in metrics},
            )
        )
    return grouped_log_bars(
        panels,
        path,
        ylabel=f"{cmp.candidate} / {cmp.baseline}",
        title=f"{cmp.candidate} versus {cmp.baseline} (< 1: {cmp.candidate} better)",
    )


def device_chart(cmp: DeviceComparison, path: str | Path) -> Path:
    """Bar chart: per mode a panel, one bar per model, time A / B on a log axis."""
    panels = []
    for mode in _modes(cmp.rows):
        rows = [r for r in cmp.rows if r.mode == mode]
        panels.append(
            LogBarPanel(
                title=f"{mode}: time {cmp.a} / {cmp.b}",
                categories=[r.model for r in rows],
                series={"time": [r.ratio for r in rows]},
            )
        )
    return grouped_log_bars(
        panels, path, ylabel=f"time {cmp.a} / {cmp.b}", title=f"{cmp.a} versus {cmp.b} (< 1: {cmp.a} faster)"
    )
