"""Memory-leak decision: does a per-iteration memory series keep growing?

Pure functions over lists of floats (no torch). The harness (``harness/leak.py``) samples
CPU resident memory and GPU allocated memory after each of N iterations; this module says
whether that series is a leak. The TorchBench paper's CI flagged exactly this (sec. 4.2:
a cuBLAS workspace that was never freed).

A series is a leak only when **both** hold:

* the robust growth rate, the Theil-Sen slope (median of all pairwise slopes), exceeds a
  tolerance in MiB per iteration, so allocator noise and page-granular RSS wobble do not
  count (:data:`CPU_TOLERANCE_MB_PER_ITER`, :data:`GPU_TOLERANCE_MB_PER_ITER`); and
* the growth is persistent: the series, cut into :data:`PERSISTENCE_WINDOWS` consecutive
  windows, has a strictly increasing window median. A one-off jump (a cache filled once,
  a lazily allocated workspace) raises one window and then stays flat, so it is not a
  leak even though its Theil-Sen slope over the whole series is positive.

The first :data:`SKIP_SAMPLES` samples are left out: lazy initialisation after warm-up
(optimizer state, allocator pools) is growth that stops.

Example:
    >>> d = detect_leak([100.0 + 0.5 * i for i in range(30)], tolerance=0.05)
    >>> d.leaking, round(d.slope, 3)
    (True, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CPU_TOLERANCE_MB_PER_ITER",
    "GPU_TOLERANCE_MB_PER_ITER",
    "PERSISTENCE_WINDOWS",
    "SKIP_SAMPLES",
    "LeakDecision",
    "detect_leak",
    "min_samples",
    "theil_sen_slope",
    "window_medians",
]

# Resident memory moves in pages and in malloc arena chunks; 0.05 MiB (51 KiB) per
# iteration is 2.5 MiB over the default 50 iterations, above that wobble.
CPU_TOLERANCE_MB_PER_ITER = 0.05
# The CUDA caching allocator's allocated bytes are exact and steady in a clean loop, so
# any sustained growth (one 512-byte block per iteration is 0.0005 MiB) is a leak.
GPU_TOLERANCE_MB_PER_ITER = 0.0
# Samples dropped before fitting: growth right after warm-up that then stops.
SKIP_SAMPLES = 5
# Consecutive windows whose medians must strictly increase for growth to be persistent.
PERSISTENCE_WINDOWS = 4


@dataclass(frozen=True)
class LeakDecision:
    """Verdict on one memory series (MiB per sample, one sample per iteration)."""

    leaking: bool  # slope above tolerance AND persistent
    slope: float  # Theil-Sen growth, MiB per iteration (over the samples used)
    tolerance: float  # MiB per iteration that the slope had to exceed
    persistent: bool  # window medians strictly increasing
    window_medians: tuple[float, ...]  # the medians the persistence test looked at
    samples_used: int  # samples after the skipped ones


def min_samples(skip: int = SKIP_SAMPLES, windows: int = PERSISTENCE_WINDOWS) -> int:
    """Fewest samples :func:`detect_leak` accepts: ``skip`` plus two per window."""
    return skip + 2 * windows


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def theil_sen_slope(values: Sequence[float]) -> float:
    """Median of the slopes ``(y_j - y_i) / (j - i)`` over all pairs ``i < j``.

    Robust to up to ~29% outliers; ``values`` are equally spaced (one per iteration).

    Example:
        >>> theil_sen_slope([0.0, 1.0, 2.0, 100.0, 4.0])
        1.0
    """
    n = len(values)
    if n < 2:
        raise ValueError(f"a slope needs at least 2 values, got {n}")
    slopes = [(values[j] - values[i]) / (j - i) for i in range(n) for j in range(i + 1, n)]
    return _median(slopes)


def window_medians(values: Sequence[float], windows: int = PERSISTENCE_WINDOWS) -> list[float]:
    """Medians of ``windows`` consecutive, near-equal slices of ``values`` (earlier slices
    get the remainder)."""
    n = len(values)
    if windows < 2 or n < windows:
        raise ValueError(f"cannot cut {n} values into {windows} windows; accepted: 2 <= windows <= len(values)")
    base, extra = divmod(n, windows)
    out, start = [], 0
    for w in range(windows):
        size = base + (1 if w < extra else 0)
        out.append(_median(values[start : start + size]))
        start += size
    return out


def detect_leak(
    samples: Sequence[float],
    *,
    tolerance: float = CPU_TOLERANCE_MB_PER_ITER,
    skip: int = SKIP_SAMPLES,
    windows: int = PERSISTENCE_WINDOWS,
) -> LeakDecision:
    """Decide whether a per-iteration memory series (MiB) is a leak.

    Args:
        samples: memory after each iteration, in order (MiB). NaN/None are not accepted.
        tolerance: growth in MiB per iteration that the Theil-Sen slope must exceed.
        skip: leading samples to leave out (post-warm-up settling).
        windows: consecutive windows whose medians must strictly increase.

    Returns:
        A :class:`LeakDecision`; ``leaking`` needs slope > tolerance and persistence.

    Raises:
        ValueError: fewer than :func:`min_samples` samples, a non-finite sample, or a
            negative tolerance.
    """
    if tolerance < 0 or math.isnan(tolerance):
        raise ValueError(f"tolerance must be >= 0 MiB per iteration, got {tolerance}")
    values = [float(v) for v in samples]
    if any(not math.isfinite(v) for v in values):
        raise ValueError("memory samples must be finite numbers (MiB)")
    need = min_samples(skip, windows)
    if len(values) < need:
        raise ValueError(
            f"leak detection needs at least {need} samples ({skip} skipped + 2 per window), got {len(values)}"
        )
    used = values[skip:]
    slope = theil_sen_slope(used)
    medians = window_medians(used, windows)
    persistent = all(b > a for a, b in zip(medians, medians[1:]))
    return LeakDecision(
        leaking=slope > tolerance and persistent,
        slope=slope,
        tolerance=tolerance,
        persistent=persistent,
        window_medians=tuple(medians),
        samples_used=len(used),
    )
