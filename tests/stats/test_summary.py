"""Summaries against hand-computed values, including n=1 and n=2 (pytest-benchmark style)."""

from __future__ import annotations

import math

import pytest

from torchgauge.stats.summary import IQR_WARN_THRESHOLD, median_ci, quantile, summarize


def test_four_samples_by_hand() -> None:
    s = summarize([3.0, 1.0, 2.0, 4.0])
    assert (s.n, s.median, s.min, s.max) == (4, 2.5, 1.0, 4.0)
    assert (s.q1, s.q3, s.iqr) == (1.75, 3.25, 1.5)
    assert s.mean == 2.5
    assert s.stdev == pytest.approx(math.sqrt(5 / 3))


def test_single_and_pair() -> None:
    one = summarize([7.0])
    assert (one.median, one.iqr, one.stdev, one.ci_low, one.ci_high) == (7.0, 0.0, 0.0, 7.0, 7.0)
    two = summarize([1.0, 3.0])
    assert (two.median, two.q1, two.q3) == (2.0, 1.5, 2.5)
    assert (two.ci_low, two.ci_high) == (1.0, 3.0)  # too few samples: full range


def test_nan_and_none_are_ignored() -> None:
    s = summarize([1.0, float("nan"), None, 3.0])
    assert s.n == 2 and s.median == 2.0
    with pytest.raises(ValueError, match="no samples"):
        summarize([float("nan")])


def test_quantile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    xs = sorted([0.3, 9.1, 2.2, 5.5, 1.0, 7.7, 4.4])
    for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))
    with pytest.raises(ValueError):
        quantile(xs, 1.5)


def test_median_ci_order_statistics() -> None:
    # n=10 at 95%: P(Bin(10, .5) <= 1) = 11/1024, two-sided 0.0215 <= 0.05 while
    # P(<= 2) = 56/1024 -> 0.109 > 0.05, so the interval is [x_(2), x_(9)] (1-based).
    xs = list(range(1, 11))
    assert median_ci(xs) == (2, 9)
    # n=5: even the full range covers only 1 - 2/32 = 93.75% < 95%: full range.
    assert median_ci([5, 1, 4, 2, 3]) == (1, 5)


def test_noisy_flag_uses_named_threshold() -> None:
    tight = summarize([100.0, 101.0, 99.0, 100.5, 99.5])
    assert not tight.noisy and tight.relative_iqr < IQR_WARN_THRESHOLD
    loose = summarize([100.0, 130.0, 70.0, 120.0, 80.0])
    assert loose.noisy


def test_as_dict_round_trip() -> None:
    d = summarize([1.0, 2.0, 3.0]).as_dict()
    assert d["median"] == 2.0 and set(d) >= {"n", "median", "iqr", "ci_low", "ci_high"}


def test_stats_package_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, torchgauge.stats; assert 'torch' not in sys.modules, 'stats imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)
