"""Coverage analysis on hand-made sets with known unions, ratios, uniques and greedy order."""

from __future__ import annotations

import pytest

from torchgauge.stats.coverage_sets import (
    ModelCoverage,
    greedy_order,
    smallest_cover,
    summarize_coverage,
    unique_to_each,
)

UNIVERSE = frozenset({"a", "b", "c", "d", "e", "f", "g", "h"})


def _m(name, apis, ops=(), domain="vision", tags=()):
    return ModelCoverage(name, domain, frozenset(tags), frozenset(apis), frozenset(ops))


ENTRIES = [
    _m("m1", "abc", ["x"], tags=["mlperf"]),
    _m("m2", "cde", ["x", "y"], domain="nlp"),
    _m("m3", "a", ["z"], domain="nlp", tags=["mlperf"]),
    _m("m4", "abcdef", ["x"]),
]


def test_unique_contribution() -> None:
    assert unique_to_each(ENTRIES, "apis") == {"m1": [], "m2": [], "m3": [], "m4": ["f"]}
    assert unique_to_each(ENTRIES, "ops") == {"m1": [], "m2": ["y"], "m3": ["z"], "m4": []}


def test_greedy_order_and_cover() -> None:
    order = greedy_order(ENTRIES, "apis")
    assert order[0] == ("m4", 6, 6)
    assert [n for _, n, _ in order[1:]] == [0, 0, 0]
    assert smallest_cover(order, 0.9) == ["m4"]
    ops_order = greedy_order(ENTRIES, "ops")
    assert ops_order[0] == ("m2", 2, 2) and ops_order[1] == ("m3", 1, 3)
    assert smallest_cover(ops_order, 1.0) == ["m2", "m3"]
    with pytest.raises(ValueError, match="cover target"):
        smallest_cover(order, 1.5)


def test_summary_ratio_and_domains() -> None:
    s = summarize_coverage(ENTRIES, universe=UNIVERSE, against_tag="mlperf")
    assert s["apis"]["suite"] == 6 and s["apis"]["tagged"] == 3 and s["apis"]["ratio"] == 2.0
    assert s["apis"]["fraction_of_universe"] == 6 / 8
    assert s["ops"]["suite"] == 3 and s["ops"]["tagged"] == 2 and s["ops"]["ratio"] == 1.5
    assert s["tagged_models"] == ["m1", "m3"]
    assert s["per_domain"] == {"nlp": {"models": 2, "apis": 4, "ops": 3}, "vision": {"models": 2, "apis": 6, "ops": 1}}


def test_no_tagged_models_gives_no_ratio() -> None:
    s = summarize_coverage(ENTRIES, universe=UNIVERSE, against_tag="nope")
    assert s["apis"]["ratio"] is None and s["apis"]["tagged"] == 0


def test_items_outside_universe_do_not_count() -> None:
    s = summarize_coverage([_m("m", {"a", "internal.helper"})], universe=UNIVERSE)
    assert s["apis"]["suite"] == 1
