"""Ratios, geometric means and win counts on hand-computed values."""

from __future__ import annotations

import math

import pytest

from torchgauge.stats.ratios import count_wins, geomean, geomean_by, ratio, ratio_rows


def test_ratio_handles_missing_and_zero_bases() -> None:
    assert ratio(4.0, 2.0) == 0.5
    assert ratio(None, 2.0) is None and ratio(4.0, None) is None
    assert ratio(float("nan"), 2.0) is None
    assert ratio(0.0, 2.0) is None  # undefined, not infinite
    assert ratio(2.0, 0.0) == 0.0


def test_geomean_known_values() -> None:
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([0.5, 2.0]) == pytest.approx(1.0)  # a 2x win and a 2x loss cancel
    assert geomean([1.0, 10.0, 100.0]) == pytest.approx(10.0)
    assert geomean([3.0]) == pytest.approx(3.0)


def test_geomean_skips_missing_and_rejects_non_positive() -> None:
    assert geomean([None, 4.0, float("nan"), 1.0]) == pytest.approx(2.0)
    assert geomean([]) is None and geomean([None]) is None
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="positive finite"):
            geomean([1.0, bad])


def test_ratio_rows_and_grouped_geomeans() -> None:
    pairs = {
        ("a", "train"): ({"time": 10.0, "mem": 100.0}, {"time": 5.0, "mem": 300.0}),
        ("b", "train"): ({"time": 10.0, "mem": 100.0}, {"time": 20.0, "mem": None}),
        ("a", "eval"): ({"time": 4.0, "mem": 50.0}, {"time": 1.0, "mem": 25.0}),
    }
    rows = ratio_rows(pairs, ["time", "mem"])
    assert [r.key for r in rows] == list(pairs)
    assert [r.ratios["time"] for r in rows] == [0.5, 2.0, 0.25]
    assert [r.ratios["mem"] for r in rows] == [3.0, None, 0.5]
    by_mode = geomean_by(rows, "time", group=lambda k: k[1])
    assert by_mode["train"] == (pytest.approx(1.0), 2)
    assert by_mode["eval"] == (pytest.approx(0.25), 1)
    mem = geomean_by(rows, "mem", group=lambda k: k[1])
    assert mem["train"] == (pytest.approx(3.0), 1)  # the missing memory value is not counted
    everything = geomean_by(rows, "time")
    assert everything["all"][0] == pytest.approx((0.5 * 2.0 * 0.25) ** (1 / 3)) and everything["all"][1] == 3


def test_group_with_no_values_has_no_geomean() -> None:
    rows = ratio_rows({("a", "eval"): ({"gpu": None}, {"gpu": None})}, ["gpu"])
    assert geomean_by(rows, "gpu", group=lambda k: k[1]) == {"eval": (None, 0)}


def test_count_wins_with_tie_band() -> None:
    w = count_wins([0.5, 0.99, 1.0, 1.019, 1.03, 2.0, None], band=0.02)
    assert (w.new, w.base, w.ties) == (1, 2, 3)
    strict = count_wins([0.99, 1.0, 1.01], band=0.0)
    assert (strict.new, strict.base, strict.ties) == (1, 1, 1)
    with pytest.raises(ValueError):
        count_wins([1.0], band=-0.1)
