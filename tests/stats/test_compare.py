"""Change tests on synthetic samples with known answers (scipy is the reference, tests only)."""

from __future__ import annotations

import math
import random

import pytest

from torchgauge.stats.compare import (
    Change,
    adjust_pvalues,
    attainable_pvalue,
    benjamini_hochberg,
    compare_samples,
    compare_values,
    holm,
    judge,
    mann_whitney_u,
    median,
    pooled_or_group_medians,
    relative_change,
    sign_test,
)

scipy_stats = pytest.importorskip("scipy.stats")


def _noisy(rng: random.Random, n: int, level: float, rel_sd: float) -> list[float]:
    return [level * (1.0 + rel_sd * rng.gauss(0.0, 1.0)) for _ in range(n)]


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize("m,n,shift", [(3, 3, 0.0), (5, 7, 0.3), (10, 10, 0.5), (12, 9, -0.4), (1, 4, 1.0)])
def test_mann_whitney_exact_matches_scipy(alternative, m, n, shift) -> None:
    rng = random.Random(m * 100 + n)
    x = [rng.random() for _ in range(m)]
    y = [rng.random() + shift for _ in range(n)]
    ours = mann_whitney_u(x, y, alternative)
    ref = scipy_stats.mannwhitneyu(y, x, alternative=alternative, method="exact")
    assert ours.method == "exact"
    assert ours.u == pytest.approx(ref.statistic)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_mann_whitney_ties_use_tie_corrected_normal_like_scipy(alternative) -> None:
    x = [1, 2, 2, 3, 3, 3, 4, 5]
    y = [2, 3, 4, 4, 5, 5, 6, 6, 7]
    ours = mann_whitney_u(x, y, alternative)
    ref = scipy_stats.mannwhitneyu(y, x, alternative=alternative, method="asymptotic", use_continuity=True)
    assert ours.method == "normal"
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


def test_mann_whitney_large_samples_use_normal_like_scipy() -> None:
    rng = random.Random(3)
    x, y = [rng.random() for _ in range(60)], [rng.random() + 0.1 for _ in range(55)]
    ours = mann_whitney_u(x, y, "greater")
    ref = scipy_stats.mannwhitneyu(y, x, alternative="greater", method="asymptotic")
    assert ours.method == "normal" and ours.p_value == pytest.approx(ref.pvalue, rel=1e-9)


def test_mann_whitney_known_values_and_edges() -> None:
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]).p_value == pytest.approx(1 / 20)
    assert mann_whitney_u([1], [2]).p_value == pytest.approx(0.5)  # n=1 per side: no evidence
    assert mann_whitney_u([5, 5], [5, 5]).p_value == 1.0  # all tied
    with pytest.raises(ValueError, match="at least one value"):
        mann_whitney_u([], [1.0])
    with pytest.raises(ValueError, match="accepted: greater, less, two-sided"):
        mann_whitney_u([1.0], [2.0], "bigger")


def test_holm_and_bh_hand_computed() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> cummax 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted ranks 1..4: 0.005*4/1=0.02, 0.01*4/2=0.02, 0.03*4/3=0.04, 0.04*4/4=0.04 -> cummin from top
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([0.6, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == [] and benjamini_hochberg([]) == []
    assert adjust_pvalues([0.2], "none") == [0.2]
    with pytest.raises(ValueError, match="accepted: holm, bh, none"):
        adjust_pvalues([0.1], "bonferroni")


def test_sign_test_and_helpers() -> None:
    assert sign_test([2, 3, 4], 1.0) == pytest.approx(1 / 8)
    assert sign_test([0, 3, 4], 1.0) == pytest.approx(4 / 8)
    assert sign_test([1.0, 1.0], 1.0) == 1.0
    assert median([3, 1, 2, 10]) == 2.5
    assert relative_change(10, 11) == pytest.approx(0.1)
    assert relative_change(0, 0) == 0.0 and relative_change(0, 1) == math.inf
    assert pooled_or_group_medians([[1.0, 9.0, 2.0], [3.0, 4.0, 5.0], [6.0]]) == [2.0, 4.0, 6.0]
    assert pooled_or_group_medians([[1.0], [2.0, 3.0]]) == [1.0, 2.0, 3.0]


def test_ten_percent_shift_with_modest_noise_is_flagged() -> None:
    rng = random.Random(1)
    base, new = _noisy(rng, 10, 10.0, 0.02), _noisy(rng, 10, 11.0, 0.02)
    c = compare_samples(base, new, threshold=0.07, alpha=0.01)
    assert c.verdict == "regression" and c.change == pytest.approx(0.1, abs=0.03) and c.p_value < 0.01
    # and the mirror image is an improvement
    assert compare_samples(new, base, threshold=0.07, alpha=0.01).verdict == "improvement"


def test_aa_pair_with_heavy_noise_and_outliers_is_not_flagged() -> None:
    rng = random.Random(2)
    base, new = _noisy(rng, 10, 10.0, 0.15), _noisy(rng, 10, 10.0, 0.15)
    new[3], new[7] = 40.0, 55.0  # two wild outliers on the candidate side only
    c = compare_samples(base, new, threshold=0.07, alpha=0.01)
    assert c.verdict == "unchanged"


def test_three_percent_shift_is_not_flagged_at_seven_percent_even_when_significant() -> None:
    rng = random.Random(4)
    base, new = _noisy(rng, 30, 10.0, 0.002), _noisy(rng, 30, 10.3, 0.002)
    c = compare_samples(base, new, threshold=0.07, alpha=0.01)
    assert c.p_greater < 1e-6  # the shift is real ...
    assert c.verdict == "unchanged"  # ... but below the threshold


def test_a_test_that_cannot_reach_alpha_is_inconclusive_never_unchanged() -> None:
    c = compare_samples([10.0, 11.0], [20.0, 21.0], threshold=0.07, alpha=0.01)  # n=2: min p = 1/6
    assert c.change > 0.07 and c.verdict == "inconclusive" and c.p_value == pytest.approx(1 / 6)
    assert "smallest one-sided p is 0.17" in c.reason
    # issue 17: --repeat 3 passed a 3.4x slowdown as "0 regressions"
    c = compare_samples([831.0, 829.0, 835.0], [2824.0, 2810.0, 2830.0])
    assert c.verdict == "inconclusive" and c.beyond_threshold
    same = compare_samples([831.0, 829.0, 835.0], [830.0, 828.0, 836.0])
    assert same.verdict == "inconclusive" and not same.beyond_threshold  # no power either way


def test_correction_can_make_a_test_inconclusive() -> None:
    # 5 vs 5 values: best raw p 1/252 = 0.004 passes alone, not after Holm over 10 tests
    change = compare_samples([1.0, 1.1, 1.2, 1.3, 1.4], [1.5, 1.6, 1.7, 1.8, 1.9], alpha=0.01)
    assert change.verdict == "regression"
    judged = judge([change] * 10, "holm")
    assert {c.verdict for c in judged} == {"inconclusive"} and "after holm over 10 tests" in judged[0].reason
    assert attainable_pvalue(5, 5, 10, "holm") == pytest.approx(10 / 252)
    assert attainable_pvalue(5, 5, 10, "none") == pytest.approx(1 / 252)


def test_hundred_aa_configs_corrected_flags_none_for_fixed_seed() -> None:
    rng = random.Random(20261123)
    changes = []
    for _ in range(100):
        level = rng.uniform(1.0, 100.0)
        # threshold 0 so that the test alone decides; alpha 0.05 so that uncorrected false
        # alarms are expected (about 5 in 100), which the correction must remove
        changes.append(
            compare_samples(_noisy(rng, 10, level, 0.05), _noisy(rng, 10, level, 0.05), threshold=0.0, alpha=0.05)
        )
    assert sum(c.verdict != "unchanged" for c in changes) >= 2  # uncorrected: false alarms
    for method in ("holm", "bh"):
        judged = judge(changes, method)
        assert all(c.verdict == "unchanged" for c in judged), method


def test_judge_keeps_a_real_regression_among_many_aa_configs() -> None:
    rng = random.Random(7)
    changes = [compare_samples(_noisy(rng, 10, 5.0, 0.03), _noisy(rng, 10, 5.0, 0.03)) for _ in range(50)]
    changes.append(compare_samples(_noisy(rng, 20, 5.0, 0.01), _noisy(rng, 20, 6.0, 0.01)))
    judged = judge(changes, "holm")
    assert [c.verdict for c in judged].count("regression") == 1 and judged[-1].verdict == "regression"
    assert judged[-1].p_value >= changes[-1].p_greater  # corrected p is never smaller


def test_compare_values_is_threshold_only() -> None:
    assert compare_values(1000, 1100).verdict == "regression"
    assert compare_values(1000, 1069, threshold=0.07).verdict == "unchanged"
    assert compare_values(1000, 900).verdict == "improvement"
    assert compare_values(5, 5, threshold=0.0).verdict == "unchanged"  # zero threshold: any change, not equality
    assert compare_values(5, 6, threshold=0.0).verdict == "regression"
    c = compare_values(1, 2)
    assert isinstance(c, Change) and not c.tested and c.p_value is None
    with pytest.raises(ValueError, match="NaN"):
        compare_values(float("nan"), 1.0)
