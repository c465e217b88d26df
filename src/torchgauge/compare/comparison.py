"""What ``compare`` found: judged metrics (:class:`Finding`), status changes, and the whole :class:`Comparison`.

Records and their JSON only; :mod:`torchgauge.compare.regression` judges, the exit code and
the threshold syntax of the ``compare`` command live here with the records they read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..results.schema import RunConfig
from ..stats.compare import DEFAULT_ALPHA, DEFAULT_CORRECTION, DEFAULT_THRESHOLD
from .matching import Unmatched

__all__ = [
    "EXIT_INCONCLUSIVE",
    "EXIT_REGRESSION",
    "FINDING_KEYS",
    "Comparison",
    "Finding",
    "StatusChange",
    "beyond_threshold",
    "exit_code",
    "parse_threshold",
]

# The JSON keys of a finding, in order (docs/regression-detection.md; CI scripts rely on them).
FINDING_KEYS = ("model", "mode", "device", "precision", "backend", "metric", "base", "new", "change", "p_value")


# `compare`'s exit codes (docs/regression-detection.md; the nightly workflow relies on them):
# 1 a regression or new failure, 3 an inconclusive change beyond the threshold (2 is click's usage error).
EXIT_REGRESSION = 1
EXIT_INCONCLUSIVE = 3


def exit_code(cmp: Comparison, *, allow_inconclusive: bool = False) -> int:
    """0, :data:`EXIT_REGRESSION` or :data:`EXIT_INCONCLUSIVE` (a regression takes precedence)."""
    if cmp.regressions or cmp.new_failures:
        return EXIT_REGRESSION
    if cmp.inconclusive_beyond_threshold and not allow_inconclusive:
        return EXIT_INCONCLUSIVE
    return 0


def parse_threshold(text: str | float) -> float:
    """Parse a relative threshold: ``"7%"``, ``"0.07"`` and ``"7"`` all mean 7%.

    A bare number below 1 is a fraction, a bare number above 1 is a percentage; a bare
    ``1`` (1% or 100%?) and zero or negative values are rejected.

    Raises:
        ValueError: a one-line message naming the accepted forms.
    """
    raw = str(text).strip()
    accepted = "accepted: a positive percentage such as 7%, or a fraction such as 0.07 (a bare 7 also means 7%)"
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"invalid threshold {raw!r}; {accepted}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid threshold {raw!r}: must be positive; {accepted}")
    if not raw.endswith("%"):
        if value == 1:
            raise ValueError(f"ambiguous threshold {raw!r} (1% or 100%?); write 1% or 100%")
        if value > 1:
            value /= 100.0
    return value


@dataclass(frozen=True)
class Finding:
    """One metric of one configuration, judged."""

    config: RunConfig  # the new side's configuration
    metric: str  # the quantity's record key (Quantity.record_key): "time_ms", "cpu_peak_mb", "flops", ...
    base: float | None  # median / value on the base side (leak: MiB growth per iteration)
    new: float | None
    change: float | None  # relative change new / base - 1 (+ is worse); None for the leak flag
    p_value: float | None  # corrected one-sided p of the direction of the change; None if untested
    verdict: str  # "regression" | "improvement" | "unchanged" | "inconclusive" (detail["reason"] says why)
    n_base: int = 1  # values tested per side (samples, or process medians)
    n_new: int = 1
    detail: dict[str, Any] = field(default_factory=dict)  # e.g. {"ops": {...}} for count metrics

    def to_dict(self) -> dict[str, Any]:
        """JSON entry: exactly :data:`FINDING_KEYS` first, then extras."""
        c = self.config
        doc: dict[str, Any] = dict(
            zip(
                FINDING_KEYS,
                (
                    c.model,
                    c.mode,
                    c.device,
                    c.precision,
                    c.backend,
                    self.metric,
                    self.base,
                    self.new,
                    self.change,
                    self.p_value,
                ),
            )
        )
        doc.update(batch_size=c.batch_size, verdict=self.verdict, n_base=self.n_base, n_new=self.n_new)
        if self.detail:
            doc["detail"] = self.detail
        return doc


def beyond_threshold(finding: Finding, threshold: float) -> bool:
    """Whether a finding's change reaches the threshold that applies to it: its own
    (``detail["threshold"]``, e.g. a count's 1%) or else ``threshold``."""
    limit = finding.detail.get("threshold", threshold)
    return finding.change is not None and abs(finding.change) >= limit


@dataclass(frozen=True)
class StatusChange:
    """A configuration whose status moved between usable and failing."""

    config: RunConfig
    base_status: str
    new_status: str
    error: str | None = None  # last line of the failing side's error

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {
            "model": c.model,
            "mode": c.mode,
            "device": c.device,
            "precision": c.precision,
            "backend": c.backend,
            "batch_size": c.batch_size,
            "base_status": self.base_status,
            "new_status": self.new_status,
            "error": self.error,
        }


@dataclass
class Comparison:
    """Everything :func:`compare_results` found; ``regressions`` decide the CI exit code."""

    regressions: list[Finding]
    improvements: list[Finding]
    unchanged: list[Finding]
    new_failures: list[StatusChange]
    fixes: list[StatusChange]
    unmatched: list[Unmatched]  # on one side only, failed on both, or batch sizes differ
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA
    correction: str = DEFAULT_CORRECTION
    base_env: dict[str, Any] = field(default_factory=dict)
    new_env: dict[str, Any] = field(default_factory=dict)
    dismissed: list[Finding] = field(default_factory=list)  # flagged, then not confirmed by --confirm reruns
    confirm_rounds: int = 0  # fresh processes per side in the confirmation (0: not confirmed)
    # Tests that could not reach alpha (sample sizes, correction): never read as "unchanged";
    # those whose median change reaches the threshold first.
    inconclusive: list[Finding] = field(default_factory=list)
    hardware_note: str | None = None  # set when the two sides (or a side's shards) ran on different hardware
    threads_note: str | None = None  # set when the two sides ran with different intra-op thread counts
    time_signal: str = "auto"  # what was asked: "auto" or a key of TIME_SIGNALS (findings say what was tested)

    @property
    def has_regressions(self) -> bool:
        return bool(self.regressions)

    @property
    def inconclusive_beyond_threshold(self) -> list[Finding]:
        """Inconclusive changes whose median change reaches the threshold: they fail a gate unless allowed."""
        return [f for f in self.inconclusive if beyond_threshold(f, self.threshold)]

    @property
    def time_signals(self) -> dict[tuple[str, str | None], int]:
        """(signal tested, why not the requested one or None) -> configurations judged so."""
        tested: dict[Any, tuple[str, str | None]] = {}
        for f in (*self.regressions, *self.improvements, *self.unchanged, *self.inconclusive, *self.dismissed):
            if "signal" in f.detail:
                tested.setdefault(f.config.key(), (f.detail["signal"], f.detail.get("signal_note")))
        counts: dict[tuple[str, str | None], int] = {}
        for key in tested.values():
            counts[key] = counts.get(key, 0) + 1
        return counts

    @property
    def compared(self) -> int:
        """Number of configurations with at least one judged metric."""
        return len(
            {f.config.key() for f in (*self.regressions, *self.improvements, *self.unchanged, *self.inconclusive)}
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "alpha": self.alpha,
            "correction": self.correction,
            "compared": self.compared,
            "regressions": [f.to_dict() for f in self.regressions],
            "improvements": [f.to_dict() for f in self.improvements],
            "new_failures": [s.to_dict() for s in self.new_failures],
            "fixes": [s.to_dict() for s in self.fixes],
            "unmatched": [u.as_dict() for u in self.unmatched],
            "inconclusive": [f.to_dict() for f in self.inconclusive],
            "hardware_note": self.hardware_note,
            "threads_note": self.threads_note,
            "time_signal": self.time_signal,
            "time_signals": [
                {"signal": signal, "note": note, "configurations": n} for (signal, note), n in self.time_signals.items()
            ],
            "unchanged": len(self.unchanged),
            "confirm_rounds": self.confirm_rounds,
            "dismissed": [f.to_dict() for f in self.dismissed],
            "base_env": self.base_env,
            "new_env": self.new_env,
        }
