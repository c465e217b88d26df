"""Rows of ``torchgauge history``: a configuration's series with the step detector's marks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..results.store import SeriesPoint, metric_value
from ..stats.compare import DEFAULT_THRESHOLD
from ..stats.steps import detect_regressions, detect_steps

__all__ = ["HISTORY_COLUMNS", "HistoryTable", "history_tables", "series_groups"]

HISTORY_COLUMNS = ("run", "date", "torch", "git", "status", "value", "level", "step")


@dataclass(frozen=True)
class HistoryTable:
    """One configuration's series (``label`` like ``eval/cpu/fp32/eager``) as table rows."""

    label: str
    rows: list[list[Any]]  # HISTORY_COLUMNS
    steps: list[dict[str, Any]]  # {"run": id, "position": i, "before", "after", "change", "kind"}


def series_groups(points: Sequence[SeriesPoint]) -> dict[str, list[SeriesPoint]]:
    """``points`` split by configuration, keyed by its label (``eval/cpu/fp32/eager``, ``/bs=N`` when set)."""
    groups: dict[str, list[SeriesPoint]] = {}
    for p in points:
        c = p.config
        label = f"{c.mode}/{c.device}/{c.precision}/{c.backend}" + ("" if c.batch_size is None else f"/bs={c.batch_size}")
        groups.setdefault(label, []).append(p)
    return groups


def history_tables(points: Sequence[SeriesPoint], metric: str, *, threshold: float = DEFAULT_THRESHOLD) -> list[HistoryTable]:
    """Group ``points`` by configuration and mark level changes of at least ``threshold``.

    Failed runs keep their row (value ``None``) and do not break a segment. Upward steps
    are regressions (every metric here is lower-is-better), downward ones improvements.
    """
    tables = []
    for label, pts in series_groups(points).items():
        values = [metric_value(p.metrics, metric) if p.status in ("ok", "fail_accuracy") else None for p in pts]
        segments = detect_steps(values)
        level = {i: seg.level for seg in segments for i in range(seg.start, seg.end)}
        steps = detect_regressions(segments, threshold, direction="both")
        marks = {s.position: s for s in steps}
        rows = []
        for i, (p, v) in enumerate(zip(pts, values)):
            step = marks.get(i)
            mark = "" if step is None else f"{'regression' if step.change > 0 else 'improvement'} {step.change:+.1%}"
            rows.append([p.suite_id, p.created_at[:19].replace("T", " "), p.torch_version, (p.torch_git_version or "")[:10],
                         p.status, v, level.get(i), mark])
        tables.append(HistoryTable(label, rows, [
            {"run": pts[s.position].suite_id, "position": s.position, "before": s.before, "after": s.after,
             "change": s.change, "kind": "regression" if s.change > 0 else "improvement"} for s in steps]))
    return tables
