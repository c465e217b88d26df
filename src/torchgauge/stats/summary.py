"""Summaries of raw samples: median, quartiles, IQR and a distribution-free CI of the median.

Pure functions over sequences of floats; no torch, no I/O (pytest-benchmark's ``Stats``).
Quartiles use linear interpolation between order statistics (NumPy's default "linear"
method, i.e. ``statistics.quantiles(..., method="inclusive")``), so they are defined for n=1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

__all__ = [
    "IQR_WARN_THRESHOLD",
    "MEDIAN_CI_LEVEL",
    "Summary",
    "median_ci",
    "quantile",
    "summarize",
]

# Relative IQR (IQR / median) above which a measurement is flagged as noisy
# (torch.utils.benchmark uses the same 10% mark).
IQR_WARN_THRESHOLD = 0.10
# Confidence level of the order-statistic interval around the median.
MEDIAN_CI_LEVEL = 0.95


def _clean(samples: Sequence[float]) -> list[float]:
    xs = sorted(float(x) for x in samples if x is not None and not math.isnan(float(x)))
    if not xs:
        raise ValueError("no samples to summarize (empty or all NaN)")
    return xs


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` in [0, 1] of already sorted values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    n = len(sorted_xs)
    if n == 0:
        raise ValueError("quantile of an empty sequence")
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * frac


def _binom_cdf(k: int, n: int) -> float:
    # P(X <= k) for X ~ Binomial(n, 1/2)
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median_ci(samples: Sequence[float], level: float = MEDIAN_CI_LEVEL) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    Trimming ``k`` values from each end gives ``[x_(k+1), x_(n-k)]`` (1-based), which covers
    the median with probability ``1 - 2 * P(Binomial(n, 1/2) <= k)``; the largest ``k``
    keeping coverage at least ``level`` is chosen. With too few samples for the level
    (n < 6 at 95%) the full range is returned, the widest honest answer.
    """
    xs = _clean(samples)
    n = len(xs)
    alpha = 1.0 - level
    k = 0  # number of order statistics trimmed from each end
    while k + 1 < n / 2 and 2 * _binom_cdf(k + 1, n) <= alpha:
        k += 1
    return xs[k], xs[n - 1 - k]


@dataclass(frozen=True)
class Summary:
    """Derived statistics of one sample set (all in the samples' unit)."""

    n: int
    median: float
    mean: float
    stdev: float  # sample standard deviation; 0.0 for n == 1
    min: float
    max: float
    q1: float
    q3: float
    iqr: float
    ci_low: float  # MEDIAN_CI_LEVEL interval of the median
    ci_high: float

    @property
    def relative_iqr(self) -> float:
        return self.iqr / self.median if self.median else math.inf

    @property
    def noisy(self) -> bool:
        """True when IQR / median exceeds :data:`IQR_WARN_THRESHOLD`."""
        return self.relative_iqr > IQR_WARN_THRESHOLD

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def summarize(samples: Sequence[float]) -> Summary:
    """Median, spread and a CI of the median for ``samples`` (NaN and None are ignored).

    Example:
        >>> s = summarize([3.0, 1.0, 2.0, 4.0])
        >>> (s.median, s.q1, s.q3, s.iqr)
        (2.5, 1.75, 3.25, 1.5)
    """
    xs = _clean(samples)
    n = len(xs)
    mean = sum(xs) / n
    stdev = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    q1, q3 = quantile(xs, 0.25), quantile(xs, 0.75)
    lo, hi = median_ci(xs)
    return Summary(
        n=n,
        median=quantile(xs, 0.5),
        mean=mean,
        stdev=stdev,
        min=xs[0],
        max=xs[-1],
        q1=q1,
        q3=q3,
        iqr=q3 - q1,
        ci_low=lo,
        ci_high=hi,
    )
