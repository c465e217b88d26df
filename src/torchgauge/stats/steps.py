"""Step detection over a history: where did a metric's level change, and by how much?

Pure functions over lists (asv ``step_detect``): ``detect_steps`` fits a piecewise
constant model to the logarithm of the series (so a 7% step weighs the same at 1 ms and
at 1 s) by optimal partitioning with a penalty per segment; ``detect_regressions`` keeps
the upward steps of at least a threshold. ``None`` and NaN points are ignored but keep
their positions.

Each segment costs the sum of absolute deviations from its median (L1, as asv: outliers
pull a segment far less than under squared error) plus a penalty of
``STEP_PENALTY * sigma * ln(n)`` (a BIC-like choice), where ``sigma`` is a robust estimate
of point-to-point noise: the median absolute deviation of successive
differences, which a level shift barely moves. Segments have at least
:data:`STEP_MIN_SIZE` points, so a single outlier never becomes a step of its own.

Example:
    >>> steps = detect_steps([10, 10.1, 9.9, 10, 12, 12.1, 11.9, 12])
    >>> [(s.start, s.end) for s in steps]
    [(0, 4), (4, 8)]
    >>> [round(r.change, 2) for r in detect_regressions(steps)]
    [0.2]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .compare import DEFAULT_THRESHOLD, median, relative_change

__all__ = [
    "MIN_RELATIVE_NOISE",
    "STEP_MIN_SIZE",
    "STEP_PENALTY",
    "Segment",
    "StepChange",
    "detect_regressions",
    "detect_steps",
]

# Segment cost multiplier on sigma * ln(n); larger finds fewer, larger steps.
STEP_PENALTY = 3.0
# Fewest valid points per segment: one outlier cannot form a step.
STEP_MIN_SIZE = 2
# Floor of the relative noise estimate, so that exactly repeatable series (instruction or
# operator counts) still need a step of about a percent, not any nonzero difference.
MIN_RELATIVE_NOISE = 0.002


@dataclass(frozen=True)
class Segment:
    """A run of the series at one level; ``start``/``end`` index the input (end exclusive)."""

    start: int
    end: int
    level: float  # median of the segment's valid values
    n: int  # valid points in the segment


@dataclass(frozen=True)
class StepChange:
    """A level change between two consecutive segments."""

    position: int  # index of the first point at the new level
    before: float
    after: float
    change: float  # relative change after / before - 1


def _noise_sigma(logs: Sequence[float]) -> float:
    if len(logs) < 3:
        return MIN_RELATIVE_NOISE
    diffs = [b - a for a, b in zip(logs, logs[1:])]
    centre = median(diffs)
    mad = median([abs(d - centre) for d in diffs])
    # 1.4826 * MAD estimates a normal sigma; differences carry the noise of two points.
    return max(1.4826 * mad / math.sqrt(2.0), MIN_RELATIVE_NOISE)


def _l1_costs(values: Sequence[float], start: int) -> list[float]:
    """Sum of absolute deviations from the median of values[start:j], for every j > start.

    Two heaps (lower half as a max-heap, upper half as a min-heap) with running sums give
    each cost in O(log n): cost = sum(upper) - sum(lower) + (len(lower) - len(upper)) * median.
    """
    lower: list[float] = []  # negated: max-heap
    upper: list[float] = []
    sum_lower = sum_upper = 0.0
    out = []
    for y in values[start:]:
        if lower and y > -lower[0]:
            heapq.heappush(upper, y)
            sum_upper += y
        else:
            heapq.heappush(lower, -y)
            sum_lower += y
        if len(lower) > len(upper) + 1:
            moved = -heapq.heappop(lower)
            sum_lower -= moved
            heapq.heappush(upper, moved)
            sum_upper += moved
        elif len(upper) > len(lower):
            moved = heapq.heappop(upper)
            sum_upper -= moved
            heapq.heappush(lower, -moved)
            sum_lower += moved
        med = -lower[0]
        out.append(sum_upper - sum_lower + (len(lower) - len(upper)) * med)
    return out


def detect_steps(
    series: Sequence[float | None],
    *,
    penalty: float = STEP_PENALTY,
    min_size: int = STEP_MIN_SIZE,
) -> list[Segment]:
    """Piecewise-constant segmentation of a positive series.

    Args:
        series: values in time order; ``None``/NaN (failed or skipped runs) and
            non-positive values are ignored.
        penalty: multiplier of the per-segment cost (see :data:`STEP_PENALTY`).
        min_size: fewest valid points per segment.

    Returns:
        Segments covering the input in order, each with its median level; empty when the
        series has no valid point.

    Example:
        >>> [(s.start, s.end) for s in detect_steps([1.0, None, 1.0, 1.0])]
        [(0, 4)]
    """
    points = [
        (i, float(v)) for i, v in enumerate(series) if v is not None and not math.isnan(float(v)) and float(v) > 0
    ]
    n = len(points)
    if n == 0:
        return []
    logs = [math.log(v) for _, v in points]
    beta = penalty * _noise_sigma(logs) * math.log(max(n, 2))
    # cost[i][j - i - 1]: L1 cost of logs[i:j] around its median
    costs = [_l1_costs(logs, i) for i in range(n)]
    # best[j]: minimal penalised cost of logs[:j]; prev[j]: start of its last segment.
    best = [0.0] + [math.inf] * n
    prev = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(0, j):
            if j - i < min_size and not (i == 0 and j == n):  # too short, unless it is all there is
                continue
            total = best[i] + costs[i][j - i - 1] + beta
            if total < best[j]:
                best[j], prev[j] = total, i
    cuts = []
    j = n
    while j > 0:
        cuts.append((prev[j], j))
        j = prev[j]
    cuts.reverse()
    segments = []
    for k, (a, b) in enumerate(cuts):
        start = 0 if k == 0 else points[a][0]
        end = len(series) if k == len(cuts) - 1 else points[b][0]
        segments.append(Segment(start, end, median([v for _, v in points[a:b]]), b - a))
    return segments


def detect_regressions(
    segments: Sequence[Segment],
    threshold: float = DEFAULT_THRESHOLD,
    *,
    direction: str = "up",
) -> list[StepChange]:
    """Steps between consecutive segments whose relative change reaches ``threshold``.

    Args:
        segments: from :func:`detect_steps`.
        threshold: relative change that counts (:data:`~torchgauge.stats.compare.DEFAULT_THRESHOLD`).
        direction: ``"up"`` (regressions of lower-is-better metrics), ``"down"`` or ``"both"``.

    Returns:
        One :class:`StepChange` per qualifying step, in time order.
    """
    if direction not in ("up", "down", "both"):
        raise ValueError(f"invalid direction {direction!r}; accepted: up, down, both")
    out = []
    for a, b in zip(segments, segments[1:]):
        change = relative_change(a.level, b.level)
        up, down = change >= threshold, change <= -threshold
        if (direction == "up" and up) or (direction == "down" and down) or (direction == "both" and (up or down)):
            out.append(StepChange(b.start, a.level, b.level, change))
    return out
