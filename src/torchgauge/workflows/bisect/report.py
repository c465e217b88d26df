"""What a bisection found (:class:`BisectReport`), as JSON and as the rows and warnings the
``bisect`` command prints."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...results.schema import _json_safe  # strict JSON (NaN/inf -> null), as results files

__all__ = [
    "REPORT_COLUMNS",
    "BisectReport",
    "ConfigOutcome",
    "CulpritReport",
    "format_change",
    "report_rows",
    "report_summary",
    "report_warnings",
]

# Columns of report_rows().
REPORT_COLUMNS = ("config", "good -> bad", "last good", "step", "first bad")


@dataclass
class CulpritReport:
    """One culprit of one configuration."""

    reason: str  # "found", "skipped" (candidates hidden by failed builds), "gradual", or "uncertain"
    # (bimodal or overlapping evidence: any candidate may be the culprit; ConfigOutcome.message says why)
    last_good: str  # point label
    candidates: list[dict[str, Any]]  # label, subject and describe() of each candidate
    change: float | None  # relative change of the median, last good -> first bad

    @property
    def first_bad(self) -> dict[str, Any] | None:
        return self.candidates[0] if self.reason == "found" else None


@dataclass
class ConfigOutcome:
    """The bisection of one configuration (model/mode/...)."""

    config: str  # RunConfig.label()
    status: str  # "bisected", "uncertain" (culprit candidates, no single one), "not_reproduced" or "error"
    direction: str | None = None  # "regression" or "improvement" (good -> bad)
    change: float | None = None  # relative median change good -> bad
    p_value: float | None = None
    culprits: list[CulpritReport] = field(default_factory=list)
    probes: list[tuple[str, str]] = field(default_factory=list)  # (point label, verdict)
    uncertain: list[str] = field(default_factory=list)  # points assigned to the nearer end
    noise: float | None = None  # largest IQR / median of one point's judged samples (time only)
    message: str = ""


@dataclass
class BisectReport:
    """Everything a bisection found, JSON-ready via :meth:`to_dict`."""

    kind: str  # "git" or "versions"
    points: int  # points in the range, endpoints included
    builds: int
    cache_hits: int
    measurements: int
    measured_points: int  # distinct points with measurements (endpoints included)
    skipped_points: list[str]
    outcomes: list[ConfigOutcome]
    threshold: float
    alpha: float
    metric: str = "time"
    threads: int | None = None  # intra-op threads of the measurements (None: one per CPU)

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and all(o.status == "bisected" for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


def format_change(change: float) -> str:
    """``+12.3%`` below a doubling, ``3.46x`` from there (a +34,592% step reads 346.9x)."""
    return f"{change:+.1%}" if -0.5 < change < 1.0 else f"{1 + change:.3g}x"


def report_rows(report: BisectReport) -> list[list[Any]]:
    """One row per culprit (one per configuration without any), under :data:`REPORT_COLUMNS`."""
    rows: list[list[Any]] = []
    for outcome in report.outcomes:
        ends = (
            outcome.status
            if outcome.change is None
            else f"{format_change(outcome.change)} {outcome.direction or outcome.status}"
        )
        if not outcome.culprits:
            rows.append([outcome.config, ends, None, None, outcome.message])
        for culprit in outcome.culprits:
            if culprit.reason == "found":
                what = _describe(culprit.candidates[0])
            else:
                what = f"{culprit.reason}: one of " + ", ".join(c["label"] for c in culprit.candidates)
            rows.append(
                [
                    outcome.config,
                    ends,
                    culprit.last_good,
                    None if culprit.change is None else format_change(culprit.change),
                    what,
                ]
            )
    return rows


def report_warnings(report: BisectReport) -> list[str]:
    """Why verdicts may be wrong: noisy samples, no single culprit, points assigned by nearness."""
    warnings = []
    for outcome in report.outcomes:
        if outcome.noise is not None and outcome.noise > report.threshold:
            warnings.append(
                f"{outcome.config}: the compared samples' spread (IQR) reached {outcome.noise:.0%} of the "
                f"median, above the {report.threshold:.0%} threshold: verdicts may be wrong. " + _noise_advice(report)
            )
        if outcome.status == "uncertain":
            warnings.append(f"{outcome.config}: {outcome.message}")
        if outcome.uncertain:
            warnings.append(
                f"{outcome.config}: points assigned to the nearer endpoint after re-measuring: "
                f"{', '.join(outcome.uncertain)}"
            )
    return warnings


def report_summary(report: BisectReport) -> str:
    """One line: builds, cache hits, measurements, points measured and skipped."""
    return (
        f"{report.builds} builds ({report.cache_hits} points from cache), {report.measurements} measurements, "
        f"{report.measured_points} of {report.points} points measured"
        + (f", skipped: {', '.join(report.skipped_points)}" if report.skipped_points else "")
    )


def _describe(candidate: dict) -> str:
    if "commit" in candidate:
        return (
            f"{candidate['label']} {candidate['subject']!r} ({candidate['files_changed']} files, "
            f"+{candidate['insertions']}/-{candidate['deletions']})"
        )
    return candidate["label"]


def _noise_advice(report: BisectReport) -> str:
    """What to change when samples are too noisy: threads first (the usual cause on a shared CPU)."""
    threads = report.threads
    advice = []
    if threads is None or threads > 1:
        advice.append("measure with --threads 1 (several intra-op threads on shared cores give bimodal samples)")
    advice.append("bisect on a quieter machine, with --fastest 20% and more --repeat")
    advice.append("or with --metric instructions/op_counts (deterministic)")
    return "; ".join(advice)
