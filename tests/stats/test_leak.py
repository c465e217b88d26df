"""Leak decision on synthetic memory series with known answers (fixed seeds)."""

from __future__ import annotations

import random

import pytest

from torchgauge.stats.leak import (
    CPU_TOLERANCE_MB_PER_ITER,
    GPU_TOLERANCE_MB_PER_ITER,
    SKIP_SAMPLES,
    detect_leak,
    min_samples,
    theil_sen_slope,
    window_medians,
)

N = 50  # the metric's default iteration count


def _noisy(values: list[float], sd: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [v + rng.gauss(0.0, sd) for v in values]


def test_theil_sen_hand_computed_and_robust_to_an_outlier() -> None:
    assert theil_sen_slope([1.0, 3.0]) == 2.0
    assert theil_sen_slope([5.0, 5.0, 5.0]) == 0.0
    # 10 pairwise slopes: -96, 1 (x6), 33.3, 49.5, 98 -> median 1
    assert theil_sen_slope([0.0, 1.0, 2.0, 100.0, 4.0]) == 1.0
    with pytest.raises(ValueError, match="at least 2"):
        theil_sen_slope([1.0])


def test_window_medians_give_the_remainder_to_early_windows() -> None:
    # 9 values in 4 windows: sizes 3, 2, 2, 2
    assert window_medians([1, 2, 3, 4, 5, 6, 7, 8, 9], 4) == [2, 4.5, 6.5, 8.5]
    with pytest.raises(ValueError, match="windows"):
        window_medians([1, 2, 3], 4)


@pytest.mark.parametrize("seed", range(5))
def test_flat_with_noise_is_not_a_leak(seed: int) -> None:
    d = detect_leak(_noisy([500.0] * N, sd=0.3, seed=seed))
    assert not d.leaking
    assert abs(d.slope) < CPU_TOLERANCE_MB_PER_ITER


@pytest.mark.parametrize("seed", range(5))
def test_steady_growth_is_a_leak_and_its_rate_is_reported(seed: int) -> None:
    d = detect_leak(_noisy([500.0 + 0.25 * i for i in range(N)], sd=0.3, seed=seed))
    assert d.leaking and d.persistent
    assert d.slope == pytest.approx(0.25, abs=0.03)
    assert d.samples_used == N - SKIP_SAMPLES


def test_one_off_jump_then_flat_is_not_a_leak() -> None:
    # A 20 MiB cache filled once, mid-series: most pairs straddle the jump, so Theil-Sen sees
    # a positive slope, but the windows after it are flat, so the growth is not persistent.
    series = _noisy([500.0 + (20.0 if i >= 27 else 0.0) for i in range(N)], sd=0.1, seed=7)
    d = detect_leak(series)
    assert d.slope > CPU_TOLERANCE_MB_PER_ITER  # the slope test alone would cry wolf
    assert not d.persistent and not d.leaking


def test_growth_right_after_warmup_then_flat_is_skipped() -> None:
    # Optimizer state and allocator pools settling in the first iterations.
    series = [400.0, 450.0, 480.0, 495.0, 500.0] + [500.0] * (N - 5)
    assert not detect_leak(series).leaking


def test_gpu_allocated_bytes_exact_growth_of_one_block_is_a_leak() -> None:
    block_mb = 512 / 2**20  # the CUDA caching allocator's smallest block
    leaking = [1000.0 + block_mb * i for i in range(N)]
    clean = [1000.0] * N
    assert detect_leak(leaking, tolerance=GPU_TOLERANCE_MB_PER_ITER).leaking
    assert not detect_leak(clean, tolerance=GPU_TOLERANCE_MB_PER_ITER).leaking


def test_growth_below_tolerance_is_not_a_leak_even_if_steady() -> None:
    d = detect_leak([500.0 + 0.01 * i for i in range(N)])
    assert d.persistent and not d.leaking


def test_bad_input_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match=f"at least {min_samples()} samples"):
        detect_leak([1.0] * (min_samples() - 1))
    with pytest.raises(ValueError, match="finite"):
        detect_leak([1.0] * 20 + [float("nan")])
    with pytest.raises(ValueError, match="tolerance"):
        detect_leak([1.0] * 20, tolerance=-1.0)
