"""Adaptive repeats and warm-up: time until the median is known well enough, warm up until warm.

:class:`AdaptiveRule` is the rule of ``torch.utils.benchmark.Timer.adaptive_autorange`` on our
statistics: stop once the distribution-free 95% interval of the median
(:func:`~.summary.median_ci`) is narrower than ``target`` times the median, never before
``min_repeat`` samples and never after ``max_repeat``. :class:`StableWarmup` ends the warm-up
once two consecutive steps agree (pyperf calibrates its warm-ups by the same idea: warm when
the values stop drifting), never before ``MIN_STABLE_WARMUP`` steps and never after
``max_warmup``. Every sample is kept; each rule and why it stopped go into the record.
Pure: the harness feeds samples in, the rule answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .summary import median_ci

__all__ = ["CHECK_GROWTH", "MIN_STABLE_WARMUP", "AdaptiveRule", "StableWarmup"]

# The interval is re-checked when the sample count has grown by 1/CHECK_GROWTH of itself (at
# least one sample): median_ci costs O(n^2) binomial terms, so checking after every one of 200
# short steps would cost more than the steps. Stopping is late by at most 10% of the samples.
CHECK_GROWTH = 10

# Stability is judged between two consecutive warm-up steps, so a stable warm-up has at least
# two: the first alone cannot show whether it carried lazy initialisation.
MIN_STABLE_WARMUP = 2


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

    def record(self, samples: Sequence[float], reason: str | None, signal: str = "wall") -> dict[str, Any]:
        """The stopping rule and outcome, as stored in ``time_ms["stopping"]``; ``samples`` are
        the ``signal`` series the rule judged (``wall`` or ``cpu`` time per step)."""
        return {
            "rule": "median_ci_relative_width",
            "signal": signal,
            "target": self.target,
            "min_repeat": self.min_repeat,
            "max_repeat": self.max_repeat,
            "samples": len(samples),
            "stopped_by": reason,
            "relative_width": round(self.relative_width(samples), 6) if samples else None,
        }


@dataclass(frozen=True)
class StableWarmup:
    """Stop warming up after step k (k >= MIN_STABLE_WARMUP) once ``|t_k - t_(k-1)| <= tolerance *
    t_(k-1)``, or after ``max_warmup`` steps.

    Two consecutive steps that agree show that the earlier one was already past lazy
    initialisation, allocator growth and cache filling (which make early steps slower), so
    the timed steps start warm. A drifting or noisy warm-up runs to ``max_warmup``: never fewer
    warm-up steps than a fixed count unless the steps themselves show that fewer suffice.
    """

    tolerance: float  # relative difference of two consecutive steps, e.g. 0.1
    max_warmup: int

    def __post_init__(self) -> None:
        if not 0 < self.tolerance < 1:
            raise ValueError(f"warm-up tolerance {self.tolerance!r}; accepted: a fraction between 0 and 1, e.g. 0.1")
        if self.max_warmup < MIN_STABLE_WARMUP:
            raise ValueError(
                f"at most {self.max_warmup} warm-up steps; accepted: at least {MIN_STABLE_WARMUP}, "
                "since stability is judged between two steps"
            )

    def stop_reason(self, steps: Sequence[float]) -> str | None:
        """``"stable"`` when the last two steps agree, ``"max_warmup"`` at the cap, else None."""
        n = len(steps)
        if n >= MIN_STABLE_WARMUP and abs(steps[-1] - steps[-2]) <= self.tolerance * steps[-2]:
            return "stable"
        if n >= self.max_warmup:
            return "max_warmup"
        return None

    def record(self, steps: Sequence[float], reason: str | None, signal: str = "wall") -> dict[str, Any]:
        """The warm-up rule and outcome, as stored in ``time_ms["warmup_stopping"]``; ``steps``
        are the ``signal`` series the rule judged (``wall`` or ``cpu`` time per step)."""
        last = abs(steps[-1] - steps[-2]) / steps[-2] if len(steps) >= 2 and steps[-2] > 0 else None
        return {
            "rule": "consecutive_steps_within",
            "signal": signal,
            "tolerance": self.tolerance,
            "min_warmup": MIN_STABLE_WARMUP,
            "max_warmup": self.max_warmup,
            "steps": len(steps),
            "stopped_by": reason,
            "last_change": None if last is None else round(last, 6),
        }
