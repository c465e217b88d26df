"""Change tests: is B worse than A, beyond noise and beyond a threshold?

Pure functions over lists of floats (asv ``_stats``): no torch, no I/O. A change counts
only when **both** hold (asv, pytest-benchmark's checks, the TorchBench 7% rule):

* the relative change of the medians reaches the threshold (:data:`DEFAULT_THRESHOLD`), and
* a one-sided Mann-Whitney U rank test on the raw samples is significant at
  :data:`DEFAULT_ALPHA` after correcting for the number of comparisons (Holm or
  Benjamini-Hochberg).

Deterministic metrics (instruction counts, operator counts, FLOPs, peak memory) have no
sampling noise worth a test and use the threshold alone (:func:`compare_values`).

Samples taken in one process are correlated: a process that happens to run 10% slow makes
all of its samples slow, so a rank test on them is over-confident about *between-process*
noise. :func:`pooled_or_group_medians` therefore tests per-process medians whenever each
side has at least :data:`MIN_GROUPS` processes (what ``compare --confirm`` produces).

Example:
    >>> base = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.3, 10.1, 9.9, 10.0]
    >>> new = [x * 1.10 for x in base]
    >>> c = compare_samples(base, new)
    >>> c.verdict, round(c.change, 3)
    ('regression', 0.1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .corrections import CORRECTIONS, DEFAULT_CORRECTION, adjust_pvalues, benjamini_hochberg, holm
from .rank_tests import ALTERNATIVES, EXACT_MAX_N, RankTest, mann_whitney_u, min_exact_pvalue, sign_test

__all__ = [
    "ALTERNATIVES",
    "CORRECTIONS",
    "DEFAULT_ALPHA",
    "DEFAULT_CORRECTION",
    "DEFAULT_THRESHOLD",
    "EXACT_MAX_N",
    "MIN_GROUPS",
    "VERDICTS",
    "Change",
    "RankTest",
    "adjust_pvalues",
    "attainable_pvalue",
    "benjamini_hochberg",
    "compare_samples",
    "compare_values",
    "holm",
    "is_regression",
    "judge",
    "mann_whitney_u",
    "median",
    "min_exact_pvalue",
    "pooled_or_group_medians",
    "rounds_needed",
    "relative_change",
    "sign_test",
]

# The TorchBench paper's CI threshold: 7% worse execution time or memory (sec. 4.2.1).
DEFAULT_THRESHOLD = 0.07
# Family-wise significance level of the rank test, after correction.
DEFAULT_ALPHA = 0.01
# "inconclusive": the rank test could not reach alpha with these sample sizes and this
# correction whatever the data (see :func:`attainable_pvalue`), so "unchanged" would be a guess.
VERDICTS = ("regression", "improvement", "unchanged", "inconclusive")
# Processes per side from which per-process medians, not pooled samples, are tested.
MIN_GROUPS = 3


def median(values: Sequence[float]) -> float:
    """Median of ``values`` (mean of the middle two for an even count)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("median of an empty sequence")
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def relative_change(base: float, new: float) -> float:
    """``new / base - 1``: +0.1 is 10% higher (worse for time and memory)."""
    if base == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return new / base - 1.0


@dataclass(frozen=True)
class Change:
    """One metric compared between a base and a new measurement.

    ``p_greater``/``p_less`` are the raw one-sided p-values (None for deterministic
    metrics); :func:`judge` fills ``p_value`` with the corrected one for the direction of
    the change and sets the verdict.
    """

    base: float  # median (or the single value) of the base
    new: float
    change: float  # relative change new / base - 1
    threshold: float  # relative change that counts (both directions)
    alpha: float | None  # significance level; None for deterministic metrics
    p_greater: float | None = None  # H1: new is larger (worse)
    p_less: float | None = None  # H1: new is smaller (better)
    p_value: float | None = None  # corrected p of the direction of the change
    verdict: str = "unchanged"  # one of VERDICTS
    n_base: int = 1  # values tested per side (samples or process medians)
    n_new: int = 1
    reason: str | None = None  # why the verdict is "inconclusive"

    @property
    def tested(self) -> bool:
        return self.alpha is not None

    @property
    def beyond_threshold(self) -> bool:
        """The median change reaches the threshold (either direction)."""
        return abs(self.change) >= self.threshold and self.change != 0

    def _decide(
        self, p_greater: float | None, p_less: float | None, tests: int = 1, correction: str = "none"
    ) -> Change:
        # ``change > 0`` as well: with threshold 0 ("any change") equal values are not a regression.
        if self.change >= self.threshold and self.change > 0 and (not self.tested or p_greater <= self.alpha):
            return replace(self, p_value=p_greater, verdict="regression", reason=None)
        if self.change <= -self.threshold and self.change < 0 and (not self.tested or p_less <= self.alpha):
            return replace(self, p_value=p_less, verdict="improvement", reason=None)
        p = None if not self.tested else (p_greater if self.change >= 0 else p_less)
        if self.tested:
            best = attainable_pvalue(self.n_base, self.n_new, tests, correction)
            if best > self.alpha:
                reason = (
                    f"cannot reach alpha {self.alpha:g}: with {self.n_base} vs {self.n_new} values the smallest "
                    f"one-sided p is {min_exact_pvalue(self.n_base, self.n_new):.2g}"
                    + (
                        f", {best:.2g} after {correction} over {tests} tests"
                        if tests > 1 and correction != "none"
                        else ""
                    )
                    + "; measure more repeats or processes"
                )
                return replace(self, p_value=p, verdict="inconclusive", reason=reason)
        return replace(self, p_value=p, verdict="unchanged", reason=None)


def compare_samples(
    base: Sequence[float],
    new: Sequence[float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
) -> Change:
    """Compare two sample sets: threshold on the medians AND a one-sided rank test.

    The verdict here is uncorrected (a single comparison); pass several changes through
    :func:`judge` to correct for their number.

    Args:
        base: raw samples of the baseline (e.g. step times in ms).
        new: raw samples of the candidate.
        threshold: relative change of the medians that counts, e.g. 0.07.
        alpha: significance level of the one-sided test.

    Returns:
        A :class:`Change` with verdict ``regression``, ``improvement`` or ``unchanged``.
    """
    b = [float(v) for v in base if v is not None and not math.isnan(float(v))]
    n = [float(v) for v in new if v is not None and not math.isnan(float(v))]
    if not b or not n:
        raise ValueError("compare_samples needs at least one sample on each side")
    mb, mn = median(b), median(n)
    change = Change(
        base=mb,
        new=mn,
        change=relative_change(mb, mn),
        threshold=threshold,
        alpha=alpha,
        p_greater=mann_whitney_u(b, n, "greater").p_value,
        p_less=mann_whitney_u(b, n, "less").p_value,
        n_base=len(b),
        n_new=len(n),
    )
    return change._decide(change.p_greater, change.p_less)


def compare_values(base: float, new: float, *, threshold: float = DEFAULT_THRESHOLD) -> Change:
    """Compare two deterministic values (counts, peak memory): the threshold alone decides.

    Example:
        >>> compare_values(1000, 1100).verdict
        'regression'
    """
    base, new = float(base), float(new)
    if math.isnan(base) or math.isnan(new):
        raise ValueError("compare_values needs two numbers, got NaN")
    return Change(base=base, new=new, change=relative_change(base, new), threshold=threshold, alpha=None)._decide(
        None, None
    )


def judge(changes: Sequence[Change], correction: str = DEFAULT_CORRECTION) -> list[Change]:
    """Re-decide tested changes with p-values corrected for their number.

    Regressions and improvements are two families (each one-sided test is corrected over
    all tested changes); deterministic changes pass through unchanged.
    """
    tested = [i for i, c in enumerate(changes) if c.tested]
    greater = adjust_pvalues([changes[i].p_greater for i in tested], correction)
    less = adjust_pvalues([changes[i].p_less for i in tested], correction)
    out = list(changes)
    for j, i in enumerate(tested):
        out[i] = changes[i]._decide(greater[j], less[j], len(tested), correction)
    return out


def attainable_pvalue(m: int, n: int, tests: int = 1, correction: str = "none") -> float:
    """The smallest corrected one-sided p a rank test on m and n values can reach.

    The best raw p is :func:`min_exact_pvalue`; a Holm or Benjamini-Hochberg correction over
    ``tests`` tests multiplies the smallest p of the family by ``tests``, so that is what a
    single change among ``tests`` must clear. A test whose attainable p exceeds alpha can
    never flag anything: its "no change" is no evidence.

    Example:
        >>> attainable_pvalue(3, 3)  # --repeat 3: never below 0.05
        0.05
        >>> round(attainable_pvalue(10, 10, 400, "holm"), 4)
        0.0022
    """
    if m < 1 or n < 1:
        return 1.0
    factor = tests if correction in ("holm", "bh") else 1
    return min(1.0, factor * min_exact_pvalue(m, n))


def is_regression(
    base: Sequence[float],
    new: Sequence[float],
    factor: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
) -> bool:
    """True when ``new`` is at least ``factor`` slower than ``base`` and significantly so."""
    return compare_samples(base, new, threshold=factor, alpha=alpha).verdict == "regression"


def pooled_or_group_medians(groups: Sequence[Sequence[float]], min_groups: int = MIN_GROUPS) -> list[float]:
    """Values to test for one side measured in ``len(groups)`` processes.

    With at least ``min_groups`` processes, one median per process: those are independent,
    so the rank test's false-alarm rate holds against between-process noise. With fewer,
    all samples pooled (the test then speaks only of within-process noise).

    Example:
        >>> pooled_or_group_medians([[1.0, 2.0, 3.0]])
        [1.0, 2.0, 3.0]
        >>> pooled_or_group_medians([[1.0, 2.0, 9.0], [2.0, 3.0, 4.0], [5.0, 5.0, 6.0]])
        [2.0, 3.0, 5.0]
    """
    groups = [list(g) for g in groups if len(g)]
    if len(groups) >= min_groups:
        return [median(g) for g in groups]
    return [v for g in groups for v in g]


def rounds_needed(n_tests: int, alpha: float = DEFAULT_ALPHA, *, margin: float = 4.0, minimum: int = 5) -> int:
    """Processes per side so that ``n_tests`` corrected tests can reach ``alpha`` with room to spare.

    With k processes per side the best attainable one-sided p is ``1 / C(2k, k)``; a Holm
    correction over ``n_tests`` multiplies it by up to ``n_tests``. The smallest k (at least
    ``minimum``) with ``n_tests / C(2k, k) <= alpha / margin`` is returned, so that a real
    change does not need perfectly separated processes to be confirmed.

    Example:
        >>> rounds_needed(1, 0.01), rounds_needed(10, 0.01)
        (6, 8)
    """
    if n_tests < 1 or not 0 < alpha < 1:
        raise ValueError("rounds_needed needs n_tests >= 1 and 0 < alpha < 1")
    k = max(1, minimum)
    while n_tests * min_exact_pvalue(k, k) > alpha / margin:
        k += 1
    return k
