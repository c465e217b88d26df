"""Batch-size search logic on known curves (pure; no torch)."""

from __future__ import annotations

import pytest

from torchgauge.stats.batch_doubling import (
    BatchPoint,
    choose_batch_size,
    next_batch_size,
    stop_reason,
    throughput,
)


def _curve(times: dict[int, float | None], fail: dict[int, str] | None = None) -> list[BatchPoint]:
    pts = [BatchPoint(b, "ok", t) for b, t in times.items()]
    pts += [BatchPoint(b, s) for b, s in (fail or {}).items()]
    return pts


def test_throughput_is_samples_per_second() -> None:
    assert throughput(1, 1000.0) == 1.0
    assert throughput(64, 32.0) == 2000.0


def test_point_throughput_counts_the_samples_a_step_processed() -> None:
    # batch 32 declared, one sample processed per 10 ms step: 100 samples/s, not 3200
    point = BatchPoint(32, "ok", 10.0, ci_low_ms=8.0, ci_high_ms=12.5, samples_per_step=1)
    assert point.samples == 1 and point.throughput == 100.0
    assert point.throughput_interval == (80.0, 125.0)
    assert BatchPoint.from_dict(point.as_dict()) == point
    assert BatchPoint(32, "ok", 10.0).throughput == 3200.0  # default: the batch


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_throughput_rejects_non_positive_times(bad) -> None:
    with pytest.raises(ValueError, match="positive finite"):
        throughput(4, bad)


def test_doubling_schedule_clamps_to_the_maximum() -> None:
    seq, b = [], 1
    while b is not None:
        seq.append(b)
        b = next_batch_size(b, 100)
    assert seq == [1, 2, 4, 8, 16, 32, 64, 100]
    assert next_batch_size(256) == 512  # no maximum: doubles forever (OOM or budget stop it)
    with pytest.raises(ValueError):
        next_batch_size(0)


def test_choice_is_the_maximum_throughput_not_the_largest_size() -> None:
    # 1: 1000/s, 2: 1600/s, 4: 2000/s, 8: 1600/s (a memory-bound knee), 16: oom
    pts = _curve({1: 1.0, 2: 1.25, 4: 2.0, 8: 5.0}, fail={16: "oom"})
    choice = choose_batch_size(pts)
    assert (choice.batch_size, choice.throughput) == (4, 2000.0)
    assert (choice.best_batch_size, choice.best_throughput) == (4, 2000.0)


def test_monotone_curve_picks_the_last_size() -> None:
    pts = _curve({1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0})
    assert choose_batch_size(pts).batch_size == 8


def test_ties_go_to_the_smaller_size() -> None:
    pts = _curve({2: 1.0, 4: 2.0})  # both 2000/s
    assert choose_batch_size(pts).batch_size == 2


def test_within_picks_the_smallest_size_close_to_the_best() -> None:
    # 1000, 1904.8, 2000 samples/s: 2 is within 5% of the best, not within 4%
    pts = _curve({1: 1.0, 2: 1.05, 4: 2.0})
    assert choose_batch_size(pts, within=0.05).batch_size == 2
    assert choose_batch_size(pts, within=0.04).batch_size == 4
    c = choose_batch_size(pts, within=0.05)
    assert c.best_batch_size == 4 and c.within == 0.05
    with pytest.raises(ValueError, match="within"):
        choose_batch_size(pts, within=1.0)


def test_no_successful_size_gives_no_choice() -> None:
    assert choose_batch_size([BatchPoint(1, "oom")]) is None
    assert choose_batch_size([]) is None


def test_single_point() -> None:
    assert choose_batch_size(_curve({1: 3.0})).batch_size == 1


@pytest.mark.parametrize(
    "point, max_batch, elapsed, budget, reason",
    [
        (BatchPoint(8, "oom"), None, 1.0, None, "oom"),
        (BatchPoint(8, "timeout"), None, 1.0, 60.0, "budget"),
        (BatchPoint(8, "error", error="shape mismatch"), None, 1.0, None, "failed"),
        (BatchPoint(64, "ok", 5.0), 64, 1.0, None, "max_batch"),
        (BatchPoint(8, "ok", 5.0), 64, 61.0, 60.0, "budget"),
        (BatchPoint(8, "ok", 5.0), 64, 10.0, 60.0, None),
        (BatchPoint(8, "ok", 5.0), None, 1e9, None, None),
    ],
)
def test_stop_reasons(point, max_batch, elapsed, budget, reason) -> None:
    assert stop_reason(point, max_batch=max_batch, elapsed_s=elapsed, budget_s=budget) == reason


def test_point_round_trips_through_dict() -> None:
    p = BatchPoint(4, "ok", 2.0, cpu_peak_mb=10.0)
    d = p.as_dict()
    assert d["throughput"] == 2000.0
    assert BatchPoint.from_dict(d) == p


def test_noise_curves_are_flagged() -> None:
    from torchgauge.stats.batch_doubling import curve_doubts, implausible_sizes

    # issue 17: batch 1 at 270 ms, batch 8 at 1.2 ms chose batch 8 without a word
    noise = [BatchPoint(1, "ok", 270.0), BatchPoint(2, "ok", 2.0), BatchPoint(4, "ok", 1.5), BatchPoint(8, "ok", 1.2)]
    assert implausible_sizes(noise) == [1, 2]  # 4 (1.5 ms) vs 8 (1.2 ms) is within IMPLAUSIBLE_SPEEDUP
    assert "implausible curve: batch 1, 2 " in curve_doubts(noise, choose_batch_size(noise))[0]
    sane = [
        BatchPoint(1, "ok", 1.0, ci_low_ms=0.99, ci_high_ms=1.01),
        BatchPoint(2, "ok", 1.5, ci_low_ms=1.49, ci_high_ms=1.51),
        BatchPoint(4, "ok", 2.6, ci_low_ms=2.58, ci_high_ms=2.62),
    ]
    assert implausible_sizes(sane) == [] and curve_doubts(sane, choose_batch_size(sane)) == []
    overlapping = [*sane[:2], BatchPoint(4, "ok", 2.9, ci_low_ms=2.0, ci_high_ms=3.5)]
    assert "overlap" in curve_doubts(overlapping, choose_batch_size(overlapping))[0]
