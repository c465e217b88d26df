"""What the dashboard shows, as plain data: the latest run's table, each model's history, the figures.

Everything here is gathered from a :class:`~torchgauge.results.store.Store` and judged by
the existing code: :func:`~torchgauge.compare.regression.compare_results` (latest against
previous run), :func:`~torchgauge.report.history.history_tables` (step detection),
:func:`~torchgauge.compare.backend_ratios.compare_backends` (Figures 3-4),
:func:`~torchgauge.compare.devices.compare_devices` (Figure 5) and
:func:`~torchgauge.report.breakdown.domain_table` (Table 2). No HTML here: :mod:`.html`
renders these values, and escapes every string on the way out.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...compare.matching import config_key, representative
from ...compare.regression import TIME_METRIC, compare_results
from ...harness.metrics import quantities
from ...results.schema import ResultsFile, RunRecord
from ...results.store import SeriesPoint, Store, SuiteInfo
from ...stats.compare import DEFAULT_THRESHOLD
from ...stats.summary import IQR_WARN_THRESHOLD, summarize
from ..history import history_tables, run_lead, series_groups, stored_runs

__all__ = [
    "ENV_FIELDS",
    "INDEX_VERDICTS",
    "IndexRow",
    "LatestRun",
    "ModelHistory",
    "index_verdict",
    "latest_run",
    "model_history",
    "model_slug",
    "trace_paths",
]

# Verdicts of the index's "change" column: compare_results' regression / improvement, and its
# "unchanged" split by whether the change reached the threshold (then only the rank test was
# not convinced: inconclusive) or not (same); status changes and configs with nothing to compare.
INDEX_VERDICTS = ("regression", "improvement", "inconclusive", "same", "new failure", "fixed", "no previous", "-")
# Environment fields shown for each point of a history, in this order.
ENV_FIELDS = (
    "hostname",
    "machine_fingerprint",
    "torch_version",
    "torch_git_version",
    "python_version",
    "cuda_version",
    "gpu_name",
    "gpu_driver",
    "cpu_model",
    "cpu_count",
    "torch_num_threads",
    "platform",
)
# Statuses whose metrics are measurements (an accuracy failure keeps its timings).
MEASURED_STATUSES = ("ok", "fail_accuracy", "eager_nondeterministic")
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def model_slug(model: str) -> str:
    """A file-name-safe, collision-free name for ``model``'s page.

    Names made only of letters, digits, ``_``, ``.`` and ``-`` are kept; anything else
    (slashes, dots leading to ``..``, markup) is replaced and a hash of the name appended.
    """
    safe = _SLUG_UNSAFE.sub("_", model)[:80]
    if safe == model and not model.startswith("."):
        return model
    return safe.lstrip(".") + "-" + hashlib.sha1(model.encode()).hexdigest()[:10]


def index_verdict(verdict: str, change: float | None, threshold: float) -> str:
    """compare_results' time verdict as shown in the index (see :data:`INDEX_VERDICTS`)."""
    if verdict in ("regression", "improvement"):
        return verdict
    if change is not None and math.isfinite(change) and abs(change) >= threshold:
        return "inconclusive"
    return "same"


def trace_paths(metrics: Mapping[str, Any]) -> list[str]:
    """Trace files a run's metrics name (``metrics[<pass>]["trace"]``, e.g. the breakdown's profile)."""
    return [v["trace"] for v in metrics.values() if isinstance(v, Mapping) and isinstance(v.get("trace"), str)]


@dataclass(frozen=True)
class IndexRow:
    """One model and configuration of the latest run, judged against the previous run."""

    model: str
    domain: str
    mode: str
    device: str
    precision: str
    backend: str
    batch_size: int | None
    status: str
    error: str | None
    median_ms: float | None
    ci_low: float | None
    ci_high: float | None
    noisy: bool | None  # IQR / median above IQR_WARN_THRESHOLD; None without samples
    previous_ms: float | None
    change: float | None  # relative change of the median against the previous run
    p_value: float | None
    verdict: str  # one of INDEX_VERDICTS


@dataclass
class LatestRun:
    """The latest stored run, the run it is judged against, and the index rows."""

    suite: SuiteInfo
    previous: SuiteInfo | None
    results: ResultsFile
    rows: list[IndexRow]
    threshold: float
    regressions: int = 0
    improvements: int = 0


def _time_summary(
    metrics: Mapping[str, Any], status: str
) -> tuple[float | None, float | None, float | None, bool | None]:
    """(median, CI low, CI high, noisy) of a run's time; stored summaries first, else from its samples."""
    if status not in MEASURED_STATUSES:
        return None, None, None, None
    t = metrics.get("time_ms") or {}
    samples = [float(s) for s in t.get("samples") or [] if s is not None and not math.isnan(float(s))]
    if samples and any(t.get(k) is None for k in ("median", "ci_low", "ci_high")):
        s = summarize(samples)
        return s.median, s.ci_low, s.ci_high, s.noisy
    noisy = t.get("noisy")
    if noisy is None and t.get("median") and t.get("iqr") is not None:
        noisy = t["iqr"] / t["median"] > IQR_WARN_THRESHOLD
    return t.get("median"), t.get("ci_low"), t.get("ci_high"), noisy


def _group_time_summary(
    records: Sequence[RunRecord | SeriesPoint],
) -> tuple[float | None, float | None, float | None, bool | None]:
    """:func:`_time_summary` of one configuration's records in one stored run: a single record's
    own; for several (rounds: one process each) the median of their medians and its interval, as
    ``compare`` tests them. A run whose first failing record failed has none."""
    lead = next((r for r in records if r.status not in MEASURED_STATUSES), records[0])
    if lead.status not in MEASURED_STATUSES:
        return None, None, None, None
    if len(records) == 1:
        return _time_summary(records[0].metrics, records[0].status)
    medians = [m for m in (_time_summary(r.metrics, r.status)[0] for r in records) if m is not None]
    if not medians:
        return None, None, None, None
    s = summarize(medians)
    return s.median, s.ci_low, s.ci_high, s.noisy


def _suite_info(store: Store, suite_id: int) -> SuiteInfo:
    return next(s for s in store.suites() if s.id == suite_id)


def latest_run(store: Store, *, threshold: float = DEFAULT_THRESHOLD, machine: str | None = None) -> LatestRun:
    """The newest suite with runs (of ``machine`` if given), judged against that machine's previous suite.

    Raises:
        StoreError: the store holds no run (of that machine).
    """
    latest_id = store.resolve("latest", machine=machine)
    suite = _suite_info(store, latest_id)
    earlier = [i for i in store.latest_ids(machine=suite.machine_fingerprint, count=2) if i != latest_id]
    previous = _suite_info(store, earlier[0]) if earlier else None
    results = store.load(latest_id)
    found: dict[tuple, tuple[str, Any]] = {}
    regressions = improvements = 0
    if previous is not None:
        cmp = compare_results(store.load(previous.id), results, threshold=threshold)
        regressions, improvements = len(cmp.regressions), len(cmp.improvements)
        for f in (*cmp.regressions, *cmp.improvements, *cmp.unchanged):
            if f.metric == TIME_METRIC:
                found[f.config.key()] = ("finding", f)
        for kind, group in (("new failure", cmp.new_failures), ("fixed", cmp.fixes)):
            for s in group:
                found[s.config.key()] = (kind, s)
    rows = []
    groups: dict[tuple, list[RunRecord]] = {}  # rounds store one record per process: one row per configuration
    for record in results.runs:
        groups.setdefault(config_key(record), []).append(record)
    for records in groups.values():
        r = representative(records)
        median, lo, hi, noisy = _group_time_summary(records)
        kind, item = found.get(r.config.key(), (None, None))
        previous_ms = change = p_value = None
        if kind == "finding":
            previous_ms, change, p_value = item.base, item.change, item.p_value
            verdict = index_verdict(item.verdict, item.change, threshold)
        elif kind is not None:
            verdict = kind
        else:
            verdict = "no previous" if previous is None or r.status in MEASURED_STATUSES else "-"
        c = r.config
        rows.append(
            IndexRow(
                c.model,
                r.domain or "",
                c.mode,
                c.device,
                c.precision,
                c.backend,
                r.batch_size,
                r.status,
                r.error,
                median,
                lo,
                hi,
                noisy,
                previous_ms,
                change,
                p_value,
                verdict,
            )
        )
    return LatestRun(suite, previous, results, rows, threshold, regressions, improvements)


@dataclass(frozen=True)
class SeriesData:
    """One configuration's values of one metric, point by point (the chart's traces)."""

    label: str  # configuration, e.g. eval/cpu/fp32/eager
    runs: list[int]  # stored run (suite) ids
    dates: list[str]
    values: list[float | None]
    low: list[float | None]  # interval of each value (time: the median's CI); None without one
    high: list[float | None]
    level: list[float | None]  # the step detector's level at each point
    steps: list[dict[str, Any]]  # history_tables' steps: position, before, after, change, kind


@dataclass
class ModelHistory:
    """A model page: per metric the series of every configuration, and each point's details."""

    model: str
    slug: str
    metrics: dict[str, list[SeriesData]]  # metric (a quantity's name) -> series
    points: dict[str, list[dict[str, Any]]]  # configuration -> per point: run, date, status, error, env id, traces
    envs: dict[int, dict[str, Any]]  # env id (numbered on this page) -> ENV_FIELDS values
    threshold: float = DEFAULT_THRESHOLD


def _interval(points: Sequence[SeriesPoint], metric: str) -> tuple[float | None, float | None]:
    if metric != "time":
        return None, None
    _, low, high, _ = _group_time_summary(points)
    return low, high


def model_history(store: Store, model: str, *, threshold: float = DEFAULT_THRESHOLD) -> ModelHistory:
    """Every stored run of ``model``: series per metric with intervals and detected steps."""
    points = store.series(model)
    groups = series_groups(points)
    env_ids: dict[tuple, int] = {}
    envs: dict[int, dict[str, Any]] = {}
    details: dict[str, list[dict[str, Any]]] = {}
    for label, pts in groups.items():
        rows = []
        for run in stored_runs(pts):  # one point per stored run, as history_tables rows
            p = run_lead(run)
            env = {k: (p.env or {}).get(k) for k in ENV_FIELDS}
            env["torch_version"] = env["torch_version"] or p.torch_version
            env["torch_git_version"] = env["torch_git_version"] or p.torch_git_version
            key = tuple(sorted((k, str(v)) for k, v in env.items()))
            if key not in env_ids:
                env_ids[key] = len(env_ids) + 1
                envs[env_ids[key]] = env
            rows.append(
                {
                    "run": p.suite_id,
                    "date": p.created_at,
                    "status": p.status,
                    "error": p.error,
                    "env": env_ids[key],
                    "traces": [t for point in run for t in trace_paths(point.metrics)],
                }
            )
        details[label] = rows
    metrics: dict[str, list[SeriesData]] = {}
    for q in quantities():
        metric = q.name
        if not any(q.value(p.metrics) is not None for p in points):
            continue
        series = []
        for label, pts in groups.items():
            (table,) = history_tables(pts, metric, threshold=threshold)
            runs = stored_runs(pts)
            bounds = [_interval(run, metric) for run in runs]
            series.append(
                SeriesData(
                    label,
                    [row[0] for row in table.rows],
                    [run[0].created_at for run in runs],
                    [row[5] for row in table.rows],
                    [b[0] for b in bounds],
                    [b[1] for b in bounds],
                    [row[6] for row in table.rows],
                    table.steps,
                )
            )
        metrics[metric] = series
    return ModelHistory(model, model_slug(model), metrics, details, envs, threshold)
