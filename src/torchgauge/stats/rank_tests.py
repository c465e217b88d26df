"""The Mann-Whitney U rank test and the sign test: one-sided p-values over lists of floats.

Pure functions (no torch, no I/O); :mod:`torchgauge.stats.compare` builds its change tests on them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["ALTERNATIVES", "EXACT_MAX_N", "RankTest", "mann_whitney_u", "min_exact_pvalue", "sign_test"]

ALTERNATIVES = ("greater", "less", "two-sided")
# Largest sample size per side for the exact U distribution (no ties); beyond it, or with
# ties, the normal approximation with tie and continuity corrections is used.
EXACT_MAX_N = 50


@dataclass(frozen=True)
class RankTest:
    """Result of a Mann-Whitney U test."""

    u: float  # U of the second sample: pairs (x, y) with y > x, ties counting 1/2
    p_value: float
    method: str  # "exact" or "normal"


@lru_cache(maxsize=64)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """Number of arrangements of m x's and n y's giving each U = 0..m*n (no ties).

    These are the coefficients of the Gaussian binomial ``[m+n choose m]_q`` =
    prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i); each factor is a multiply and an exact
    division by (1 - q^i), i.e. a running sum, so the whole table costs O(m^2 n).
    """
    size = m * n + 1
    poly = [1] + [0] * (size - 1)
    for i in range(1, m + 1):
        for k in range(size - 1, n + i - 1, -1):  # times (1 - q^(n+i))
            poly[k] -= poly[k - n - i]
        for k in range(i, size):  # divided by (1 - q^i)
            poly[k] += poly[k - i]
    return tuple(poly)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def mann_whitney_u(x: Sequence[float], y: Sequence[float], alternative: str = "greater") -> RankTest:
    """One- or two-sided Mann-Whitney U test of ``y`` against ``x``.

    Args:
        x: first sample (the baseline).
        y: second sample (the candidate).
        alternative: ``"greater"`` (y tends to be larger, e.g. slower), ``"less"`` or
            ``"two-sided"``.

    Returns:
        :class:`RankTest` with U of ``y`` and the p-value: exact (enumerated distribution)
        without ties and at most :data:`EXACT_MAX_N` values per side, otherwise the normal
        approximation with tie correction and continuity correction.

    Example:
        >>> mann_whitney_u([1, 2, 3], [4, 5, 6]).p_value  # 1 arrangement of C(6, 3) = 20
        0.05
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"invalid alternative {alternative!r}; accepted: {', '.join(ALTERNATIVES)}")
    xs, ys = [float(v) for v in x], [float(v) for v in y]
    m, n = len(xs), len(ys)
    if m == 0 or n == 0:
        raise ValueError("mann_whitney_u needs at least one value on each side")
    u = sum(1.0 if b > a else 0.5 if b == a else 0.0 for a in xs for b in ys)
    mean_u = m * n / 2.0
    pooled = xs + ys
    ties = len(set(pooled)) < len(pooled)
    if not ties and max(m, n) <= EXACT_MAX_N:
        counts = _u_counts(m, n)
        total = float(sum(counts))
        k = int(round(u))
        upper = sum(counts[k:]) / total  # P(U >= u)
        lower = sum(counts[: k + 1]) / total  # P(U <= u)
        p = {"greater": upper, "less": lower, "two-sided": min(1.0, 2.0 * min(upper, lower))}[alternative]
        return RankTest(u, p, "exact")
    # Tie-corrected variance: sum over tie groups of (t^3 - t).
    big_n = m + n
    tie_term = 0.0
    for value in set(pooled):
        t = pooled.count(value)
        tie_term += t**3 - t
    var = m * n / 12.0 * ((big_n + 1) - tie_term / (big_n * (big_n - 1)))
    if var <= 0:  # every value identical: no evidence either way
        return RankTest(u, 1.0, "normal")
    sd = math.sqrt(var)
    upper = _normal_sf((u - mean_u - 0.5) / sd)
    lower = _normal_sf((mean_u - u - 0.5) / sd)
    p = {"greater": upper, "less": lower, "two-sided": min(1.0, 2.0 * min(upper, lower))}[alternative]
    return RankTest(u, min(1.0, p), "normal")


def sign_test(values: Sequence[float], reference: float, alternative: str = "greater") -> float:
    """Exact sign test: p-value that ``values`` lie above (or below) ``reference`` by chance.

    Used when only one side could be re-measured: each fresh process median is a
    Bernoulli(1/2) draw above or below the reference under the null. Values equal to the
    reference carry no information and are dropped.

    Example:
        >>> sign_test([2, 3, 4], 1.0)  # all three above: 1/8
        0.125
    """
    if alternative not in ("greater", "less"):
        raise ValueError(f"invalid alternative {alternative!r}; accepted: greater, less")
    above = sum(1 for v in values if v > reference)
    below = sum(1 for v in values if v < reference)
    n = above + below
    if n == 0:
        return 1.0
    k = above if alternative == "greater" else below
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2.0**n


def min_exact_pvalue(m: int, n: int) -> float:
    """Smallest one-sided exact Mann-Whitney p-value with m and n values: 1 / C(m+n, m).

    Example:
        >>> min_exact_pvalue(3, 3)  # three processes per side can never reach p < 0.05
        0.05
    """
    return 1.0 / math.comb(m + n, m)
