"""Undisturbed steps: the CPU/wall ratio tells steps that held their CPU from steps that waited."""

from __future__ import annotations

import math
import random

import pytest

from torchgauge.stats.undisturbed import UNDISTURBED_MIN_RATIO, undisturbed_median, undisturbed_steps


def test_keeps_the_steps_whose_cpu_time_is_near_their_wall_time() -> None:
    wall = [10.0, 25.0, 10.4, 9.9, 40.0]
    cpu = [9.8, 10.1, 10.3, 9.0, 9.9]  # 0.98, 0.40, 0.99, 0.909, 0.25
    assert undisturbed_steps(wall, cpu) == [10.0, 10.4, 9.9]
    assert undisturbed_steps(wall, cpu, min_ratio=0.95) == [10.0, 10.4]
    assert undisturbed_median(wall, cpu) == 10.0


def test_a_step_exactly_at_the_ratio_counts_and_bad_values_are_dropped() -> None:
    assert undisturbed_steps([10.0], [10.0 * UNDISTURBED_MIN_RATIO]) == [10.0]
    assert undisturbed_steps([math.nan, 0.0, 10.0, 5.0], [1.0, 0.0, math.nan, 5.0]) == [5.0]


def test_too_few_undisturbed_steps_give_no_median() -> None:
    wall, cpu = [30.0, 31.0, 10.0, 10.1], [10.0, 10.0, 10.0, 10.0]
    assert undisturbed_median(wall, cpu) is None  # 2 of 4 qualify, 3 needed
    assert undisturbed_median(wall, cpu, min_steps=2) == pytest.approx(10.05)


def test_recovers_the_undisturbed_step_time_of_a_process_that_was_descheduled_half_the_time() -> None:
    rng = random.Random(3)
    true_ms = [20.0 * (1 + 0.01 * rng.random()) for _ in range(40)]
    # half of the steps waited 0.5-5x their own time for a CPU: wall grows, CPU time does not
    wall = [t * (1 + rng.uniform(0.5, 5.0)) if i % 2 else t for i, t in enumerate(true_ms)]
    cpu = [0.99 * t for t in true_ms]
    assert undisturbed_median(wall, cpu) == pytest.approx(20.1, rel=0.01)
    assert sorted(wall)[len(wall) // 2] > 25  # the plain median is pulled up by the waits


def test_bad_arguments_name_what_is_accepted() -> None:
    with pytest.raises(ValueError, match="one value per step"):
        undisturbed_steps([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"accepted: a fraction in \(0, 1\]"):
        undisturbed_steps([1.0], [1.0], min_ratio=1.5)
    with pytest.raises(ValueError, match="accepted: an integer >= 1"):
        undisturbed_median([1.0], [1.0], min_steps=0)
