"""``run_bisect``: bisect every configuration of a :class:`MeasureSpec` over one range.

The search itself is :mod:`torchgauge.stats.range_search` (pure); the points come from a
:class:`~.ranges.GitRange` or :class:`~.ranges.VersionRange`, are built and measured on
demand by :class:`~.point_cache.PointStore` and judged by :class:`~.judging.ConfigJudge`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...stats.range_search import BisectionError, BisectResult, bisect_range, find_culprits
from .judging import ConfigJudge, Judging
from .measure import MeasureFn
from .metric_facts import is_deterministic
from .point_cache import PointStore
from .ranges import PointSource
from .report import BisectReport, ConfigOutcome, CulpritReport
from .spec import MeasureSpec

__all__ = ["run_bisect"]

# run_bisect's default judging; Judging is frozen, so one shared instance is safe.
_DEFAULT_JUDGING = Judging()


def run_bisect(
    source: PointSource,
    spec: MeasureSpec,
    *,
    measure: MeasureFn | None = None,
    judging: Judging = _DEFAULT_JUDGING,
    multiple: bool = False,
    cache_dir: str | Path | None = None,
    on_event: Callable[[str], None] | None = None,
) -> BisectReport:
    """Bisect every configuration of ``spec`` over ``source``'s range; points are shared.

    Each probed point is built once and measured for all configurations in one process,
    so bisecting several flagged models costs about as many builds as one.

    Args:
        source: a :class:`GitRange` or :class:`VersionRange`.
        spec: the models, configuration and metric to re-measure.
        measure: ``measure(point_env, spec) -> {config label: values | error}``; the
            default runs ``torchgauge run`` in a fresh process (tests inject their own).
        judging: threshold, alpha, retries (defaults: ``compare``'s 7% and 0.01).
        multiple: find every change in the range, not just the first bad point.
        cache_dir: where measurements are cached (None: no cache).
        on_event: called with one-line progress messages.

    Returns:
        A :class:`BisectReport`; the source is closed (scratch worktree removed) on return.

    Example:
        >>> source = GitRange("~/pytorch", "v2.12.0", "main", "python setup.py develop",
        ...                   workdir="/tmp/bisect")  # doctest: +SKIP
        >>> report = run_bisect(source, MeasureSpec(models=("resnet50",), modes=("eval",)))  # doctest: +SKIP
        >>> report.outcomes[0].culprits[0].first_bad["subject"]  # doctest: +SKIP
    """
    try:
        if not spec.deterministic:
            judging.check_power(spec.base.repeat)
        store = PointStore(source, spec, measure=measure, cache_dir=cache_dir, on_event=on_event)
        n = len(store.points)
        outcomes = [_bisect_config(store, label, n, judging, multiple) for label in store.labels]
    finally:
        source.close()
    return BisectReport(
        kind=source.kind,
        points=n,
        builds=store.builds,
        cache_hits=store.cache_hits,
        measurements=store.measurements,
        measured_points=store.measured_count(),
        skipped_points=store.skipped_labels(),
        outcomes=outcomes,
        threshold=judging.threshold,
        alpha=judging.alpha,
        metric=spec.metric,
        threads=spec.threads,
    )


def _bisect_config(store: PointStore, label: str, n: int, judging: Judging, multiple: bool) -> ConfigOutcome:
    judge = ConfigJudge(store, label, n, judging)
    change, message = judge.endpoints()
    if change is None:
        return ConfigOutcome(label, "error", message=message)
    outcome = ConfigOutcome(label, "bisected", direction=judge.direction, change=change.change, p_value=change.p_value)
    if judge.direction is None:
        outcome.status = "not_reproduced"
        outcome.noise = judge.noise((0, n - 1))
        test = "" if change.p_value is None else f", p={change.p_value:.3g} (alpha {judging.alpha:g})"
        outcome.message = (
            f"good and bad do not differ: {store.spec.metric} change {change.change:+.1%}"
            f"{test}, threshold {judging.threshold:.0%}"
        )
        return outcome
    store.on_event(f"{label}: {judge.direction} of {change.change:+.1%} between the endpoints; bisecting")
    try:
        if multiple:
            result: BisectResult = find_culprits(n, lambda i: judge.samples(i) is not None, judge.differs)
        else:
            result = bisect_range(n, judge.classify)
    except BisectionError as exc:
        outcome.status, outcome.message = "error", str(exc)
        return outcome
    points = store.points
    doubts: list[str] = []
    for culprit in result.culprits:
        indices, reason = list(culprit.candidates), culprit.reason
        culprit_doubts = judge.doubts(culprit.last_good, indices[-1], change.change) if reason == "found" else []
        if culprit_doubts:  # name every point the evidence allows, not one confident culprit
            labels = {p.label: i for i, p in enumerate(points)}
            nearby = {labels[u] for u in judge.uncertain} | {labels[u] + 1 for u in judge.uncertain}
            indices = sorted({*indices, *(i for i in nearby if 0 < i < n)})
            reason = "uncertain"
            doubts += culprit_doubts
        candidates = [{"label": points[i].label, **store.source.describe(points[i])} for i in indices]
        outcome.culprits.append(
            CulpritReport(
                reason,
                points[culprit.last_good].label,
                candidates,
                judge.change(culprit.last_good, culprit.candidates[-1]),
            )
        )
    if doubts:
        outcome.status = "uncertain"
        outcome.message = (
            "the evidence does not single out one culprit: "
            + "; ".join(dict.fromkeys(doubts))
            + _rerun_advice(store.spec, judging)
        )
    outcome.probes = [(points[i].label, v) for i, v in result.probes]
    outcome.uncertain = judge.uncertain
    outcome.noise = judge.noise([i for i, _ in result.probes])
    return outcome


def _rerun_advice(spec: MeasureSpec, judging: Judging) -> str:
    """What to change for a clearer verdict: only the remedies this bisection did not already use."""
    remedies = ["on a quieter machine"]
    if spec.threads != 1:
        remedies.insert(0, "with --threads 1")
    if judging.fastest == 1.0 and not is_deterministic(spec.metric):
        remedies.append("with --fastest 20% --repeat 60")
    if not is_deterministic(spec.metric):
        remedies.append("with --metric instructions")
    return ". Re-run " + ", ".join(remedies[:-1]) + (" or " if len(remedies) > 1 else "") + remedies[-1]
