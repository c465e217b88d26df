"""Regression detection between two result sets (a base build and a new one).

The rule (TorchBench's nightly guard, made noise-aware; docs/regression-detection.md):

* **time** (``metrics["time_ms"]["samples"]``): flagged when the median slowdown reaches
  the threshold AND a one-sided Mann-Whitney U test is significant after a Holm or
  Benjamini-Hochberg correction over every tested configuration
  (:func:`torchgauge.stats.compare.judge`). When a side holds several runs of one
  configuration (fresh processes, e.g. from ``compare --confirm`` or merged repeated
  runs), the per-process medians are tested instead of the pooled samples
  (:func:`~torchgauge.stats.compare.pooled_or_group_medians`).
* **memory** (``cpu_peak_mb``, ``gpu_peak_mb``): the threshold and a floor scaled to the
  measured run-to-run spread (:func:`memory_floor_mb`); ``--confirm`` re-measures flagged
  memory like time; plus the leak flag
  (``metrics["leak"]["leaking"]``) turning on (regression) or off (improvement).
* **deterministic counts** (``instructions``, ``op_counts``, ``flops``): the threshold
  alone, reporting which operators' counts changed.
* **statuses**: a usable run that now fails is a new failure; the reverse is a fix.

Pure judging: no torch, no I/O. ``bisect`` calls :func:`compare_results` too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Hashable, Sequence

from ..results.schema import ResultsFile, RunConfig, RunRecord
from ..stats.compare import (
    CORRECTIONS,
    DEFAULT_ALPHA,
    DEFAULT_CORRECTION,
    DEFAULT_THRESHOLD,
    Change,
    compare_samples,
    compare_values,
    judge,
    median,
    pooled_or_group_medians,
)
from ..stats.deterministic import COUNT_THRESHOLD, INSTRUCTIONS_THRESHOLD, compare_counts, op_count_changes
from .matching import USABLE_STATUSES, Unmatched

__all__ = [
    "EXIT_INCONCLUSIVE",
    "EXIT_REGRESSION",
    "COUNT_METRICS",
    "COUNT_THRESHOLDS",
    "FINDING_KEYS",
    "MEMORY_METRICS",
    "MEMORY_MIN_DELTA_MB",
    "MEMORY_RUN_TO_RUN_SPREAD",
    "MEMORY_SPREAD_MULTIPLE",
    "TIME_METRIC",
    "TIME_SIGNALS",
    "Comparison",
    "Finding",
    "StatusChange",
    "compare_results",
    "exit_code",
    "hardware_note",
    "memory_floor_mb",
    "parse_threshold",
]

TIME_METRIC = "time_ms"
MEMORY_METRICS = ("cpu_peak_mb", "gpu_peak_mb")
# metric -> path of its per-step scalar inside RunRecord.metrics
COUNT_METRICS = {"instructions": ("instructions", "per_step"), "op_counts": ("op_counts", "total"), "flops": ("flops", "total")}
# Default thresholds of the deterministic counts (tighter than time: no noise to clear).
COUNT_THRESHOLDS = {"instructions": INSTRUCTIONS_THRESHOLD, "op_counts": COUNT_THRESHOLD, "flops": COUNT_THRESHOLD}
LEAK_METRIC = "leak"
# A peak-memory change must also exceed this many MiB: a 0.2 -> 0.3 MiB GPU peak is +50% and nothing.
MEMORY_MIN_DELTA_MB = 2.0
# Run-to-run spread (max - min) of cpu_peak_mb across fresh processes, as a fraction of the
# peak: at most 2.2% (resnet18 train, 9 MiB of 420) over 12 configurations x 6 processes
# (benchmarks/memory_spread.py; docs/regression-detection.md). Rounded up.
MEMORY_RUN_TO_RUN_SPREAD = 0.025
# A memory change must exceed this many times the spread: the spread observed between the
# processes of either side when both sides have several, else MEMORY_RUN_TO_RUN_SPREAD of the peak.
MEMORY_SPREAD_MULTIPLE = 2.0
# The JSON keys of a finding, in order (docs/regression-detection.md; CI scripts rely on them).
FINDING_KEYS = ("model", "mode", "device", "precision", "backend", "metric", "base", "new", "change", "p_value")


# `compare`'s exit codes (docs/regression-detection.md; the nightly workflow relies on them):
# 1 a regression or new failure, 3 an inconclusive change beyond the threshold (2 is click's usage error).
EXIT_REGRESSION = 1
EXIT_INCONCLUSIVE = 3


def exit_code(cmp: "Comparison", *, allow_inconclusive: bool = False) -> int:
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
    metric: str  # "time_ms", "cpu_peak_mb", "gpu_peak_mb", "leak", "instructions", "op_counts", "flops"
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
        doc: dict[str, Any] = dict(zip(FINDING_KEYS, (c.model, c.mode, c.device, c.precision, c.backend, self.metric,
                                                      self.base, self.new, self.change, self.p_value)))
        doc.update(batch_size=c.batch_size, verdict=self.verdict, n_base=self.n_base, n_new=self.n_new)
        if self.detail:
            doc["detail"] = self.detail
        return doc


@dataclass(frozen=True)
class StatusChange:
    """A configuration whose status moved between usable and failing."""

    config: RunConfig
    base_status: str
    new_status: str
    error: str | None = None  # last line of the failing side's error

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        return {"model": c.model, "mode": c.mode, "device": c.device, "precision": c.precision, "backend": c.backend,
                "batch_size": c.batch_size, "base_status": self.base_status, "new_status": self.new_status,
                "error": self.error}


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
    time_signal: str = "wall"  # a key of TIME_SIGNALS: which per-step series was tested

    @property
    def has_regressions(self) -> bool:
        return bool(self.regressions)

    @property
    def inconclusive_beyond_threshold(self) -> list[Finding]:
        """Inconclusive changes whose median change reaches the threshold: they fail a gate unless allowed."""
        return [f for f in self.inconclusive if f.change is not None and abs(f.change) >= self.threshold]

    @property
    def compared(self) -> int:
        """Number of configurations with at least one judged metric."""
        return len({f.config.key() for f in (*self.regressions, *self.improvements, *self.unchanged, *self.inconclusive)})

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
            "unchanged": len(self.unchanged),
            "confirm_rounds": self.confirm_rounds,
            "dismissed": [f.to_dict() for f in self.dismissed],
            "base_env": self.base_env,
            "new_env": self.new_env,
        }


def _label(config: RunConfig) -> str:
    bs = "default" if config.batch_size is None else config.batch_size
    return f"{config.label()}/bs={bs}"


def _group(records: Sequence[RunRecord]) -> dict[Hashable, list[RunRecord]]:
    out: dict[Hashable, list[RunRecord]] = {}
    for rec in records:
        out.setdefault(rec.config.key(), []).append(rec)
    return out


def _last_line(text: str | None) -> str | None:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _status(records: list[RunRecord]) -> RunRecord:
    """The representative run of a group: its first failing run, else its first run."""
    return next((r for r in records if r.status not in USABLE_STATUSES), records[0])


# Which per-step series of time_ms is tested: wall time, or the process's CPU time
# (``cpu_samples``; with one intra-op thread it ignores time the process spent descheduled).
TIME_SIGNALS = {"wall": "samples", "cpu": "cpu_samples"}


def _time_groups(records: list[RunRecord], field_name: str = "samples") -> list[list[float]]:
    groups = []
    for rec in records:
        samples = (rec.metrics.get(TIME_METRIC) or {}).get(field_name) or []
        clean = [float(v) for v in samples if v is not None and not math.isnan(float(v))]
        if clean:
            groups.append(clean)
    return groups


def _values(records: list[RunRecord], path: tuple[str, ...]) -> list[float]:
    out = []
    for rec in records:
        value: Any = rec.metrics
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append(float(value))
    return out


def _op_changes(base: list[RunRecord], new: list[RunRecord]) -> dict[str, Any]:
    """``{"ops": {op: {"kind", "base", "new"}}}`` for operators whose per-step counts changed."""
    b = (base[0].metrics.get("op_counts") or {}).get("by_op") or {}
    n = (new[0].metrics.get("op_counts") or {}).get("by_op") or {}
    changes = op_count_changes(b, n)
    return {"ops": {c.op: {"kind": c.kind, "base": c.old, "new": c.new} for c in changes}} if changes else {}


def _from_change(config: RunConfig, metric: str, change: Change, detail: dict[str, Any] | None = None) -> Finding:
    detail = dict(detail or {})
    if change.reason:
        detail["reason"] = change.reason
    return Finding(config, metric, change.base, change.new, change.change, change.p_value, change.verdict,
                   change.n_base, change.n_new, detail)


def compare_results(
    base: ResultsFile,
    new: ResultsFile,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    count_threshold: float | None = None,
    memory_min_delta_mb: float = MEMORY_MIN_DELTA_MB,
    time_signal: str = "wall",
) -> Comparison:
    """Judge every configuration present in both result sets.

    Args:
        base, new: the two result sets; runs are matched on :meth:`RunConfig.key`; several
            runs of one key on a side are treated as separate processes.
        threshold: relative change that counts for time and memory, e.g. 0.07.
        alpha: significance level of the one-sided rank test after correction.
        correction: ``"holm"`` (family-wise), ``"bh"`` (false discovery rate) or ``"none"``.
        count_threshold: threshold for every deterministic count; default per metric
            (:data:`COUNT_THRESHOLDS`: ``stats.deterministic``'s named constants).
        memory_min_delta_mb: absolute floor of a memory change (MiB).
        time_signal: ``"wall"`` (time_ms samples) or ``"cpu"`` (per-step process CPU time).

    Returns:
        A :class:`Comparison`; findings are in base order, time first.

    Example:
        >>> cmp = compare_results(base_results, new_results, threshold=0.07)  # doctest: +SKIP
        >>> [f.config.model for f in cmp.regressions]  # doctest: +SKIP
    """
    if correction not in CORRECTIONS:
        raise ValueError(f"invalid correction {correction!r}; accepted: {', '.join(CORRECTIONS)}")
    if time_signal not in TIME_SIGNALS:
        raise ValueError(f"invalid time signal {time_signal!r}; accepted: {', '.join(TIME_SIGNALS)}")
    if not 0 < alpha < 1:
        raise ValueError(f"invalid alpha {alpha}; accepted: a probability strictly between 0 and 1, e.g. 0.01")
    if not threshold > 0:
        raise ValueError(f"invalid threshold {threshold}; accepted: a positive fraction, e.g. 0.07")
    bg, ng = _group(base.runs), _group(new.runs)
    timed: list[tuple[RunConfig, Change]] = []
    others: list[Finding] = []
    new_failures: list[StatusChange] = []
    fixes: list[StatusChange] = []
    unmatched: list[Unmatched] = []

    for key, brecs in bg.items():
        nrecs = ng.get(key)
        b0 = brecs[0]
        if nrecs is None:
            unmatched.append(Unmatched(b0.config.model, b0.config.mode, _label(b0.config), "missing", "missing in new", side="new"))
            continue
        bs, ns = _status(brecs), _status(nrecs)
        cfg = nrecs[0].config
        b_ok, n_ok = bs.status in USABLE_STATUSES, ns.status in USABLE_STATUSES
        if b_ok and not n_ok:
            if ns.status not in ("unsupported", "skipped"):
                new_failures.append(StatusChange(cfg, bs.status, ns.status, _last_line(ns.error)))
            else:
                unmatched.append(Unmatched(cfg.model, cfg.mode, _label(cfg), "failed", f"{ns.status} in new", side="new", status=ns.status))
            continue
        if not b_ok:
            if n_ok and bs.status not in ("unsupported", "skipped"):
                fixes.append(StatusChange(cfg, bs.status, ns.status, _last_line(bs.error)))
            else:
                side = None if not n_ok else "base"
                unmatched.append(Unmatched(cfg.model, cfg.mode, _label(cfg), "failed",
                                           f"base: {bs.status}; new: {ns.status}", side=side, status=bs.status))
            continue
        b_batch, n_batch = brecs[0].batch_size, nrecs[0].batch_size
        if b_batch is not None and n_batch is not None and b_batch != n_batch:
            unmatched.append(Unmatched(cfg.model, cfg.mode, _label(cfg), "batch_mismatch",
                                       f"batch sizes differ: {b_batch} in base, {n_batch} in new"))
            continue

        bt, nt = _time_groups(brecs, TIME_SIGNALS[time_signal]), _time_groups(nrecs, TIME_SIGNALS[time_signal])
        if bt and nt:
            change = compare_samples(pooled_or_group_medians(bt), pooled_or_group_medians(nt), threshold=threshold, alpha=alpha)
            timed.append((cfg, change))
        for metric in MEMORY_METRICS:
            bv, nv = _values(brecs, (metric,)), _values(nrecs, (metric,))
            if bv and nv:
                change = compare_values(median(bv), median(nv), threshold=threshold)
                floor = memory_floor_mb(bv, nv, memory_min_delta_mb)
                if abs(change.new - change.base) < floor:
                    change = replace(change, verdict="unchanged")
                others.append(_from_change(cfg, metric, change, {"floor_mb": round(floor, 1)}))
        others.extend(_leak_findings(cfg, brecs, nrecs))
        for metric, path in COUNT_METRICS.items():
            bv, nv = _values(brecs, path), _values(nrecs, path)
            if bv and nv:
                limit = COUNT_THRESHOLDS[metric] if count_threshold is None else count_threshold
                change = compare_counts(median(bv), median(nv), threshold=limit)
                detail = _op_changes(brecs, nrecs) if metric == "op_counts" and change.verdict != "unchanged" else {}
                others.append(_from_change(cfg, metric, change, detail))

    for key, nrecs in ng.items():
        if key not in bg:
            n0 = nrecs[0]
            unmatched.append(Unmatched(n0.config.model, n0.config.mode, _label(n0.config), "missing", "missing in base", side="base"))

    judged = judge([c for _, c in timed], correction)
    findings = [_from_change(cfg, TIME_METRIC, c) for (cfg, _), c in zip(timed, judged)] + others
    inconclusive = [f for f in findings if f.verdict == "inconclusive"]
    inconclusive.sort(key=lambda f: f.change is None or abs(f.change) < threshold)  # beyond the threshold first
    return Comparison(
        inconclusive=inconclusive,
        hardware_note=hardware_note(base, new),
        threads_note=threads_note(base, new),
        time_signal=time_signal,
        regressions=[f for f in findings if f.verdict == "regression"],
        improvements=[f for f in findings if f.verdict == "improvement"],
        unchanged=[f for f in findings if f.verdict == "unchanged"],
        new_failures=new_failures,
        fixes=fixes,
        unmatched=unmatched,
        threshold=threshold,
        alpha=alpha,
        correction=correction,
        base_env=dict(base.env),
        new_env=dict(new.env),
    )


def memory_floor_mb(base: Sequence[float], new: Sequence[float], min_delta_mb: float = MEMORY_MIN_DELTA_MB) -> float:
    """Smallest peak-memory change (MiB) that counts between these per-process values.

    :data:`MEMORY_SPREAD_MULTIPLE` times the run-to-run spread: the spread seen within each
    side when both were measured in several processes (``--confirm``, ``--rounds``), else
    :data:`MEMORY_RUN_TO_RUN_SPREAD` of the base peak; never below ``min_delta_mb``.

    Example:
        >>> memory_floor_mb([400.0], [440.0])  # one process a side: 2 x 2.5% of 400 MiB
        20.0
        >>> memory_floor_mb([400.0, 409.0], [440.0, 441.0])  # observed spread 9 MiB
        18.0
    """
    if len(base) >= 2 and len(new) >= 2:
        spread = max(max(base) - min(base), max(new) - min(new))
    else:
        spread = MEMORY_RUN_TO_RUN_SPREAD * median(base)
    return max(min_delta_mb, MEMORY_SPREAD_MULTIPLE * spread)


def _leak_findings(cfg: RunConfig, base: list[RunRecord], new: list[RunRecord]) -> list[Finding]:
    def state(records: list[RunRecord]) -> tuple[bool, float | None] | None:
        leaks = [r.metrics.get(LEAK_METRIC) for r in records if isinstance(r.metrics.get(LEAK_METRIC), dict)]
        if not leaks:
            return None
        growth = [v for v in (lk.get("cpu_growth_mb_per_iter") for lk in leaks) if isinstance(v, (int, float))]
        return any(bool(lk.get("leaking")) for lk in leaks), (max(growth) if growth else None)

    b, n = state(base), state(new)
    if b is None or n is None:
        return []
    verdict = "regression" if n[0] and not b[0] else "improvement" if b[0] and not n[0] else "unchanged"
    return [Finding(cfg, LEAK_METRIC, b[1], n[1], None, None, verdict, detail={"base_leaking": b[0], "new_leaking": n[0]})]


def _fingerprints(results: ResultsFile) -> dict[str, dict[str, Any]]:
    """Fingerprint -> environment of every hardware a result set's runs came from."""
    from ..harness.env import machine_fingerprint

    envs = [results.env] + [r.env for r in results.runs if r.env]
    # recomputed where the hardware fields are there: older files hashed the hostname too
    return {(machine_fingerprint(e) if e.get("cpu_model") else e["machine_fingerprint"]): e
            for e in envs if e.get("cpu_model") or e.get("machine_fingerprint")}


def _intra_op_threads(results: ResultsFile) -> set[str]:
    """The intra-op thread counts a result set's runs recorded ("unrecorded" for runs from before the field)."""
    return {str((r.threads or {}).get("intra_op", "unrecorded")) for r in results.runs if r.status == "ok"}


def threads_note(base: ResultsFile, new: ResultsFile) -> str | None:
    """A sentence when the two sides ran with different intra-op thread counts (their times then differ by design)."""
    b, n = _intra_op_threads(base), _intra_op_threads(new)
    if not b or not n or b == n:
        return None
    return (f"different intra-op threads: base {', '.join(sorted(b))}, new {', '.join(sorted(n))} "
            "(unrecorded: torch's default, before threads were recorded). Time changes may be the threads'; "
            "rerun one side with `run --threads`.")


def hardware_note(base: ResultsFile, new: ResultsFile) -> str | None:
    """A sentence when the two sides, or the shards of one side, ran on different hardware."""
    from ..harness.env import describe_hardware

    b, n = _fingerprints(base), _fingerprints(new)
    notes = []
    for side, prints in (("base", b), ("new", n)):
        if len(prints) > 1:
            notes.append(f"the {side} side mixes {len(prints)} hardware types ("
                         + "; ".join(describe_hardware(e) for e in prints.values()) + ")")
    if b and n and not set(b) & set(n):
        notes.append(f"base ran on {'; '.join(describe_hardware(e) for e in b.values())}, new on "
                     f"{'; '.join(describe_hardware(e) for e in n.values())}")
    if not notes:
        return None
    return "different hardware: " + "; ".join(notes) + ". Time and memory changes may be the hardware's."
