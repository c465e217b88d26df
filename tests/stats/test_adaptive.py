"""Adaptive repeats and stable warm-up: the stopping rules on synthetic series with known answers."""

from __future__ import annotations

import random

import pytest

from torchgauge.stats.adaptive import MIN_STABLE_WARMUP, AdaptiveRule, StableWarmup
from torchgauge.stats.summary import median_ci


def test_stops_on_a_narrow_interval_not_before_the_minimum() -> None:
    rule = AdaptiveRule(target=0.05, min_repeat=10, max_repeat=100)
    flat = [10.0] * 9
    assert rule.stop_reason(flat) is None  # below min_repeat even though the interval is 0
    assert rule.stop_reason(flat + [10.0]) == "interval"


def test_hits_the_cap_on_noise() -> None:
    rule = AdaptiveRule(target=0.01, min_repeat=5, max_repeat=20)
    gen = random.Random(0)
    noisy = [gen.uniform(5, 15) for _ in range(20)]
    assert rule.stop_reason(noisy[:19]) is None
    assert rule.stop_reason(noisy) == "max_repeat"
    record = rule.record(noisy, "max_repeat")
    low, high = median_ci(noisy)
    assert record["relative_width"] == pytest.approx((high - low) / sorted(noisy)[10], rel=1e-5)
    assert (record["samples"], record["min_repeat"], record["max_repeat"], record["target"]) == (20, 5, 20, 0.01)


def test_checkpoints_grow_geometrically() -> None:
    rule = AdaptiveRule(target=0.05, min_repeat=10, max_repeat=1000)
    assert [rule.next_check(n) for n in (1, 10, 11, 100)] == [10, 11, 12, 110]


@pytest.mark.parametrize("kw", [dict(target=0), dict(target=1.5), dict(min_repeat=0), dict(min_repeat=9, max_repeat=5)])
def test_rejects_bad_settings(kw) -> None:
    with pytest.raises(ValueError, match="accepted"):
        AdaptiveRule(**{"target": 0.05, "min_repeat": 5, "max_repeat": 50, **kw})


def test_stable_warmup_stops_once_two_consecutive_steps_agree() -> None:
    rule = StableWarmup(tolerance=0.1, max_warmup=5)
    assert rule.stop_reason([100.0]) is None  # one step cannot show it was warm
    assert rule.stop_reason([100.0, 105.0]) == "stable"  # no lazy-init cost in the first
    assert rule.stop_reason([900.0, 300.0]) is None  # still getting faster
    assert rule.stop_reason([900.0, 300.0, 320.0]) == "stable"
    assert rule.stop_reason([300.0, 400.0, 300.0, 400.0]) is None  # noisy: keeps warming up
    assert rule.stop_reason([300.0, 400.0, 300.0, 400.0, 300.0]) == "max_warmup"
    record = rule.record([900.0, 300.0, 320.0], "stable", "cpu")
    assert record == {
        "rule": "consecutive_steps_within",
        "signal": "cpu",
        "tolerance": 0.1,
        "min_warmup": MIN_STABLE_WARMUP,
        "max_warmup": 5,
        "steps": 3,
        "stopped_by": "stable",
        "last_change": pytest.approx(20 / 300, abs=1e-6),
    }


@pytest.mark.parametrize(
    ("kw", "message"),
    [(dict(tolerance=0), "tolerance"), (dict(tolerance=1.0), "tolerance"), (dict(max_warmup=1), "at least 2")],
)
def test_stable_warmup_rejects_bad_settings(kw, message) -> None:
    with pytest.raises(ValueError, match=message):
        StableWarmup(**{"tolerance": 0.1, "max_warmup": 3, **kw})
