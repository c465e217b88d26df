"""Verdicts on bisection points: like the good end, like the bad end, or a skip.

Each point is judged against both endpoints with the test ``compare`` uses
(:func:`torchgauge.stats.compare.compare_samples`: median change >= threshold AND a one-sided
Mann-Whitney U test) or, for a deterministic count, the threshold alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...stats.compare import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    attainable_pvalue,
    compare_samples,
    median,
    relative_change,
)
from ...stats.deterministic import compare_counts
from ...stats.range_search import BAD, GOOD, SKIP, is_bimodal, step_is_consistent
from ...stats.summary import summarize
from .errors import BisectSetupError
from .metric_facts import default_threshold
from .point_cache import PointStore
from .report import format_change

__all__ = ["DEFAULT_RETRIES", "ENDPOINT_PROCESSES", "ConfigJudge", "Judging"]

# Fresh-process re-measurements of a point that looks like neither endpoint before it is
# assigned to the nearer one.
DEFAULT_RETRIES = 1
# Fresh processes each endpoint is measured in before the range is judged (time only).
ENDPOINT_PROCESSES = 2
_OPPOSITE = {"regression": "improvement", "improvement": "regression"}


@dataclass(frozen=True)
class Judging:
    """How points are judged; the defaults are ``compare``'s."""

    threshold: float = DEFAULT_THRESHOLD  # relative median change that counts
    alpha: float = DEFAULT_ALPHA  # significance level of the one-sided rank test
    retries: int = DEFAULT_RETRIES  # fresh re-measurements of an unclear point
    # Fraction of each point's fastest timing samples that is compared (1.0: all, as
    # ``compare`` does). Machine load only ever adds time, so on a shared machine the
    # fastest half still shows the code's speed when preemption inflates the rest.
    fastest: float = 1.0

    def __post_init__(self) -> None:
        if self.threshold <= 0:
            raise BisectSetupError(f"threshold must be > 0, got {self.threshold}")
        if not 0 < self.alpha < 1:
            raise BisectSetupError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.retries < 0:
            raise BisectSetupError(f"retries must be >= 0, got {self.retries}")
        if not 0 < self.fastest <= 1:
            raise BisectSetupError(f"fastest must be in (0, 1], got {self.fastest}")

    def judged_count(self, repeat: int) -> int:
        """How many of a point's ``repeat`` timing samples the rank test sees after ``fastest``."""
        return max(1, math.ceil(repeat * self.fastest))

    def check_power(self, repeat: int) -> None:
        """Refuse a repeat count whose judged samples can never reach ``alpha``.

        With ``--fastest 20%`` of the default 15 repeats, 3 samples a point remain; a rank
        test on 3 against 3 cannot go below p = 0.05, so every point would be unclear and
        the bisection would end in a list of candidates (measured: 8 of 8 trials).

        Example:
            >>> Judging(fastest=0.2).check_power(60)  # 12 samples a point: fine
            >>> Judging(fastest=0.2).judged_count(15)  # the default repeat: refused (needs 21)
            3
        """
        k = self.judged_count(repeat)
        if attainable_pvalue(k, k) <= self.alpha:
            return
        needed = next(
            r for r in range(repeat + 1, 100_000) if attainable_pvalue(*[self.judged_count(r)] * 2) <= self.alpha
        )
        raise BisectSetupError(
            f"--fastest {self.fastest:.0%} of --repeat {repeat} leaves {k} samples a point; a rank test on {k} "
            f"against {k} cannot reach alpha {self.alpha:g} (best p {attainable_pvalue(k, k):.2g}); "
            f"use --repeat {needed} or more"
        )

    @classmethod
    def for_metric(cls, metric: str, *, threshold: float | None = None, **settings: Any) -> Judging:
        """Judging of ``metric`` with ``threshold``, or ``compare``'s threshold for it when None."""
        return cls(threshold=threshold or default_threshold(metric), **settings)


class ConfigJudge:
    """Verdicts for one configuration: like the good end, like the bad end, or a skip."""

    def __init__(self, store: PointStore, label: str, n: int, judging: Judging) -> None:
        self.store, self.label, self.n, self.judging = store, label, n, judging
        self.direction: str | None = None
        self.uncertain: list[str] = []

    def samples(self, index: int) -> list[float] | None:
        """The point's values as judged.

        For time: the process with the lowest median when the point was measured more than
        once (load only ever slows a process down, so the fastest one is the least
        disturbed; pooling would mix a slow process into the verdict), then the fastest
        fraction of its samples. For counts: the latest measurement.
        """
        groups = self.store.groups(index, self.label)
        if groups is None:
            return None
        if self.store.spec.deterministic:
            return groups[-1]
        values = min(groups, key=median)
        if self.judging.fastest >= 1:
            return values
        return sorted(values)[: max(1, math.ceil(len(values) * self.judging.fastest))]

    def compare(self, base: list[float], new: list[float]):
        """``compare``'s test: rank test + threshold for time, the threshold alone for counts."""
        if self.store.spec.deterministic:
            return compare_counts(median(base), median(new), threshold=self.judging.threshold)
        return compare_samples(base, new, threshold=self.judging.threshold, alpha=self.judging.alpha)

    def endpoints(self) -> tuple[Any, str]:
        """Compare the endpoints; returns (Change, message) and sets the direction.

        For time, each endpoint is first measured in :data:`ENDPOINT_PROCESSES` fresh
        processes: one slow process at an end must not make the whole range look unchanged
        (a doubling used to read ``not_reproduced``) or changed.
        """
        if not self.store.spec.deterministic:
            for index in (0, self.n - 1):
                for _ in range(ENDPOINT_PROCESSES):
                    groups = self.store.groups(index, self.label)
                    if groups is None or len(groups) >= ENDPOINT_PROCESSES:
                        break
                    label = self.store.points[index].label
                    self.store.on_event(f"re-measuring the endpoint {label} in a fresh process")
                    self.store.remeasure(index)
        good, bad = self.samples(0), self.samples(self.n - 1)
        for index, samples, which in ((0, good, "good"), (self.n - 1, bad, "bad")):
            if samples is None:
                reason = (self.store.skip_reason(index, self.label) or "no samples").splitlines()[0]
                return None, f"the {which} endpoint {self.store.points[index].label} has no measurement: {reason}"
        change = self.compare(good, bad)
        if change.verdict != "unchanged":
            self.direction = change.verdict
        return change, ""

    def classify(self, index: int) -> str:
        """GOOD/BAD/SKIP for :func:`bisect_range`, judged against both endpoints.

        A point is bad when it differs from the good end in the endpoints' direction and
        not from the bad end; good when it differs from the bad end the opposite way and
        not from the good end. Anything else (between the ends, beyond either end: noise,
        a process that ran slow, an intermediate step) is re-measured in a fresh process;
        if still unclear the point goes to the end whose median is nearer in log-ratio and
        is listed as uncertain.
        """
        if index in (0, self.n - 1):  # judged by endpoints() already
            return GOOD if index == 0 else BAD
        good, bad = self.samples(0), self.samples(self.n - 1)
        for attempt in range(self.judging.retries + 1):
            x = self.samples(index)
            if x is None:
                return SKIP
            vs_good, vs_bad = self.compare(good, x).verdict, self.compare(bad, x).verdict
            if vs_good == self.direction and vs_bad == "unchanged":
                return BAD
            if vs_good == "unchanged" and vs_bad == _OPPOSITE[self.direction]:
                return GOOD
            if attempt < self.judging.retries and not self.store.spec.deterministic:
                self.store.on_event(f"{self.store.points[index].label} is unclear for {self.label}; measuring again")
                self.store.remeasure(index)
        self.uncertain.append(self.store.points[index].label)
        mg, mb, mx = median(good), median(bad), median(x)
        if min(mg, mb, mx) <= 0:  # counts can be 0: compare distances instead of ratios
            return GOOD if abs(mx - mg) <= abs(mx - mb) else BAD
        return GOOD if abs(math.log(mx / mg)) <= abs(math.log(mx / mb)) else BAD

    def differs(self, i: int, j: int) -> bool:
        """For :func:`find_culprits`: points i < j differ beyond threshold and noise."""
        return self.compare(self.samples(i), self.samples(j)).verdict != "unchanged"

    def change(self, i: int, j: int) -> float | None:
        """Relative change of the judged medians from point i to point j."""
        a, b = self.samples(i), self.samples(j)
        return relative_change(median(a), median(b)) if a and b else None

    def doubts(self, last_good: int, first_bad: int, total: float) -> list[str]:
        """Why a found culprit is not certain: bimodal samples around it, a step that cannot
        explain the endpoints' change, or points between assigned by nearness (time only)."""
        if self.store.spec.deterministic:
            return []
        points, reasons = self.store.points, []
        for index in sorted({0, last_good, first_bad, self.n - 1}):
            judged = self.samples(index)  # after --fastest: a deliberately dropped slow mode is no doubt
            if judged and is_bimodal(judged):
                reasons.append(f"bimodal samples at {points[index].label}")
        step = self.change(last_good, first_bad)
        if step is not None and not step_is_consistent(step, total, self.judging.threshold):
            reasons.append(f"the step {format_change(step)} does not match the endpoints' {format_change(total)}")
        if self.uncertain:
            reasons.append(f"points assigned by nearness: {', '.join(self.uncertain)}")
        return reasons

    def noise(self, indices: Sequence[int]) -> float | None:
        """Largest IQR/median of the samples judged at these points (None for counts)."""
        if self.store.spec.deterministic:
            return None
        spreads = [summarize(s).relative_iqr for i in indices if (s := self.samples(i))]
        return max(spreads, default=None)
