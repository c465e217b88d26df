"""The power-law fit recovers known exponents from synthetic sweeps."""

from __future__ import annotations

import random

import pytest

from torchgauge.stats.power_law import fit_power_law

XS = [8, 16, 32, 64, 128, 256, 512]


@pytest.mark.parametrize("a,b,c", [(3.0, 1.5, 2.0), (0.01, 2.0, 5.0), (4.0, 0.5, 0.0), (1e-3, 1.0, 0.25)])
def test_exact_data_recovers_parameters(a: float, b: float, c: float) -> None:
    fit = fit_power_law(XS, [a * x**b + c for x in XS])
    assert fit.b == pytest.approx(b, abs=1e-4)
    assert fit.a == pytest.approx(a, rel=1e-3)
    assert fit.c == pytest.approx(c, abs=1e-3 * max(c, 1.0))
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.max_rel_residual < 1e-5
    assert not fit.at_bound


def test_noisy_data_recovers_exponent_within_noise() -> None:
    rng = random.Random(7)
    xs = [2**k for k in range(3, 13)]  # 8 .. 4096
    ys = [0.002 * x**1.3 * (1 + rng.gauss(0, 0.03)) + 0.5 for x in xs]  # 3% multiplicative noise
    fit = fit_power_law(xs, ys)
    assert fit.b == pytest.approx(1.3, abs=0.05)
    assert fit.r2 > 0.99
    assert fit.dof == len(xs) - 3


def test_negative_constant_falls_back_to_pure_power_law() -> None:
    # The free solution would need c < 0 (cost below a pure power law at small x): c pins to 0.
    xs = [1, 2, 4, 8, 16]
    ys = [2.0 * x**1.0 - 0.5 if x > 1 else 1.0 for x in xs]
    fit = fit_power_law(xs, ys)
    assert fit.c == 0.0
    assert fit.dof == len(xs) - 2
    assert 1.0 < fit.b < 1.5  # steeper than linear: the power law absorbs the missing offset
    assert all(fit.predict(x) > 0 for x in xs)


def test_flat_cost_is_exponent_near_zero_or_constant() -> None:
    fit = fit_power_law(XS, [5.0] * len(XS))
    assert all(fit.predict(x) == pytest.approx(5.0, rel=1e-6) for x in XS)


@pytest.mark.parametrize(
    "xs,ys,message",
    [
        ([1, 2], [1, 2], "at least 3 distinct"),
        ([1, 1, 2, 2], [1, 1, 2, 2], "at least 3 distinct"),
        ([0, 1, 2], [1, 2, 3], "x must be"),
        ([1, 2, 3], [1, -2, 3], "y must be"),
        ([1, 2, 3], [1, 2], "differ in length"),
    ],
)
def test_bad_input_is_rejected(xs, ys, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fit_power_law(xs, ys)


def test_exponent_beyond_the_search_range_is_flagged() -> None:
    fit = fit_power_law(XS, [1e-12 * x**6 + 1.0 for x in XS])
    assert fit.at_bound
    assert "ill-determined" in fit.describe()


def test_exponent_interval_is_narrow_for_clean_data_and_wide_for_noise() -> None:
    import random

    from torchgauge.stats.power_law import fit_power_law

    rng = random.Random(1)
    xs = [1, 2, 4, 8, 16, 32, 64]
    clean = fit_power_law(xs, [0.5 * x**2 * (1 + 0.02 * rng.gauss(0, 1)) for x in xs])
    assert clean.b_low <= clean.b <= clean.b_high and clean.b_high - clean.b_low < 0.1 and not clean.b_interval_wide
    noise = fit_power_law(xs, [1 + 0.3 * rng.random() for _ in xs])
    assert noise.b_interval_wide and "WIDE" in noise.describe()
    exact = fit_power_law([1, 2, 4], [2.0, 3.0, 5.0])  # three points, three parameters: no dof
    assert exact.dof == 0 and exact.b_low is None and exact.b_interval_wide
