"""Exact binomial (Clopper-Pearson) bounds: the rates a benchmark's event counts allow."""

from __future__ import annotations

import math

import pytest

from torchgauge.stats.binomial import (
    binomial_cdf,
    binomial_interval,
    binomial_lower_bound,
    binomial_upper_bound,
)

# Reference values: the beta quantiles that define Clopper-Pearson bounds (upper = Beta(k+1, n-k)
# at the confidence, lower = Beta(k, n-k+1) at 1 - confidence), from scipy.stats.beta.ppf.
REFERENCE = [
    # events, trials, one-sided 95% lower, one-sided 95% upper
    (0, 300, 0.0, 0.009936),
    (3, 300, 0.002731, 0.025641),
    (1, 10, 0.005116, 0.394163),
    (5, 10, 0.222441, 0.777559),
    (9, 10, 0.605837, 0.994884),
    (2, 650, 0.000547, 0.009654),
    (45, 50, 0.801167, 0.959763),
    (30, 30, 0.904966, 1.0),
]


@pytest.mark.parametrize(("events", "trials", "lower", "upper"), REFERENCE)
def test_bounds_match_the_beta_quantiles(events: int, trials: int, lower: float, upper: float) -> None:
    assert binomial_lower_bound(events, trials) == pytest.approx(lower, abs=2e-6)
    assert binomial_upper_bound(events, trials) == pytest.approx(upper, abs=2e-6)


def test_the_upper_bound_is_the_rate_at_which_so_few_events_become_improbable() -> None:
    # the defining property: at the bound, k or fewer events have probability 1 - confidence
    for events, trials in [(1, 20), (4, 120), (12, 400)]:
        for confidence in (0.9, 0.95, 0.99):
            p = binomial_upper_bound(events, trials, confidence)
            assert binomial_cdf(events, trials, p) == pytest.approx(1 - confidence, abs=1e-9)
            q = binomial_lower_bound(events, trials, confidence)
            assert 1 - binomial_cdf(events - 1, trials, q) == pytest.approx(1 - confidence, abs=1e-9)


def test_zero_events_give_the_rule_of_three() -> None:
    for trials in (100, 300, 1000):
        assert binomial_upper_bound(0, trials) == pytest.approx(1 - 0.05 ** (1 / trials))
        assert binomial_upper_bound(0, trials) == pytest.approx(3 / trials, rel=0.02)
    assert binomial_upper_bound(0, 45) == pytest.approx(0.0644, abs=1e-4)  # "0 of 45" bounds nothing below 6%


def test_all_events_bound_the_rate_from_below_only() -> None:
    assert binomial_upper_bound(10, 10) == 1.0
    assert binomial_lower_bound(10, 10) == pytest.approx(0.05**0.1)
    assert binomial_lower_bound(0, 10) == 0.0


def test_more_trials_narrow_the_bounds_around_the_observed_rate() -> None:
    widths = [binomial_upper_bound(n // 10, n) - binomial_lower_bound(n // 10, n) for n in (10, 100, 1000)]
    assert widths[0] > widths[1] > widths[2]
    lo, hi = binomial_interval(100, 1000)
    assert lo < 0.1 < hi


def test_the_two_sided_interval_splits_the_confidence() -> None:
    lo, hi = binomial_interval(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.1871, 0.8129)  # the textbook Clopper-Pearson interval
    assert binomial_interval(0, 10)[0] == 0.0
    assert binomial_interval(0, 10)[1] == pytest.approx(1 - 0.025**0.1)


def test_the_cdf_is_exact_and_does_not_overflow_at_large_n() -> None:
    assert binomial_cdf(1, 3, 0.5) == pytest.approx(0.5)
    assert binomial_cdf(2, 4, 0.25) == pytest.approx(sum(math.comb(4, i) * 0.25**i * 0.75 ** (4 - i) for i in range(3)))
    assert binomial_cdf(5000, 10000, 0.5) == pytest.approx(0.5040, abs=1e-4)
    assert binomial_cdf(-1, 5, 0.3) == 0.0
    assert binomial_cdf(5, 5, 0.3) == 1.0
    assert (binomial_cdf(0, 5, 0.0), binomial_cdf(4, 5, 1.0)) == (1.0, 0.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1, 0), r"invalid trials 0; accepted: an integer >= 1"),
        ((11, 10), r"invalid events 11; accepted: an integer from 0 to trials \(10\)"),
        ((-1, 10), r"invalid events -1"),
        ((1.5, 10), r"invalid events 1.5"),
        ((True, 10), r"invalid events True"),
        ((1, 10, 1.0), r"invalid confidence 1.0; accepted: a fraction in \(0, 1\)"),
        ((1, 10, 0), r"invalid confidence 0"),
    ],
)
def test_bad_arguments_name_what_is_accepted(args: tuple, message: str) -> None:
    for bound in (binomial_upper_bound, binomial_lower_bound, binomial_interval):
        with pytest.raises(ValueError, match=message):
            bound(*args)
    with pytest.raises(ValueError, match=r"invalid probability 1.5; accepted: a number in \[0, 1\]"):
        binomial_cdf(1, 10, 1.5)
