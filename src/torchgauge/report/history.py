"""Rows of ``torchgauge history``: a configuration's series with the step detector's marks.

One row per stored run: a run made with ``--rounds k`` stores k records of each configuration
(one per process), which make one point, read as ``compare`` reads a side: the status of its
first failing record, the median of its records' values, and a deterministic value (collected in
the first round only) from the record(s) that carry it, or none, with a note, when they disagree
(:mod:`torchgauge.compare.group_values`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compare.group_values import group_value, listed
from ..compare.matching import config_key
from ..harness.metrics import Quantity, quantity
from ..results.schema import RunConfig
from ..results.store import SeriesPoint
from ..stats.compare import DEFAULT_THRESHOLD
from ..stats.steps import detect_regressions, detect_steps

__all__ = [
    "HISTORY_COLUMNS",
    "PLOT_FORMATS",
    "HistoryTable",
    "history_tables",
    "run_lead",
    "series_groups",
    "stored_runs",
    "sparkline",
    "write_history_plot",
]

HISTORY_COLUMNS = ("run", "date", "torch", "git", "status", "value", "level", "step")
PLOT_FORMATS = (".png", ".svg", ".pdf")
# Eight block heights of a sparkline, lowest first; a failed run is a blank.
_SPARKS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"


@dataclass(frozen=True)
class HistoryTable:
    """One configuration's series (``label`` like ``eval/cpu/fp32/eager``) as table rows."""

    label: str
    rows: list[list[Any]]  # HISTORY_COLUMNS
    steps: list[dict[str, Any]]  # {"run": id, "position": i, "before", "after", "change", "kind"}


def series_groups(points: Sequence[SeriesPoint]) -> dict[str, list[SeriesPoint]]:
    """``points`` split by configuration, keyed by its label (``eval/cpu/fp32/eager``, ``/bs=N`` when set)."""
    groups: dict[tuple, list[SeriesPoint]] = {}
    for p in points:
        groups.setdefault(config_key(p.config, without="model"), []).append(p)
    return {_series_label(pts[0].config): pts for pts in groups.values()}


# Statuses whose values a history shows (an accuracy failure keeps its measurements).
_MEASURED = ("ok", "fail_accuracy")


def stored_runs(points: Sequence[SeriesPoint]) -> list[list[SeriesPoint]]:
    """One configuration's points split by stored run (its records: one per round), oldest first."""
    runs: dict[int, list[SeriesPoint]] = {}
    for p in points:
        runs.setdefault(p.suite_id, []).append(p)
    return list(runs.values())


def run_lead(points: Sequence[SeriesPoint]) -> SeriesPoint:
    """The record that speaks for a stored run's records: its first failing one, else its first
    (as :func:`torchgauge.compare.matching.representative` for ``compare``)."""
    return next((p for p in points if p.status not in _MEASURED), points[0])


def _run_value(q: Quantity, points: Sequence[SeriesPoint]) -> tuple[float | None, str]:
    """A stored run's value of ``q`` (None when it failed or its records disagree) and a note."""
    if run_lead(points).status not in _MEASURED:
        return None, ""
    found = group_value(points, q)
    return found.value, f"records disagree: {listed(found.values)}" if found.disagree else ""


def _series_label(c: RunConfig) -> str:
    return f"{c.mode}/{c.device}/{c.precision}/{c.backend}" + ("" if c.batch_size is None else f"/bs={c.batch_size}")


def history_tables(
    points: Sequence[SeriesPoint], metric: str, *, threshold: float = DEFAULT_THRESHOLD
) -> list[HistoryTable]:
    """Group ``points`` by configuration and mark level changes of at least ``threshold``.

    One row per stored run (:func:`stored_runs`; a rounds run's records make one point).
    Failed runs keep their row (value ``None``) and do not break a segment; a run whose
    records disagree on a deterministic value has none either, and its ``step`` cell says so. A
    step the quantity's ``better`` way is an improvement, the other way a regression (upward for
    time, memory and counts; downward for TFLOP/s).
    """
    q = quantity(metric)
    worse = 1.0 if q.better == "lower" else -1.0  # sign of a step's change that is a regression
    tables = []
    for label, config_points in series_groups(points).items():
        runs = stored_runs(config_points)
        pts = [run_lead(run) for run in runs]
        values, notes = zip(*(_run_value(q, run) for run in runs))
        segments = detect_steps(list(values))
        level = {i: seg.level for seg in segments for i in range(seg.start, seg.end)}
        steps = detect_regressions(segments, threshold, direction="both")
        marks = {s.position: s for s in steps}
        rows = []
        for i, (p, v, note) in enumerate(zip(pts, values, notes)):
            step = marks.get(i)
            kind = None if step is None else "regression" if step.change * worse > 0 else "improvement"
            mark = "" if step is None else f"{kind} {step.change:+.1%}"
            rows.append(
                [
                    p.suite_id,
                    p.created_at[:19].replace("T", " "),
                    p.torch_version,
                    (p.torch_git_version or "")[:10],
                    p.status,
                    v,
                    level.get(i),
                    "; ".join(m for m in (mark, note) if m),
                ]
            )
        tables.append(
            HistoryTable(
                label,
                rows,
                [
                    {
                        "run": pts[s.position].suite_id,
                        "position": s.position,
                        "before": s.before,
                        "after": s.after,
                        "change": s.change,
                        "kind": "regression" if s.change * worse > 0 else "improvement",
                    }
                    for s in steps
                ],
            )
        )
    return tables


def sparkline(values: Sequence[float | None]) -> str:
    """One block character per value, scaled between the series' min and max (blank for None).

    Example:
        >>> sparkline([1.0, 2.0, None, 3.0])
        '\u2581\u2585 \u2588'
    """
    valid = [v for v in values if v is not None]
    if not valid:
        return " " * len(values)
    lo, hi = min(valid), max(valid)
    top = len(_SPARKS) - 1
    return "".join(" " if v is None else _SPARKS[0 if hi == lo else round(top * (v - lo) / (hi - lo))] for v in values)


def write_history_plot(tables: Sequence[HistoryTable], path: str | Path, *, title: str, ylabel: str) -> Path:
    """One line per configuration over run ids, its detected level dashed, steps marked; to ``path``.

    Args:
        tables: from :func:`history_tables`.
        path: ``.png``, ``.svg`` or ``.pdf``.
        title, ylabel: figure title and the metric's axis label.

    Raises:
        ValueError: an unsupported extension. RuntimeError: matplotlib is missing.
    """
    from .plotting import pyplot

    path = Path(path)
    if path.suffix.lower() not in PLOT_FORMATS:
        raise ValueError(f"cannot write a plot to {path.name!r}; accepted extensions: {', '.join(PLOT_FORMATS)}")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    try:
        for table in tables:
            runs = [row[0] for row in table.rows]
            line = ax.plot(
                runs,
                [row[5] if row[5] is not None else float("nan") for row in table.rows],
                "o-",
                markersize=3,
                linewidth=1.2,
                label=table.label,
            )[0]
            ax.plot(
                runs,
                [row[6] if row[6] is not None else float("nan") for row in table.rows],
                "--",
                color=line.get_color(),
                linewidth=0.8,
            )
            for step in table.steps:
                up = step["kind"] == "regression"
                ax.plot(
                    step["run"],
                    step["after"],
                    "^" if up else "v",
                    color="#d62728" if up else "#2ca02c",
                    markersize=10,
                    markeredgecolor="black",
                )
                ax.annotate(
                    f"{step['change']:+.1%}",
                    (step["run"], step["after"]),
                    textcoords="offset points",
                    xytext=(4, 6 if up else -12),
                    fontsize=8,
                )
        ax.set_xlabel("stored run id")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
