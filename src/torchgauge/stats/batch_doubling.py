"""Inference batch-size search: the doubling schedule, when to stop, and which size to pick.

The TorchBench paper (sec. 2.2) starts inference at batch size 1 and doubles it until the
device runs out of memory, then keeps the size with the highest throughput. These are the
pure parts of that search (no torch, no I/O), so they can be tested on known curves;
:mod:`torchgauge.workflows.tune_batch` runs the measurements.

Example:
    >>> pts = [BatchPoint(1, "ok", 2.0), BatchPoint(2, "ok", 2.5), BatchPoint(4, "ok", 8.0),
    ...        BatchPoint(8, "oom")]
    >>> choose_batch_size(pts).batch_size  # 500, 800, 500 samples/s
    2
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "DEFAULT_WITHIN",
    "STOP_REASONS",
    "BatchChoice",
    "BatchPoint",
    "IMPLAUSIBLE_SPEEDUP",
    "choose_batch_size",
    "curve_doubts",
    "implausible_sizes",
    "next_batch_size",
    "stop_reason",
    "throughput",
]

# Relative throughput loss accepted for a smaller batch: 0.0 picks the strict maximum (the
# paper's rule); e.g. 0.05 picks the smallest size within 5% of the best, which saves
# memory and latency when the curve has flattened out.
DEFAULT_WITHIN = 0.0
# Why a search ended.
STOP_REASONS = ("oom", "max_batch", "budget", "failed")


def throughput(batch_size: int, median_ms: float) -> float:
    """Samples per second of one step of ``batch_size`` samples taking ``median_ms``
    (pass the samples the step processed where that is not its batch size).

    Example:
        >>> throughput(32, 16.0)
        2000.0
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    if not median_ms > 0 or math.isinf(median_ms):
        raise ValueError(f"median time must be a positive finite number of ms, got {median_ms}")
    return batch_size * 1000.0 / median_ms


@dataclass(frozen=True)
class BatchPoint:
    """One measured size of the curve; failed sizes have no time."""

    batch_size: int
    status: str  # a RunRecord status: "ok", "oom", "timeout", "error", ...
    median_ms: float | None = None  # median step time; None unless status is "ok"
    cpu_peak_mb: float | None = None
    gpu_peak_mb: float | None = None
    error: str | None = None  # last line of the error of a failed size
    ci_low_ms: float | None = None  # confidence interval of the median step time
    ci_high_ms: float | None = None
    # Samples the step processed where that is not the batch size (a model whose step processes
    # a fixed count, e.g. sam's one image at any batch); None: batch_size. Throughput counts these.
    samples_per_step: int | None = None

    @property
    def samples(self) -> int:
        """Samples one step processed: ``samples_per_step`` where given, else ``batch_size``."""
        return self.batch_size if self.samples_per_step is None else self.samples_per_step

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.median_ms is not None

    @property
    def throughput(self) -> float | None:
        """Samples/s, or None for a failed size."""
        return throughput(self.samples, self.median_ms) if self.ok else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throughput": self.throughput}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> BatchPoint:
        return cls(
            **{
                k: doc.get(k)
                for k in (
                    "batch_size",
                    "status",
                    "median_ms",
                    "cpu_peak_mb",
                    "gpu_peak_mb",
                    "error",
                    "ci_low_ms",
                    "ci_high_ms",
                    "samples_per_step",
                )
            }
        )

    @property
    def throughput_interval(self) -> tuple[float, float] | None:
        """Samples/s at the ends of the median's confidence interval, or None without one."""
        if not self.ok or not self.ci_low_ms or not self.ci_high_ms or self.ci_low_ms <= 0:
            return None
        return throughput(self.samples, self.ci_high_ms), throughput(self.samples, self.ci_low_ms)


@dataclass(frozen=True)
class BatchChoice:
    """The chosen size of a curve."""

    batch_size: int
    throughput: float  # samples/s at the chosen size
    best_batch_size: int  # size of the strict maximum (differs only with within > 0)
    best_throughput: float
    within: float  # the tolerance the choice was made with


def next_batch_size(current: int, max_batch: int | None = None) -> int | None:
    """The size after ``current``: double it, clamped to ``max_batch`` (tried last).

    Returns None when ``current`` already reached ``max_batch``.

    Example:
        >>> [next_batch_size(b, 100) for b in (1, 32, 64, 100)]
        [2, 64, 100, None]
    """
    if current < 1:
        raise ValueError(f"batch size must be >= 1, got {current}")
    if max_batch is not None and current >= max_batch:
        return None
    nxt = current * 2
    return nxt if max_batch is None else min(nxt, max_batch)


def stop_reason(
    point: BatchPoint,
    *,
    max_batch: int | None,
    elapsed_s: float,
    budget_s: float | None,
) -> str | None:
    """Why the search ends after measuring ``point``, or None to go on doubling.

    A failed size ends it: ``oom`` (the paper's stop), a ``timeout`` counts as ``budget``
    (the runner's timeout is the budget left), anything else is ``failed``. Otherwise it
    ends at ``max_batch`` or once ``elapsed_s`` has used up ``budget_s``.
    """
    if point.status == "oom":
        return "oom"
    if point.status == "timeout":
        return "budget"
    if not point.ok:
        return "failed"
    if next_batch_size(point.batch_size, max_batch) is None:
        return "max_batch"
    if budget_s is not None and elapsed_s >= budget_s:
        return "budget"
    return None


# A step of a larger batch may not take less time than one of a smaller batch, beyond noise:
# one sample more cannot make the same kernels faster. A larger batch whose median step is
# this many times faster than a smaller one's means one of the two was disturbed (issue 17:
# batch 1 at 270 ms, batch 8 at 1.2 ms).
IMPLAUSIBLE_SPEEDUP = 1.25


def implausible_sizes(points: Sequence[BatchPoint], factor: float = IMPLAUSIBLE_SPEEDUP) -> list[int]:
    """Sizes whose step time is more than ``factor`` times that of a larger size (re-measure them).

    Example:
        >>> implausible_sizes([BatchPoint(1, "ok", 270.0), BatchPoint(2, "ok", 1.0), BatchPoint(8, "ok", 1.2)])
        [1]
    """
    good = sorted((p for p in points if p.ok), key=lambda p: p.batch_size)
    return [p.batch_size for i, p in enumerate(good) if any(p.median_ms > factor * q.median_ms for q in good[i + 1 :])]


def curve_doubts(points: Sequence[BatchPoint], choice: BatchChoice | None) -> list[str]:
    """Reasons not to trust a chosen size: an implausible curve, or a best size whose
    throughput interval overlaps another size's (the choice between them is noise).

    Example:
        >>> pts = [BatchPoint(1, "ok", 10.0, ci_low_ms=9.0, ci_high_ms=11.0),
        ...        BatchPoint(2, "ok", 19.0, ci_low_ms=17.0, ci_high_ms=21.0)]
        >>> curve_doubts(pts, choose_batch_size(pts))
        ['throughput intervals of batch 2 and 1 overlap: the choice between them is within noise']
    """
    doubts = []
    bad = implausible_sizes(points)
    if bad:
        doubts.append(
            f"implausible curve: batch {', '.join(map(str, bad))} took longer per step than a larger batch "
            f"by more than {IMPLAUSIBLE_SPEEDUP}x"
        )
    if choice is not None:
        best = next(p for p in points if p.ok and p.batch_size == choice.best_batch_size)
        interval = best.throughput_interval
        if interval is not None:
            close = [
                p.batch_size
                for p in points
                if p.ok
                and p is not best
                and p.throughput_interval is not None
                and p.throughput_interval[1] >= interval[0]
            ]
            if close:
                doubts.append(
                    f"throughput intervals of batch {best.batch_size} and {', '.join(map(str, close))} "
                    "overlap: the choice between them is within noise"
                )
    return doubts


def choose_batch_size(points: Sequence[BatchPoint], within: float = DEFAULT_WITHIN) -> BatchChoice | None:
    """The size with the highest throughput among the successful points.

    Args:
        points: the measured curve, any order; failed sizes are ignored.
        within: relative throughput loss accepted for a smaller size (0 = strict maximum).
            Ties at equal throughput go to the smaller size.

    Returns:
        A :class:`BatchChoice`, or None when no size succeeded.

    Example:
        >>> pts = [BatchPoint(1, "ok", 1.0), BatchPoint(2, "ok", 1.05), BatchPoint(4, "ok", 2.0)]
        >>> choose_batch_size(pts).batch_size, choose_batch_size(pts, within=0.05).batch_size
        (4, 2)
    """
    if not 0.0 <= within < 1.0:
        raise ValueError(f"within must be in [0, 1), got {within}")
    good = sorted((p for p in points if p.ok), key=lambda p: p.batch_size)
    if not good:
        return None
    best = max(good, key=lambda p: (p.throughput, -p.batch_size))
    floor = best.throughput * (1.0 - within)
    chosen = next(p for p in good if p.throughput >= floor)
    return BatchChoice(
        batch_size=chosen.batch_size,
        throughput=chosen.throughput,
        best_batch_size=best.batch_size,
        best_throughput=best.throughput,
        within=within,
    )
