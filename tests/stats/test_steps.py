"""Step detection on synthetic series with known steps, gaps and fixed seeds (asv style)."""

from __future__ import annotations

import random

import pytest

from torchgauge.stats.steps import StepChange, detect_regressions, detect_steps


def _series(rng: random.Random, levels: list[tuple[int, float]], rel_sd: float) -> list[float]:
    return [level * (1.0 + rel_sd * rng.gauss(0.0, 1.0)) for n, level in levels for _ in range(n)]


def test_single_step_found_at_the_right_position() -> None:
    series = _series(random.Random(0), [(20, 10.0), (20, 11.0)], 0.02)
    segs = detect_steps(series)
    assert [(s.start, s.end) for s in segs] == [(0, 20), (20, 40)]
    (reg,) = detect_regressions(segs, 0.07)
    assert reg.position == 20 and reg.change == pytest.approx(0.1, abs=0.02)


def test_three_steps_and_thresholds() -> None:
    series = _series(random.Random(1), [(15, 10.0), (15, 13.0), (15, 12.5), (15, 8.0)], 0.01)
    segs = detect_steps(series)
    assert [s.start for s in segs] == [0, 15, 30, 45]
    assert [r.position for r in detect_regressions(segs, 0.07)] == [15]  # +30%; the -4% and -36% are not "up"
    assert [r.position for r in detect_regressions(segs, 0.07, direction="down")] == [45]
    assert [r.position for r in detect_regressions(segs, 0.03, direction="both")] == [15, 30, 45]
    assert detect_regressions(segs, 0.5, direction="both") == []


def test_flat_noisy_series_with_outlier_has_no_step() -> None:
    series = _series(random.Random(2), [(40, 10.0)], 0.03)
    series[10] = 30.0  # one wild outlier cannot form a segment of its own
    assert len(detect_steps(series)) == 1


def test_none_and_nan_are_ignored_but_keep_positions() -> None:
    series: list[float | None] = [5.0] * 8 + [None, float("nan")] + [6.0] * 8
    segs = detect_steps(series)
    assert segs[0].start == 0 and segs[-1].end == len(series)
    assert [s.level for s in segs] == [5.0, 6.0]
    assert segs[1].start == 10 and segs[0].n == 8  # the gap stays with the earlier segment


def test_deterministic_counts_need_about_a_percent() -> None:
    assert len(detect_steps([1000.0] * 10 + [1001.0] * 10)) == 1  # 0.1%: below the noise floor
    segs = detect_steps([1000.0] * 10 + [1100.0] * 10)
    assert detect_regressions(segs) == [StepChange(10, 1000.0, 1100.0, pytest.approx(0.1))]


def test_edge_cases() -> None:
    assert detect_steps([]) == [] and detect_steps([None, float("nan")]) == []
    (only,) = detect_steps([3.0])
    assert (only.start, only.end, only.level, only.n) == (0, 1, 3.0, 1)
    assert len(detect_steps([1.0, 2.0])) == 1  # two points cannot be two segments of two
    assert detect_regressions(detect_steps([3.0])) == []
    with pytest.raises(ValueError, match="accepted: up, down, both"):
        detect_regressions([], direction="sideways")
