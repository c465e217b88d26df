"""Chart files: grouped bars of ratios on a log scale with 1.0 marked (the paper's Figures 3-5).

matplotlib is optional and imported only when a chart is drawn (headless ``Agg`` backend);
without it, :func:`grouped_log_bars` raises :class:`ChartError` with a one-line message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CHART_FORMATS", "ChartError", "LogBarPanel", "grouped_log_bars"]

CHART_FORMATS = ("png", "svg", "pdf")
# Figure geometry: inches per bar group and per panel, so long model lists stay readable.
_INCHES_PER_GROUP = 0.45
_MIN_WIDTH_IN = 6.0
_PANEL_HEIGHT_IN = 3.6
# Tick values of the ratio axis: round numbers a reader compares ratios against.
_NICE_TICKS = (
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.3,
    0.5,
    0.7,
    0.8,
    0.9,
    1.0,
    1.1,
    1.25,
    1.5,
    2.0,
    3.0,
    5.0,
    7.0,
    10.0,
    20.0,
    50.0,
    100.0,
)


# At most about this many labelled ticks per ratio axis, so that labels never overlap.
_MAX_TICKS = 10


def spaced_ticks(lo: float, hi: float, reference: float = 1.0) -> list[float]:
    """Nice tick values in ``[lo, hi]`` at least 1/_MAX_TICKS of the log span apart,
    chosen outward from ``reference`` (which is always kept when in range)."""
    import math

    min_gap = math.log(hi / lo) / _MAX_TICKS
    candidates = [t for t in _NICE_TICKS if lo <= t <= hi]
    kept = [reference] if lo <= reference <= hi else []
    for side in ([t for t in candidates if t > reference], [t for t in reversed(candidates) if t < reference]):
        last = reference
        for t in side:
            if abs(math.log(t / last)) >= min_gap:
                kept.append(t)
                last = t
    return sorted(kept)


class ChartError(RuntimeError):
    """A chart cannot be drawn (matplotlib missing, bad path, nothing to draw)."""


@dataclass(frozen=True)
class LogBarPanel:
    """One subplot: a group of bars per category, one bar per series.

    ``series`` maps a series name (e.g. ``"time"``) to one value per category; None or
    non-positive values leave a gap (a log axis cannot show them).
    """

    title: str
    categories: Sequence[str]  # x-axis groups, e.g. model names
    series: Mapping[str, Sequence[float | None]] = field(default_factory=dict)


def _check_path(path: str | Path) -> Path:
    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in CHART_FORMATS:
        raise ChartError(f"chart file {str(path)!r} has no supported extension; accepted: .{', .'.join(CHART_FORMATS)}")
    return path


def grouped_log_bars(
    panels: Sequence[LogBarPanel],
    path: str | Path,
    *,
    ylabel: str = "ratio",
    title: str | None = None,
    reference: float = 1.0,
) -> Path:
    """Draw grouped bars on a log y axis, one subplot per panel, and save to ``path``.

    Args:
        panels: subplots stacked vertically (e.g. one for train, one for eval).
        path: output file; the format follows the extension (``.png``, ``.svg``, ``.pdf``).
        ylabel: y-axis label, e.g. ``"inductor / eager"``.
        title: figure title.
        reference: value drawn as a horizontal line (1.0: no change).

    Returns:
        The path written.

    Raises:
        ChartError: unsupported extension, no panels or values, or matplotlib missing.

    Example:
        >>> grouped_log_bars([LogBarPanel("eval", ["m1", "m2"], {"time": [0.5, 2.0]})],
        ...                  "out.svg")  # doctest: +SKIP
    """
    path = _check_path(path)
    panels = [p for p in panels if p.categories]
    if not panels:
        raise ChartError("nothing to chart: no matched runs with ratios")
    for p in panels:
        for name, values in p.series.items():
            if len(values) != len(p.categories):
                raise ChartError(
                    f"panel {p.title!r} series {name!r} has {len(values)} values for {len(p.categories)} categories"
                )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ChartError("charts need matplotlib; install it with: pip install matplotlib") from None

    widest = max(len(p.categories) for p in panels)
    n_series = max(1, max(len(p.series) for p in panels))
    width = max(_MIN_WIDTH_IN, 1.5 + _INCHES_PER_GROUP * widest * math.sqrt(n_series))
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, _PANEL_HEIGHT_IN * len(panels)), squeeze=False)
    try:
        for ax, panel in zip(axes[:, 0], panels):
            _draw_panel(ax, panel, reference)
            ax.set_ylabel(ylabel)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path


def _draw_panel(ax, panel: LogBarPanel, reference: float) -> None:
    n_series = max(1, len(panel.series))
    bar_w = 0.8 / n_series
    xs = range(len(panel.categories))
    drawn = []
    for i, (name, values) in enumerate(panel.series.items()):
        offset = (i - (n_series - 1) / 2) * bar_w
        pts = [(x + offset, v) for x, v in zip(xs, values) if v is not None and math.isfinite(v) and v > 0]
        if pts:
            # Bars start at the reference so that a ratio below 1 points down, above 1 up.
            ax.bar([p[0] for p in pts], [p[1] - reference for p in pts], width=bar_w, bottom=reference, label=name)
            drawn.extend(p[1] for p in pts)
    ax.set_yscale("log")
    # Ratios read better as 0.5, 2 than as 5x10^-1, 2x10^0.
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.axhline(reference, color="black", linewidth=0.8, linestyle="--")
    if drawn:
        lo, hi = min(drawn + [reference]) / 1.25, max(drawn + [reference]) * 1.25
        ax.set_ylim(lo, hi)
        ticks = spaced_ticks(lo, hi, reference)
        if len(ticks) >= 3:  # a log axis spanning less than a decade gets few default labels
            from matplotlib.ticker import NullFormatter

            ax.set_yticks(ticks)
            ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(list(xs))
    ax.set_xticklabels(panel.categories, rotation=60, ha="right", fontsize=8)
    ax.set_title(panel.title)
    if len(panel.series) > 1:
        ax.legend(fontsize=8)
