"""Bisection over an ordered range of points (commits, versions): pure search, no I/O.

Points are indices ``0 .. n-1`` of an ordered range whose first point is good and whose
last is bad. What "good", "bad" and "differ" mean (a rank test on timing samples, a build
that fails) is the caller's business, passed in as callables; this module only decides
*which* point to look at next, so it is tested on synthetic ranges without git or torch.

Two searches:

* :func:`bisect_range` finds the first bad point, ``git bisect`` style: binary search on
  a good/bad/skip verdict per point. A point that cannot be judged (its build failed) is
  a skip: the search tries the untested point nearest the middle instead, and when only
  skipped points are left between the last good and the first bad, it reports all of
  them as candidates.
* :func:`find_culprits` finds several changes in one range: it splits a range whose ends
  differ at a middle point and recurses into each half whose own ends still differ.

Both call each callable at most once per point (or pair), so a caller can map them to
builds and measurements directly.

Example:
    >>> r = bisect_range(32, lambda i: "bad" if i >= 20 else "good")
    >>> r.culprits[0].first_bad, len(r.measured)
    (20, 7)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "BAD",
    "GOOD",
    "SKIP",
    "VERDICTS",
    "BisectResult",
    "BisectionError",
    "Culprit",
    "bisect_range",
    "find_culprits",
    "is_bimodal",
    "probe_order",
    "step_is_consistent",
]

GOOD, BAD, SKIP = "good", "bad", "skip"
VERDICTS = (GOOD, BAD, SKIP)
# Verdict recorded for a probe in find_culprits, where points are measured, not judged.
MEASURED = "measured"


class BisectionError(ValueError):
    """The range cannot be bisected (endpoints not good/bad, too short, ...)."""


@dataclass(frozen=True)
class Culprit:
    """Where one change happened: after ``last_good``, at one of ``candidates``.

    ``reason`` is ``"found"`` (one candidate), ``"skipped"`` (the points between the last
    good and the first bad could not be judged, so any of them may be the culprit) or
    ``"gradual"`` (multi-culprit mode: the ends differ but neither half does on its own,
    i.e. several small steps that each stay under the threshold).
    """

    last_good: int
    candidates: tuple[int, ...]  # ascending; the last one was judged bad (or differs)
    reason: str = "found"

    @property
    def found(self) -> bool:
        return self.reason == "found"

    @property
    def first_bad(self) -> int | None:
        """The culprit's index when it was pinned down to one point, else None."""
        return self.candidates[0] if self.found else None


@dataclass
class BisectResult:
    """Culprits in ascending order and every probe, in the order it was made."""

    culprits: list[Culprit] = field(default_factory=list)
    probes: list[tuple[int, str]] = field(default_factory=list)  # (index, verdict)

    @property
    def measured(self) -> list[int]:
        """Indices judged or measured (skips excluded), ascending."""
        return sorted({i for i, v in self.probes if v != SKIP})

    @property
    def skipped(self) -> list[int]:
        """Indices that had to be skipped, ascending."""
        return sorted({i for i, v in self.probes if v == SKIP})


def probe_order(lo: int, hi: int) -> Iterator[int]:
    """Indices strictly between ``lo`` and ``hi``, nearest the middle first.

    The order of preference when the middle point is skipped: its neighbours, alternating
    upwards and downwards, so the search stays as close to halving as it can.

    Example:
        >>> list(probe_order(0, 6))
        [3, 4, 2, 5, 1]
    """
    mid = (lo + hi) // 2
    if not lo < mid < hi:
        return
    yield mid
    for d in range(1, hi - lo):
        emitted = False
        for i in (mid + d, mid - d):
            if lo < i < hi:
                emitted = True
                yield i
        if not emitted:
            return


def _check_n(n: int) -> None:
    if n < 2:
        raise BisectionError(f"a range needs at least 2 points (a good and a bad one), got {n}")


def bisect_range(n: int, classify: Callable[[int], str]) -> BisectResult:
    """Binary search for the first bad point of ``0 .. n-1``.

    Args:
        n: number of points; point 0 must be good and point ``n-1`` bad.
        classify: ``classify(i)`` returns a verdict in :data:`VERDICTS`; called at most
            once per index, endpoints first.

    Returns:
        :class:`BisectResult` with one :class:`Culprit`: ``found`` with the first bad
        index, or ``skipped`` with every index that may be it.

    Raises:
        BisectionError: an endpoint is not what it should be, or a verdict is invalid.

    Example:
        >>> r = bisect_range(8, lambda i: "skip" if i == 3 else ("bad" if i >= 6 else "good"))
        >>> r.culprits[0].first_bad, r.skipped
        (6, [3])
    """
    _check_n(n)
    result = BisectResult()

    def ask(i: int) -> str:
        verdict = classify(i)
        if verdict not in VERDICTS:
            raise BisectionError(f"invalid verdict {verdict!r} for point {i}; accepted: {', '.join(VERDICTS)}")
        result.probes.append((i, verdict))
        return verdict

    for index, expected in ((0, GOOD), (n - 1, BAD)):
        verdict = ask(index)
        if verdict != expected:
            which = "good" if expected == GOOD else "bad"
            raise BisectionError(f"the {which} endpoint (point {index}) was judged {verdict!r}")
    lo, hi = 0, n - 1
    skipped: set[int] = set()
    while hi - lo > 1:
        probe = next((i for i in probe_order(lo, hi) if i not in skipped), None)
        if probe is None:  # everything between lo and hi is skipped
            break
        verdict = ask(probe)
        if verdict == SKIP:
            skipped.add(probe)
        elif verdict == BAD:
            hi = probe
        else:
            lo = probe
    candidates = tuple(range(lo + 1, hi + 1))
    result.culprits.append(Culprit(lo, candidates, "found" if len(candidates) == 1 else "skipped"))
    return result


def find_culprits(
    n: int,
    probe: Callable[[int], bool],
    differs: Callable[[int, int], bool],
    *,
    max_culprits: int | None = None,
) -> BisectResult:
    """Find every change in ``0 .. n-1`` by splitting ranges whose ends differ.

    Args:
        n: number of points; the two endpoints must differ.
        probe: ``probe(i)`` measures point ``i`` and returns False when it must be skipped
            (build failed); called at most once per index.
        differs: ``differs(i, j)`` for two measured points ``i < j``: True when they differ
            (the caller's statistical test); called at most once per pair.
        max_culprits: stop splitting once this many culprits are known (None: all).

    Returns:
        :class:`BisectResult` with the culprits in ascending order (``found``, ``skipped``
        or ``gradual``); probes carry the verdicts ``"measured"`` and ``"skip"``.

    Raises:
        BisectionError: an endpoint cannot be measured or the endpoints do not differ.

    Example:
        >>> level = lambda i: (i >= 5) + (i >= 11)
        >>> r = find_culprits(16, lambda i: True, lambda i, j: level(i) != level(j))
        >>> [c.first_bad for c in r.culprits]
        [5, 11]
    """
    _check_n(n)
    if max_culprits is not None and max_culprits < 1:
        raise BisectionError(f"max_culprits must be >= 1, got {max_culprits}")
    result = BisectResult()
    measured: dict[int, bool] = {}
    pair_cache: dict[tuple[int, int], bool] = {}

    def measure(i: int) -> bool:
        if i not in measured:
            measured[i] = bool(probe(i))
            result.probes.append((i, MEASURED if measured[i] else SKIP))
        return measured[i]

    def differ(i: int, j: int) -> bool:
        if (i, j) not in pair_cache:
            pair_cache[(i, j)] = bool(differs(i, j))
        return pair_cache[(i, j)]

    for index in (0, n - 1):
        if not measure(index):
            raise BisectionError(f"endpoint {index} could not be measured (skipped)")
    if not differ(0, n - 1):
        raise BisectionError("the endpoints do not differ: nothing to bisect")
    culprits: list[Culprit] = []
    stack = [(0, n - 1)]  # ranges whose measured ends differ; left halves are searched first
    while stack and (max_culprits is None or len(culprits) < max_culprits):
        lo, hi = stack.pop()
        if hi - lo == 1:
            culprits.append(Culprit(lo, (hi,)))
            continue
        mid = next((i for i in probe_order(lo, hi) if measure(i)), None)
        if mid is None:
            culprits.append(Culprit(lo, tuple(range(lo + 1, hi + 1)), "skipped"))
            continue
        left, right = differ(lo, mid), differ(mid, hi)
        if not left and not right:
            culprits.append(Culprit(lo, tuple(range(lo + 1, hi + 1)), "gradual"))
            continue
        if right:
            stack.append((mid, hi))
        if left:
            stack.append((lo, mid))
    result.culprits = sorted(culprits, key=lambda c: c.candidates[0])
    return result


# A point's samples are bimodal when, sorted, consecutive values jump by this factor with at
# least BIMODAL_MIN_FRACTION of them on each side: the signature of intra-op threads waiting for
# a descheduled peer (0.4 ms vs 24-170 ms in issue 17), which no rank test can judge.
BIMODAL_GAP_RATIO = 2.0
BIMODAL_MIN_FRACTION = 0.2


def is_bimodal(
    values: list[float], *, gap_ratio: float = BIMODAL_GAP_RATIO, min_fraction: float = BIMODAL_MIN_FRACTION
) -> bool:
    """True when ``values`` fall into two clusters at least ``gap_ratio`` apart.

    Example:
        >>> is_bimodal([0.4, 0.41, 0.42, 24.0, 30.0, 170.0])
        True
        >>> is_bimodal([10.0, 10.5, 11.0, 11.5, 12.0, 30.0])  # one outlier in six is not a second mode
        False
    """
    xs = sorted(v for v in values if v > 0)
    need = max(1, int(len(xs) * min_fraction + 0.999999))
    return any(xs[i] / xs[i - 1] >= gap_ratio for i in range(need, len(xs) - need + 1))


def step_is_consistent(step: float, total: float, threshold: float) -> bool:
    """Whether a culprit's step (relative change across it) can explain the endpoints' change.

    In log-ratio terms the step must lie within half the total change (plus the threshold)
    of it: a +34,592% step between endpoints 80% apart, or a 1% step for a doubling, means
    the samples around the culprit do not measure what the endpoints do.

    Example:
        >>> step_is_consistent(0.8, 0.85, 0.07), step_is_consistent(345.9, 0.8, 0.07)
        (True, False)
    """
    import math

    if step <= -1 or total <= -1:
        return False
    a, b = math.log1p(step), math.log1p(total)
    return abs(a - b) <= abs(b) / 2 + math.log1p(threshold)
