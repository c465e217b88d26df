"""Pure bisection search: synthetic good/bad ranges, skips, several culprits."""

from __future__ import annotations

import math
import random

import pytest

from torchgauge.stats.range_search import (
    BisectionError,
    bisect_range,
    find_culprits,
    probe_order,
)


def _step(culprit: int, skips=()):
    calls: list[int] = []

    def classify(i: int) -> str:
        calls.append(i)
        if i in skips:
            return "skip"
        return "bad" if i >= culprit else "good"

    return classify, calls


@pytest.mark.parametrize("culprit", range(1, 32))
def test_every_culprit_of_32_points_found_in_at_most_7_probes(culprit):
    classify, calls = _step(culprit)
    result = bisect_range(32, classify)
    assert result.culprits[0].first_bad == culprit
    assert result.culprits[0].last_good == culprit - 1
    # endpoints + ceil(log2(30 interior points + 1)) = 2 + 5
    assert len(result.measured) <= 2 + math.ceil(math.log2(31))
    assert len(calls) == len(set(calls)), "a point was classified twice"
    assert calls[:2] == [0, 31]


def test_two_points_need_no_probe():
    result = bisect_range(2, lambda i: "good" if i == 0 else "bad")
    assert result.culprits[0].first_bad == 1
    assert result.measured == [0, 1]


def test_skip_takes_the_neighbour_and_still_finds_the_culprit():
    classify, calls = _step(20, skips={15, 16})
    result = bisect_range(32, classify)
    assert result.culprits[0].first_bad == 20
    assert result.skipped == [15, 16]
    assert calls[2:5] == [15, 16, 14]  # middle, then its neighbours upwards first


def test_only_skipped_points_left_gives_every_candidate():
    classify, _ = _step(12, skips={10, 11})
    result = bisect_range(16, classify)
    culprit = result.culprits[0]
    assert culprit.reason == "skipped" and not culprit.found
    assert culprit.first_bad is None
    assert culprit.last_good == 9
    assert culprit.candidates == (10, 11, 12)


def test_bad_endpoints_and_invalid_verdicts_raise():
    with pytest.raises(BisectionError, match="good endpoint"):
        bisect_range(8, lambda i: "bad")
    with pytest.raises(BisectionError, match="bad endpoint"):
        bisect_range(8, lambda i: "good")
    with pytest.raises(BisectionError, match="bad endpoint.*skip"):
        bisect_range(8, lambda i: "good" if i == 0 else "skip")
    with pytest.raises(BisectionError, match="invalid verdict 'maybe'"):
        bisect_range(8, lambda i: {0: "good", 7: "bad"}.get(i, "maybe"))
    with pytest.raises(BisectionError, match="at least 2 points"):
        bisect_range(1, lambda i: "good")


def test_probe_order_stays_inside_and_covers_the_range():
    assert list(probe_order(0, 1)) == []
    assert list(probe_order(3, 5)) == [4]
    order = list(probe_order(10, 21))
    assert sorted(order) == list(range(11, 21))
    assert order[0] == 15


def _levels(changes):
    return lambda i: sum(i >= c for c in changes)


@pytest.mark.parametrize("changes", [(5, 11), (1, 31), (7,), (3, 17, 18, 29)])
def test_find_culprits_finds_every_planted_change(changes):
    level = _levels(changes)
    pairs: list[tuple[int, int]] = []

    def differs(i, j):
        pairs.append((i, j))
        assert i < j
        return level(i) != level(j)

    result = find_culprits(32, lambda i: True, differs)
    assert [c.first_bad for c in result.culprits] == list(changes)
    assert all(c.found for c in result.culprits)
    assert len(pairs) == len(set(pairs))
    # each culprit costs about one binary search
    assert len(result.measured) <= 2 + 5 * len(changes)


def test_find_culprits_reports_skips_and_gradual_drift():
    level = _levels((5, 11))
    result = find_culprits(16, lambda i: i not in (9, 10), lambda i, j: level(i) != level(j))
    assert [c.candidates for c in result.culprits] == [(5,), (9, 10, 11)]
    assert result.culprits[1].reason == "skipped"
    assert result.skipped == [9, 10]

    # a drift of 1 per point with a "differs" threshold of 6: the whole range differs,
    # but once halves are short enough neither half does on its own
    result = find_culprits(16, lambda i: True, lambda i, j: j - i >= 6)
    assert {c.reason for c in result.culprits} == {"gradual"}
    assert result.culprits[0].candidates[0] == 1


def test_find_culprits_max_culprits_and_endpoint_errors():
    level = _levels((3, 9, 13))
    result = find_culprits(16, lambda i: True, lambda i, j: level(i) != level(j), max_culprits=1)
    assert [c.first_bad for c in result.culprits] == [3]
    with pytest.raises(BisectionError, match="do not differ"):
        find_culprits(16, lambda i: True, lambda i, j: False)
    with pytest.raises(BisectionError, match="endpoint 15 could not be measured"):
        find_culprits(16, lambda i: i != 15, lambda i, j: True)
    with pytest.raises(BisectionError, match="max_culprits"):
        find_culprits(16, lambda i: True, lambda i, j: True, max_culprits=0)


def test_random_ranges_with_random_skips():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(2, 64)
        culprit = rng.randint(1, n - 1)
        skips = {i for i in range(1, n - 1) if rng.random() < 0.2}
        classify, calls = _step(culprit, skips)
        c = bisect_range(n, classify).culprits[0]
        assert culprit in c.candidates
        assert all(i in skips for i in c.candidates[:-1])
        assert len(calls) == len(set(calls))
