"""Pair the runs of two result sets on a configuration key, and say why the rest did not pair.

Used by ``compare-backends`` (key without the backend) and ``compare-devices`` (key without
the device). The batch size in a key is the *requested* one (``None`` = the model's
default), so that a run that failed before building still pairs with its counterpart and
shows up as a failure rather than as "missing"; paired runs whose actual batch sizes
differ are reported as unmatched.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Hashable, Iterable, Sequence

from ..results.schema import RunRecord

__all__ = [
    "USABLE_STATUSES",
    "CompareError",
    "batch_label",
    "Matching",
    "Unmatched",
    "match_runs",
    "run_values",
    "time_samples",
    "time_verdict",
]

# Statuses whose time and memory metrics are valid: an accuracy failure keeps its
# measurements (the run happened; its outputs were wrong), so it can be compared and flagged;
# so does a run whose eager reference was itself nondeterministic (nothing to judge).
USABLE_STATUSES = frozenset({"ok", "fail_accuracy", "eager_nondeterministic"})


class CompareError(ValueError):
    """Two result sets cannot be compared as asked (the message says why and what to do)."""


@dataclass(frozen=True)
class Unmatched:
    """A configuration present on only one side, failed on a side, or otherwise not comparable."""

    model: str
    mode: str
    config: str  # the configuration label, e.g. "resnet18/eval/fp32/eager/bs=default"
    reason: str  # "missing", "failed", "unsupported" (on both sides) or "batch_mismatch"
    detail: str  # human sentence: which side and why
    side: str | None = None  # label of the side that lacks or failed the run; None for both
    status: str | None = None  # the failed run's status (reason "failed", or a "missing" whose one run failed)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Matching:
    """Result of :func:`match_runs`: comparable pairs in base order, plus the rest."""

    pairs: list[tuple[Hashable, RunRecord, RunRecord]]
    unmatched: list[Unmatched]


def run_values(record: RunRecord) -> dict[str, float | None]:
    """The comparable values of a run: median step time (ms), peak CPU and GPU memory (MB)."""
    t = record.metrics.get("time_ms") or {}
    median = t.get("median")
    if median is None and t.get("samples"):
        from ..stats.compare import median as _median

        median = _median([float(x) for x in t["samples"] if x is not None])
    return {
        "time": median,
        "cpu_mem": record.metrics.get("cpu_peak_mb"),
        "gpu_mem": record.metrics.get("gpu_peak_mb"),
    }


def time_samples(record: RunRecord) -> list[float]:
    """The raw timed samples (ms) of a run; empty when it has none."""
    t = record.metrics.get("time_ms") or {}
    return [float(x) for x in t.get("samples") or [] if x is not None]


def time_verdict(base: RunRecord, new: RunRecord) -> str | None:
    """``"faster"``, ``"slower"``, ``"same"`` or ``"inconclusive"`` for ``new`` against ``base``, or None without samples.

    ``"inconclusive"``: the rank test cannot reach alpha with so few samples (e.g. three per
    side), so no difference could ever count; it is never reported as ``"same"``.

    A difference counts only when the medians differ by the threshold *and* the samples by
    a rank test (:func:`torchgauge.stats.compare.compare_samples`, its default threshold and
    alpha), so a ratio of 0.9 from two noisy runs reads "same".
    """
    from ..stats.compare import compare_samples

    b, n = time_samples(base), time_samples(new)
    if not b or not n:
        return None
    verdict = compare_samples(b, n).verdict
    return {"regression": "slower", "improvement": "faster", "inconclusive": "inconclusive"}.get(verdict, "same")


def _error_line(text: str | None) -> str:
    if not text:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def batch_label(record: RunRecord) -> str:
    """The requested batch size of a run as shown in labels (``default`` when not set)."""
    return "default" if record.config.batch_size is None else str(record.config.batch_size)


def _index(records: Iterable[RunRecord], key: Callable[[RunRecord], Hashable], label: Callable[[RunRecord], str],
           side: str) -> dict[Hashable, RunRecord]:
    out: dict[Hashable, RunRecord] = {}
    for rec in records:
        k = key(rec)
        if k in out:
            raise CompareError(
                f"{side} has more than one run of {label(rec)}; compare result sets with one run per configuration"
            )
        out[k] = rec
    return out


def _missing(present: RunRecord, cfg: str, absent_side: str, present_side: str,
             near: dict[tuple[str, str], list[str]]) -> Unmatched:
    detail = f"missing in {absent_side}"
    others = near.get((present.config.model, present.config.mode))
    if others:  # the same model and mode in another configuration (e.g. another batch size)
        detail += f" (it has {', '.join(others)})"
    if present.status not in USABLE_STATUSES:  # say so: it would not have compared anyway
        detail += f"; {present.status} in {present_side}" + (f" ({_error_line(present.error)})" if present.error else "")
    return Unmatched(present.config.model, present.config.mode, cfg, "missing", detail, side=absent_side,
                     status=None if present.status in USABLE_STATUSES else present.status)


def _by_model_mode(records: Iterable[RunRecord], label: Callable[[RunRecord], str]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for r in records:
        out.setdefault((r.config.model, r.config.mode), []).append(label(r))
    return out


def match_runs(
    base: Sequence[RunRecord],
    new: Sequence[RunRecord],
    *,
    key: Callable[[RunRecord], Hashable],
    label: Callable[[RunRecord], str],
    base_label: str = "base",
    new_label: str = "new",
) -> Matching:
    """Pair ``base`` and ``new`` runs with equal ``key``; classify everything else.

    Args:
        base, new: the two sides' records.
        key: configuration identity; must contain the model, mode and requested batch size
            in a way :func:`label` can show.
        label: human label of a record's configuration.
        base_label, new_label: names of the sides in messages (file names, backends).

    Returns:
        :class:`Matching`: pairs where both runs have usable measurements
        (:data:`USABLE_STATUSES`) and equal actual batch sizes, in ``base`` order, then
        ``new``-only runs; :class:`Unmatched` entries for the rest.

    Raises:
        CompareError: a side holds two runs with the same key.
    """
    bi = _index(base, key, label, base_label)
    ni = _index(new, key, label, new_label)
    pairs: list[tuple[Hashable, RunRecord, RunRecord]] = []
    unmatched: list[Unmatched] = []
    near_base = _by_model_mode(bi.values(), label)
    near_new = _by_model_mode(ni.values(), label)
    for k, b in bi.items():
        cfg = label(b)
        n = ni.get(k)
        if n is None:
            unmatched.append(_missing(b, cfg, new_label, base_label, near_new))
            continue
        bad = [(side, r) for side, r in ((base_label, b), (new_label, n)) if r.status not in USABLE_STATUSES]
        if len(bad) == 2 and all(r.status in ("unsupported", "skipped") for _, r in bad):
            # Not a failure of either side: the model has no such configuration (e.g. eval-only).
            unmatched.append(Unmatched(b.config.model, b.config.mode, cfg, "unsupported",
                                       f"{b.status} on both sides" + (f" ({_error_line(b.error)})" if b.error else ""),
                                       status=b.status))
            continue
        if bad:
            side = bad[0][0] if len(bad) == 1 else None
            detail = "; ".join(f"{s}: {r.status}" + (f" ({_error_line(r.error)})" if r.error else "") for s, r in bad)
            unmatched.append(Unmatched(b.config.model, b.config.mode, cfg, "failed", f"failed in {detail}",
                                       side=side, status=bad[0][1].status))
            continue
        if b.batch_size is not None and n.batch_size is not None and b.batch_size != n.batch_size:
            unmatched.append(Unmatched(b.config.model, b.config.mode, cfg, "batch_mismatch",
                                       f"batch sizes differ: {b.batch_size} in {base_label}, {n.batch_size} in {new_label}"))
            continue
        pairs.append((k, b, n))
    for k, n in ni.items():
        if k not in bi:
            unmatched.append(_missing(n, label(n), base_label, new_label, near_base))
    return Matching(pairs=pairs, unmatched=unmatched)
