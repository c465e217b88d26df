"""Exact (Clopper-Pearson) confidence bounds on a rate measured as k events in n trials.

Benchmarks of the regression guard count events (false alarms in A/A comparisons, detections
of planted slowdowns) and must state what the count bounds: "0 false alarms in 45" allows a
rate up to 6.4% at 95% confidence, not 0%. The bounds invert the binomial distribution
exactly, so they hold for any n (no normal approximation), and are conservative: their
coverage is at least the stated confidence. Pure functions of integers.
"""

from __future__ import annotations

import math

__all__ = ["binomial_cdf", "binomial_interval", "binomial_lower_bound", "binomial_upper_bound"]

# Bisection on p stops when the bracket is this narrow (rates are reported to 0.1%).
_TOLERANCE = 1e-12


def _check(events: int, trials: int, confidence: float) -> None:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"invalid trials {trials!r}; accepted: an integer >= 1")
    if isinstance(events, bool) or not isinstance(events, int) or not 0 <= events <= trials:
        raise ValueError(f"invalid events {events!r}; accepted: an integer from 0 to trials ({trials})")
    if not 0 < confidence < 1:
        raise ValueError(f"invalid confidence {confidence!r}; accepted: a fraction in (0, 1), e.g. 0.95")


def binomial_cdf(events: int, trials: int, p: float) -> float:
    """P(X <= events) for X ~ Binomial(trials, p), summed in log space (no overflow at large n).

    Example:
        >>> round(binomial_cdf(1, 3, 0.5), 3)
        0.5
    """
    if not 0 <= p <= 1:
        raise ValueError(f"invalid probability {p!r}; accepted: a number in [0, 1]")
    if events < 0:
        return 0.0
    if events >= trials or p == 0:
        return 1.0
    if p == 1:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(trials + 1)
    total = 0.0
    for i in range(events + 1):
        log_term = log_n - math.lgamma(i + 1) - math.lgamma(trials - i + 1) + i * log_p + (trials - i) * log_q
        total += math.exp(log_term)
    return min(1.0, total)


def _solve(target: float, events: int, trials: int) -> float:
    """The p in (0, 1) where P(X <= events) = target (the CDF falls as p grows)."""
    lo, hi = 0.0, 1.0
    while hi - lo > _TOLERANCE:
        mid = (lo + hi) / 2
        if binomial_cdf(events, trials, mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def binomial_upper_bound(events: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided exact upper confidence bound on the rate of an event seen ``events`` times in ``trials``.

    The largest p for which seeing ``events`` or fewer still has probability at least
    ``1 - confidence``. For 0 events it is ``1 - (1 - confidence) ** (1 / trials)``, about
    ``3 / trials`` at 95% (the "rule of three"). Use it for "at most" claims (a false-alarm rate).

    Raises:
        ValueError: trials < 1, events outside [0, trials], or confidence outside (0, 1).

    Example:
        >>> round(binomial_upper_bound(0, 300), 4)
        0.0099
        >>> round(binomial_upper_bound(3, 300), 4)
        0.0256
    """
    _check(events, trials, confidence)
    if events == trials:
        return 1.0
    if events == 0:
        return 1.0 - (1.0 - confidence) ** (1.0 / trials)
    return _solve(1.0 - confidence, events, trials)


def binomial_lower_bound(events: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided exact lower confidence bound on the rate (for "at least" claims: a detection rate).

    The smallest p for which seeing ``events`` or more still has probability at least
    ``1 - confidence``; 0 for 0 events, ``(1 - confidence) ** (1 / trials)`` when every trial was an event.

    Example:
        >>> round(binomial_lower_bound(30, 30), 3)
        0.905
        >>> binomial_lower_bound(0, 10)
        0.0
    """
    _check(events, trials, confidence)
    if events == 0:
        return 0.0
    if events == trials:
        return (1.0 - confidence) ** (1.0 / trials)
    # P(X >= k; p) = 1 - P(X <= k - 1; p) = 1 - confidence  <=>  P(X <= k - 1; p) = confidence
    return _solve(confidence, events - 1, trials)


def binomial_interval(events: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval: each one-sided bound at ``(1 + confidence) / 2``.

    Example:
        >>> [round(b, 4) for b in binomial_interval(5, 10)]
        [0.1871, 0.8129]
    """
    _check(events, trials, confidence)
    one_sided = (1.0 + confidence) / 2
    return binomial_lower_bound(events, trials, one_sided), binomial_upper_bound(events, trials, one_sided)
