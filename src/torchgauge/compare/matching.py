"""Pair the runs of two result sets on a configuration key, and say why the rest did not pair.

One pairing for every comparison: ``compare`` (every axis; several runs of a configuration
on a side are one group: rounds, fresh processes), ``compare-backends`` (key without the
backend) and ``compare-devices`` (key without the device). Keys come from
:func:`config_key`. The batch size in a key is the *requested* one (``None`` = the model's
default), so that a run that failed before building still pairs with its counterpart and
shows up as a failure rather than as "missing"; paired runs whose actual batch sizes
differ are reported as unmatched.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..config import CONFIG_AXES
from ..harness.metrics import quantities
from ..results.schema import RunConfig, RunRecord

__all__ = [
    "CONFIG_AXES",
    "USABLE_STATUSES",
    "CompareError",
    "GroupPair",
    "config_key",
    "config_label",
    "group_config",
    "Matching",
    "Unmatched",
    "match_groups",
    "match_runs",
    "representative",
    "run_values",
    "time_samples",
    "time_verdict",
]

# Runs that did not run for want of support: not a failure of either side.
NOT_RUN_STATUSES = ("unsupported", "skipped")


def _axes_without(without: str | Iterable[str]) -> tuple[str, ...]:
    dropped = {without} if isinstance(without, str) else set(without)
    unknown = dropped - set(CONFIG_AXES)
    if unknown:
        raise ValueError(f"invalid axis {sorted(unknown)[0]!r}; accepted: {', '.join(CONFIG_AXES)}")
    return tuple(a for a in CONFIG_AXES if a not in dropped)


def _config(record: RunRecord | RunConfig) -> RunConfig:
    return record.config if isinstance(record, RunRecord) else record


def config_key(record: RunRecord | RunConfig, without: str | Iterable[str] = ()) -> tuple:
    """The configuration identity of a run, less the ``without`` axes (those being compared).

    Example:
        >>> from torchgauge.results.schema import RunConfig
        >>> config_key(RunConfig("resnet18", mode="eval", backend="inductor"), without="backend")
        ('resnet18', 'eval', 'cpu', 'fp32', None)
    """
    c = _config(record)
    return tuple(getattr(c, axis) for axis in _axes_without(without))


def config_label(record: RunRecord | RunConfig, without: str | Iterable[str] = ()) -> str:
    """The human label of :func:`config_key`, e.g. ``resnet18/eval/cpu/fp32/eager/bs=default``."""
    c = _config(record)
    parts = [str(getattr(c, axis)) for axis in _axes_without(without) if axis != "batch_size"]
    return "/".join(parts) + f"/bs={'default' if c.batch_size is None else c.batch_size}"


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
    reason: str  # "missing", "failed", "unsupported" (on both sides), "batch_mismatch" or "metric_missing"
    detail: str  # human sentence: which side and why
    side: str | None = None  # label of the side that lacks or failed the run; None for both
    status: str | None = None  # the failed run's status (reason "failed", or a "missing" whose one run failed)
    metric: str | None = None  # reason "metric_missing": the quantity one side lacks

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Matching:
    """Result of :func:`match_runs`: comparable pairs in base order, plus the rest."""

    pairs: list[tuple[Hashable, RunRecord, RunRecord]]
    unmatched: list[Unmatched]


@dataclass(frozen=True)
class GroupPair:
    """One configuration key with every run of it on each side (a side without any: missing there)."""

    key: Hashable
    base: tuple[RunRecord, ...]
    new: tuple[RunRecord, ...]
    unmatched: Unmatched | None = None  # why the two groups cannot be compared; None: they can

    @property
    def base_run(self) -> RunRecord | None:
        return representative(self.base) if self.base else None

    @property
    def new_run(self) -> RunRecord | None:
        return representative(self.new) if self.new else None


def representative(records: Sequence[RunRecord]) -> RunRecord:
    """The run that speaks for a group: its first failing run, else its first run."""
    return next((r for r in records if r.status not in USABLE_STATUSES), records[0])


def group_config(records: Sequence[RunRecord]) -> RunConfig:
    """The configuration a group of runs of one key measured together.

    Rounds after the first request fewer metrics (:func:`torchgauge.config.later_round`), and
    with several jobs the first record of a group need not be the first round's: this is the
    config of the first record that requested every metric any of them did (the first round's),
    else the first record's with the union of their metrics, in the order first requested.
    """
    wanted: list[str] = []
    for record in records:
        wanted += [m for m in record.config.metrics if m not in wanted]
    full = next((r.config for r in records if set(wanted) <= set(r.config.metrics)), None)
    return full if full is not None else records[0].config.with_(metrics=tuple(wanted))


def run_values(record: RunRecord) -> dict[str, float | None]:
    """The ratio columns of a run (the registry's quantities with a ``ratio_key``): time (ms), CPU/GPU memory (MiB)."""
    return {q.ratio_key: q.value(record.metrics) for q in quantities() if q.ratio_key}


def time_samples(record: RunRecord) -> list[float]:
    """The raw timed samples (ms) of a run; empty when it has none."""
    t = record.metrics.get("time_ms") or {}
    return [float(x) for x in t.get("samples") or [] if x is not None]


def time_verdict(base: RunRecord, new: RunRecord) -> str | None:
    """``"faster"``, ``"slower"``, ``"same"`` or ``"inconclusive"`` for ``new`` against ``base``,
    or None without samples.

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


def _groups(records: Iterable[RunRecord], key: Callable[[RunRecord], Hashable]) -> dict[Hashable, list[RunRecord]]:
    out: dict[Hashable, list[RunRecord]] = {}
    for rec in records:
        out.setdefault(key(rec), []).append(rec)
    return out


def _missing(
    present: RunRecord, cfg: str, absent_side: str, present_side: str, near: dict[tuple[str, str], list[str]]
) -> Unmatched:
    detail = f"missing in {absent_side}"
    others = near.get((present.config.model, present.config.mode))
    if others:  # the same model and mode in another configuration (e.g. another batch size)
        detail += f" (it has {', '.join(others)})"
    if present.status not in USABLE_STATUSES:  # say so: it would not have compared anyway
        detail += f"; {present.status} in {present_side}" + (
            f" ({_error_line(present.error)})" if present.error else ""
        )
    return Unmatched(
        present.config.model,
        present.config.mode,
        cfg,
        "missing",
        detail,
        side=absent_side,
        status=None if present.status in USABLE_STATUSES else present.status,
    )


def _by_model_mode(records: Iterable[RunRecord], label: Callable[[RunRecord], str]) -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = {}
    for r in records:
        out.setdefault((r.config.model, r.config.mode), []).append(label(r))
    return out


def _not_comparable(b: RunRecord, n: RunRecord, cfg: str, base_label: str, new_label: str) -> Unmatched | None:
    """Why two present runs cannot be compared (a failure, no support, other batch sizes), or None."""
    bad = [(side, r) for side, r in ((base_label, b), (new_label, n)) if r.status not in USABLE_STATUSES]
    if len(bad) == 2 and all(r.status in NOT_RUN_STATUSES for _, r in bad):
        # Not a failure of either side: the model has no such configuration (e.g. eval-only).
        detail = f"{b.status} on both sides" + (f" ({_error_line(b.error)})" if b.error else "")
        return Unmatched(b.config.model, b.config.mode, cfg, "unsupported", detail, status=b.status)
    if bad:
        side = bad[0][0] if len(bad) == 1 else None
        detail = "; ".join(f"{s}: {r.status}" + (f" ({_error_line(r.error)})" if r.error else "") for s, r in bad)
        return Unmatched(
            b.config.model, b.config.mode, cfg, "failed", f"failed in {detail}", side=side, status=bad[0][1].status
        )
    if b.batch_size is not None and n.batch_size is not None and b.batch_size != n.batch_size:
        return Unmatched(
            b.config.model,
            b.config.mode,
            cfg,
            "batch_mismatch",
            f"batch sizes differ: {b.batch_size} in {base_label}, {n.batch_size} in {new_label}",
        )
    return None


def match_groups(
    base: Sequence[RunRecord],
    new: Sequence[RunRecord],
    *,
    key: Callable[[RunRecord], Hashable] = config_key,
    label: Callable[[RunRecord], str] = config_label,
    base_label: str = "base",
    new_label: str = "new",
) -> list[GroupPair]:
    """Pair the runs of ``base`` and ``new`` with equal ``key``, every run of a key as one group.

    Args:
        base, new: the two sides' records; several runs of one key on a side (rounds, fresh
            processes) form one group.
        key: configuration identity, by default every axis (:func:`config_key`); it must
            contain the model, mode and requested batch size in a way ``label`` can show.
        label: human label of a record's configuration.
        base_label, new_label: names of the sides in messages (file names, backends).

    Returns:
        One :class:`GroupPair` per key, in ``base`` order, then ``new``-only keys. A pair is
        comparable (``unmatched`` None) when both groups' :func:`representative` runs have
        usable measurements (:data:`USABLE_STATUSES`) and equal actual batch sizes.
    """
    bg, ng = _groups(base, key), _groups(new, key)
    near_base = _by_model_mode((g[0] for g in bg.values()), label)
    near_new = _by_model_mode((g[0] for g in ng.values()), label)
    out: list[GroupPair] = []
    for k, brecs in bg.items():
        b = representative(brecs)
        nrecs = ng.get(k, [])
        why = (
            _not_comparable(b, representative(nrecs), label(b), base_label, new_label)
            if nrecs
            else _missing(b, label(b), new_label, base_label, near_new)
        )
        out.append(GroupPair(k, tuple(brecs), tuple(nrecs), why))
    for k, nrecs in ng.items():
        if k not in bg:
            n = representative(nrecs)
            out.append(GroupPair(k, (), tuple(nrecs), _missing(n, label(n), base_label, new_label, near_base)))
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
    """:func:`match_groups` for sides with one run per configuration: comparable pairs and the rest.

    Raises:
        CompareError: a side holds two runs with the same key.
    """
    for side, records in ((base_label, base), (new_label, new)):
        for group in _groups(records, key).values():
            if len(group) > 1:
                raise CompareError(
                    f"{side} has more than one run of {label(group[0])}; "
                    "compare result sets with one run per configuration"
                )
    groups = match_groups(base, new, key=key, label=label, base_label=base_label, new_label=new_label)
    return Matching(
        pairs=[(g.key, g.base[0], g.new[0]) for g in groups if g.unmatched is None],
        unmatched=[g.unmatched for g in groups if g.unmatched is not None],
    )
