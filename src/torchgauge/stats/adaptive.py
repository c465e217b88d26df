"""Adaptive repeats: keep timing until the median is known well enough.

The rule of ``torch.utils.benchmark.Timer.adaptive_autorange`` on our statistics: stop once
the distribution-free 95% interval of the median (:func:`~.summary.median_ci`) is narrower
than ``target`` times the median, never before ``min_repeat`` samples and never after
``max_repeat``. Every sample is kept; the rule and why it stopped go into the record.
Pure: the harness feeds samples in, the rule answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .summary import median_ci

__all__ = ["CHECK_GROWTH", "AdaptiveRule"]

# The interval is re-checked when the sample count has grown by 1/CHECK_GROWTH of itself (at
# least one sample): median_ci costs O(n^2) binomial terms, so checking after every one of 200
# short steps would cost more than the steps. Stopping is late by at most 10% of the samples.
CHECK_GROWTH = 10


@dataclass(frozen=True)
class AdaptiveRule:
    """Stop when ``(ci_high - ci_low) / median <= target``, within ``[min_repeat, max_repeat]``."""

    target: float  # relative width of the median's 95% interval, e.g. 0.05
    min_repeat: int
    max_repeat: int

    def __post_init__(self) -> None:
        if not 0 < self.target < 1:
            raise ValueError(f"adaptive target {self.target!r}; accepted: a fraction between 0 and 1, e.g. 0.05")
        if not 1 <= self.min_repeat <= self.max_repeat:
            raise ValueError(f"repeats {self.min_repeat}..{self.max_repeat}; accepted: 1 <= min_repeat <= max_repeat")

    def relative_width(self, samples: Sequence[float]) -> float:
        """Width of the median's interval over the median (inf for a zero median)."""
        low, high = median_ci(samples)
        median = sorted(samples)[len(samples) // 2]
        return (high - low) / median if median > 0 else math.inf

    def next_check(self, n: int) -> int:
        """The sample count at which to check next after checking at ``n``."""
        return max(n + max(1, n // CHECK_GROWTH), self.min_repeat)

    def stop_reason(self, samples: Sequence[float]) -> str | None:
        """``"interval"`` when narrow enough, ``"max_repeat"`` at the cap, else None."""
        n = len(samples)
        if n >= self.min_repeat and self.relative_width(samples) <= self.target:
            return "interval"
        if n >= self.max_repeat:
            return "max_repeat"
        return None

    def record(self, samples: Sequence[float], reason: str | None) -> dict[str, Any]:
        """The stopping rule and outcome, as stored in ``time_ms["stopping"]``."""
        return {
            "rule": "median_ci_relative_width",
            "target": self.target,
            "min_repeat": self.min_repeat,
            "max_repeat": self.max_repeat,
            "samples": len(samples),
            "stopped_by": reason,
            "relative_width": round(self.relative_width(samples), 6) if samples else None,
        }
