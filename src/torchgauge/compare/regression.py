"""Regression detection between two result sets (a base build and a new one).

Which metrics are judged, and how, comes from the metric registry
(:func:`torchgauge.harness.metrics.quantities`: each quantity's ``rule``); a finding names its
quantity by its record key (``time_ms``, ``cpu_peak_mb``, ...). Runs pair through
:func:`torchgauge.compare.matching.match_groups`, the pairing of the backend and device
comparisons, with several runs of a configuration on a side as one group.

The rules (TorchBench's nightly guard, made noise-aware; docs/regression-detection.md):

* **time** (rule ``rank_test``, ``metrics["time_ms"]["samples"]``): flagged when the median
  slowdown reaches the threshold AND a one-sided Mann-Whitney U test is significant after a Holm or
  Benjamini-Hochberg correction over every tested configuration
  (:func:`torchgauge.stats.compare.judge`). When a side holds several runs of one
  configuration (fresh processes, e.g. from ``compare --confirm`` or merged repeated
  runs), the per-process medians are tested instead of the pooled samples
  (:func:`~torchgauge.stats.compare.pooled_or_group_medians`).
* **memory** (rule ``memory``: ``cpu_peak_mb``, ``gpu_peak_mb``, ``cpu_tensor_peak_mb``): the
  median change reaches the threshold and exceeds a floor scaled to the quantity's measured
  run-to-run spread (:func:`memory_floor_mb`); ``--confirm`` re-measures flagged memory in
  fresh processes like time, and judges the medians of the reruns.
* **flags** (rule ``flag``: ``metrics["leak"]["leaking"]``) turning on (regression) or off (improvement).
* **deterministic counts** (rule ``exact``: ``instructions``, ``op_counts``, ``flops``): the
  threshold alone (the quantity's own unless ``count_threshold``), reporting which
  operators' counts changed.
* **deterministic values on a side with several runs** (rounds collect them in the first round
  only): the value of the record(s) that carry it; records of one side that disagree (beyond
  :data:`~torchgauge.compare.group_values.AGREEMENT_SPREAD_MULTIPLE` times the quantity's
  ``spread``: any difference for exact counts) make the finding ``inconclusive``, naming the
  values, instead of one being picked.
* **statuses**: a usable run that now fails is a new failure; the reverse is a fix.

Pure judging: no I/O, no measuring. ``bisect`` calls :func:`compare_results` too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..harness.metrics import Quantity, quantities, quantity
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
    relative_change,
)
from ..stats.deterministic import compare_counts, op_count_changes
from .comparison import (
    EXIT_INCONCLUSIVE,
    EXIT_REGRESSION,
    FINDING_KEYS,
    Comparison,
    Finding,
    StatusChange,
    beyond_threshold,
    exit_code,
    parse_threshold,
)
from .env_notes import hardware_note, threads_note
from .group_values import AGREEMENT_SPREAD_MULTIPLE, agree, listed, record_values
from .matching import (
    NOT_RUN_STATUSES,
    USABLE_STATUSES,
    GroupPair,
    Unmatched,
    config_label,
    group_config,
    match_groups,
)
from .time_signal import DEFAULT_TIME_SIGNAL, TIME_SIGNAL_CHOICES, TIME_SIGNALS, signal_for

__all__ = [
    "AGREEMENT_SPREAD_MULTIPLE",
    "EXIT_INCONCLUSIVE",
    "EXIT_REGRESSION",
    "FINDING_KEYS",
    "MEMORY_MIN_DELTA_MB",
    "MEMORY_SPREAD_MULTIPLE",
    "TIME_METRIC",
    "TIME_SIGNALS",
    "Comparison",
    "Finding",
    "StatusChange",
    "compare_results",
    "exit_code",
    "hardware_note",
    "measured_spread",
    "memory_floor_mb",
    "parse_threshold",
    "threads_note",
]

# The record key of the timed pass's step time, as findings name it.
TIME_METRIC = quantity("time").record_key
# A peak-memory change must also exceed this many MiB: a 0.2 -> 0.3 MiB GPU peak is +50% and nothing.
MEMORY_MIN_DELTA_MB = 2.0
# A memory change must exceed this many times the run-to-run spread: the quantity's measured
# ``spread`` (a fraction of the base value, harness.metrics) or, when both sides were measured
# in several processes, the spread seen between them, whichever is larger.
MEMORY_SPREAD_MULTIPLE = 2.0
# The operator breakdown reported beside a changed count (metrics["op_counts"]["by_op"]).
OP_COUNTS = "op_counts"
# Order of the per-configuration findings after the rank-tested ones.
_UNTESTED_RULES = ("memory", "flag", "exact")


def _last_line(text: str | None) -> str | None:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _sample_groups(records: Sequence[RunRecord], path: tuple[str, ...]) -> list[list[float]]:
    groups = []
    for rec in records:
        samples: Any = rec.metrics
        for part in path:
            samples = samples.get(part) if isinstance(samples, dict) else None
        clean = [float(v) for v in samples or [] if v is not None and not math.isnan(float(v))]
        if clean:
            groups.append(clean)
    return groups


def _by_op(records: Sequence[RunRecord]) -> dict[str, Any]:
    """The per-operator counts of the first record that has them (rounds: the first round's)."""
    for rec in records:
        counts = rec.metrics.get(OP_COUNTS)
        if isinstance(counts, dict) and counts.get("by_op"):
            return counts["by_op"]
    return {}


def _op_changes(base: Sequence[RunRecord], new: Sequence[RunRecord]) -> dict[str, Any]:
    """``{"ops": {op: {"kind", "base", "new"}}}`` for operators whose per-step counts changed."""
    changes = op_count_changes(_by_op(base), _by_op(new))
    return {"ops": {c.op: {"kind": c.kind, "base": c.old, "new": c.new} for c in changes}} if changes else {}


def _from_change(config: RunConfig, metric: str, change: Change, detail: dict[str, Any] | None = None) -> Finding:
    detail = dict(detail or {})
    if change.reason:
        detail["reason"] = change.reason
    return Finding(
        config,
        metric,
        change.base,
        change.new,
        change.change,
        change.p_value,
        change.verdict,
        change.n_base,
        change.n_new,
        detail,
    )


def _status_change(pair: GroupPair) -> StatusChange | None:
    """A usable run that now fails (new failure) or the reverse (fix); not-run statuses are neither."""
    b, n = pair.base_run, pair.new_run
    if b is None or n is None:
        return None
    b_ok, n_ok = b.status in USABLE_STATUSES, n.status in USABLE_STATUSES
    if b_ok and not n_ok and n.status not in NOT_RUN_STATUSES:
        return StatusChange(pair.new[0].config, b.status, n.status, _last_line(n.error))
    if n_ok and not b_ok and b.status not in NOT_RUN_STATUSES:
        return StatusChange(pair.new[0].config, b.status, n.status, _last_line(b.error))
    return None


def _check_judge_args(threshold: float, alpha: float, correction: str, time_signal: str) -> None:
    if correction not in CORRECTIONS:
        raise ValueError(f"invalid correction {correction!r}; accepted: {', '.join(CORRECTIONS)}")
    if time_signal not in TIME_SIGNAL_CHOICES:
        raise ValueError(f"invalid time signal {time_signal!r}; accepted: {', '.join(TIME_SIGNAL_CHOICES)}")
    if not 0 < alpha < 1:
        raise ValueError(f"invalid alpha {alpha}; accepted: a probability strictly between 0 and 1, e.g. 0.01")
    if not threshold > 0:
        raise ValueError(f"invalid threshold {threshold}; accepted: a positive fraction, e.g. 0.07")


def compare_results(
    base: ResultsFile,
    new: ResultsFile,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    correction: str = DEFAULT_CORRECTION,
    count_threshold: float | None = None,
    memory_min_delta_mb: float = MEMORY_MIN_DELTA_MB,
    time_signal: str = DEFAULT_TIME_SIGNAL,
) -> Comparison:
    """Judge every configuration present in both result sets.

    Args:
        base, new: the two result sets; runs pair on every axis of
            :func:`~torchgauge.compare.matching.config_key`; several runs of one key on a
            side are one group of separate processes.
        threshold: relative change that counts for time and memory, e.g. 0.07.
        alpha: significance level of the one-sided rank test after correction.
        correction: ``"holm"`` (family-wise), ``"bh"`` (false discovery rate) or ``"none"``.
        count_threshold: threshold for every deterministic count; default per quantity
            (its registered ``threshold``: ``stats.deterministic``'s named constants).
        memory_min_delta_mb: absolute floor of a memory change (MiB).
        time_signal: ``"wall"`` (time_ms samples), ``"cpu"`` (per-step process CPU time) or
            ``"auto"`` (CPU time where it is the step's cost, else wall; :func:`signal_for`).
            Either way a side without CPU samples is tested on wall time; each time finding's
            ``detail["signal"]`` names what was tested (``signal_note`` why, when not asked for).

    Returns:
        A :class:`Comparison`; findings are in base order, time first.

    Example:
        >>> cmp = compare_results(base_results, new_results, threshold=0.07)  # doctest: +SKIP
        >>> [f.config.model for f in cmp.regressions]  # doctest: +SKIP
    """
    _check_judge_args(threshold, alpha, correction, time_signal)
    tested = [q for q in quantities() if q.rule == "rank_test"]
    untested = [q for rule in _UNTESTED_RULES for q in quantities() if q.rule == rule]
    timed: list[tuple[RunConfig, str, Change, dict[str, str]]] = []
    others: list[Finding] = []
    new_failures: list[StatusChange] = []
    fixes: list[StatusChange] = []
    unmatched: list[Unmatched] = []
    for pair in match_groups(base.runs, new.runs):
        status = _status_change(pair)
        if status is not None:
            (new_failures if status.base_status in USABLE_STATUSES else fixes).append(status)
            continue
        if pair.unmatched is not None:
            unmatched.append(pair.unmatched)
            continue
        cfg = group_config(pair.new)
        signal, note = signal_for(time_signal, pair.base, pair.new)
        tested_on = {"signal": signal, **({"signal_note": note} if note else {})}
        for q in tested:
            path = (*q.samples[:-1], TIME_SIGNALS[signal])
            bt, nt = _sample_groups(pair.base, path), _sample_groups(pair.new, path)
            if bt and nt:
                change = compare_samples(
                    pooled_or_group_medians(bt), pooled_or_group_medians(nt), threshold=threshold, alpha=alpha
                )
                timed.append((cfg, q.record_key, change, tested_on))
            elif bt or nt:
                unmatched.append(_metric_missing(cfg, q.record_key, lacking="new" if bt else "base"))
        for q in untested:
            if q.rule != "flag" and bool(record_values(pair.base, q)) != bool(record_values(pair.new, q)):
                lacking = "base" if record_values(pair.new, q) else "new"
                unmatched.append(_metric_missing(cfg, q.record_key, lacking=lacking))
                continue
            others.extend(_judge_untested(q, cfg, pair, threshold, count_threshold, memory_min_delta_mb))

    judged = judge([c for _, _, c, _ in timed], correction)
    findings = [_from_change(cfg, metric, c, on) for (cfg, metric, _, on), c in zip(timed, judged)] + others
    inconclusive = [f for f in findings if f.verdict == "inconclusive"]
    inconclusive.sort(key=lambda f: not beyond_threshold(f, threshold))  # beyond the threshold first
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


def _metric_missing(cfg: RunConfig, metric: str, *, lacking: str) -> Unmatched:
    """A quantity one side measured and the other did not (not requested there, or its pass failed):
    not compared, and said so, so that a gate that silently lost its signal is visible."""
    present = "base" if lacking == "new" else "new"
    detail = f"{metric} measured in {present} only: not compared"
    return Unmatched(cfg.model, cfg.mode, config_label(cfg), "metric_missing", detail, side=lacking, metric=metric)


def _judge_untested(
    q: Quantity,
    cfg: RunConfig,
    pair: GroupPair,
    threshold: float,
    count_threshold: float | None,
    memory_min_delta_mb: float,
) -> list[Finding]:
    """The findings of one quantity judged without a rank test (its rule: memory, flag or exact)."""
    if q.rule == "flag":
        return _flag_findings(q, cfg, pair.base, pair.new)
    bv, nv = record_values(pair.base, q), record_values(pair.new, q)
    if not bv or not nv:
        return []
    limit = threshold if q.rule == "memory" else q.threshold if count_threshold is None else count_threshold
    if q.deterministic:
        disagreement = _disagreement(q, cfg, bv, nv, limit)
        if disagreement is not None:
            return [disagreement]
    if q.rule == "memory":
        change = replace(compare_values(median(bv), median(nv), threshold=threshold), n_base=len(bv), n_new=len(nv))
        floor = memory_floor_mb(bv, nv, q.spread, memory_min_delta_mb)
        if abs(change.new - change.base) < floor:
            change = replace(change, verdict="unchanged")
        return [_from_change(cfg, q.record_key, change, {"floor_mb": round(floor, 1)})]
    change = replace(compare_counts(median(bv), median(nv), threshold=limit), n_base=len(bv), n_new=len(nv))
    detail = _op_changes(pair.base, pair.new) if q.name == OP_COUNTS and change.verdict != "unchanged" else {}
    return [_from_change(cfg, q.record_key, change, detail)]


def _disagreement(
    q: Quantity, cfg: RunConfig, base: Sequence[float], new: Sequence[float], threshold: float
) -> Finding | None:
    """An ``inconclusive`` finding when one side's records disagree on a deterministic quantity, else None.

    Its ``change`` is the largest relative change between any base and any new value (what the
    disagreement could hide: beyond ``threshold`` it fails the gate, exit 3); a disagreeing
    side's value is None, its values are in the detail.
    """
    split = {side: values for side, values in (("base", base), ("new", new)) if not agree(values, q.spread)}
    if not split:
        return None
    worst = max((relative_change(b, n) for b in base for n in new), key=abs)
    said = "; ".join(
        f"the {side} side's {len(values)} records disagree on {q.name} ({listed(values)})"
        for side, values in split.items()
    )
    detail = {
        "reason": f"{said}: a deterministic value is the same in every process of one build, so none is picked",
        "base_values": list(base),
        "new_values": list(new),
        "threshold": threshold,
    }
    b = None if "base" in split else median(base)
    n = None if "new" in split else median(new)
    return Finding(cfg, q.record_key, b, n, worst, None, "inconclusive", len(base), len(new), detail)


def measured_spread(values: Sequence[float]) -> float:
    """Run-to-run spread of per-process values: (max - min) / median (0 for fewer than two).

    What a memory quantity's ``spread`` fact is set from (the largest over the configurations
    measured by benchmarks/memory_spread.py).

    Example:
        >>> measured_spread([400.0, 380.0, 402.0])
        0.055
    """
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / median(values)


def memory_floor_mb(
    base: Sequence[float], new: Sequence[float], spread: float, min_delta_mb: float = MEMORY_MIN_DELTA_MB
) -> float:
    """Smallest change (MiB) of a memory quantity that counts between these per-process values.

    :data:`MEMORY_SPREAD_MULTIPLE` times the larger of the quantity's measured run-to-run
    ``spread`` (a fraction of the base median: the floor scales with the footprint) and the
    spread seen within each side when both were measured in several processes (``--confirm``
    reruns, merged runs); never below ``min_delta_mb``.

    Example:
        >>> memory_floor_mb([400.0], [440.0], spread=0.025)  # one process a side: 2 x 2.5% of 400 MiB
        20.0
        >>> memory_floor_mb([400.0, 415.0], [440.0, 441.0], spread=0.025)  # observed spread 15 MiB
        30.0
        >>> memory_floor_mb([3.0], [5.0], spread=0.0)  # a deterministic quantity: the absolute floor
        2.0
    """
    expected = spread * median(base)
    if len(base) >= 2 and len(new) >= 2:
        expected = max(expected, max(base) - min(base), max(new) - min(new))
    return max(min_delta_mb, MEMORY_SPREAD_MULTIPLE * expected)


def _flag_findings(q: Quantity, cfg: RunConfig, base: Sequence[RunRecord], new: Sequence[RunRecord]) -> list[Finding]:
    """A flag (``metrics[record]["leaking"]``) turning on or off; base/new are the largest values (growth)."""

    def state(records: Sequence[RunRecord]) -> tuple[bool, float | None] | None:
        flags = [r.metrics.get(q.record_key) for r in records if isinstance(r.metrics.get(q.record_key), dict)]
        if not flags:
            return None
        values = [v for v in (q.value(r.metrics) for r in records) if v is not None]
        return any(bool(f.get("leaking")) for f in flags), (max(values) if values else None)

    b, n = state(base), state(new)
    if b is None or n is None:
        return []
    verdict = "regression" if n[0] and not b[0] else "improvement" if b[0] and not n[0] else "unchanged"
    return [
        Finding(cfg, q.record_key, b[1], n[1], None, None, verdict, detail={"base_leaking": b[0], "new_leaking": n[0]})
    ]
