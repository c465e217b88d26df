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

from ...compare.backend_ratios import compare_backends, ratio_metrics
from ...compare.devices import compare_devices, describe_env
from ...compare.matching import CompareError
from ...compare.regression import TIME_METRIC, compare_results
from ...harness.metrics import quantities
from ...results.schema import ResultsFile, RunRecord
from ...results.store import SeriesPoint, Store, SuiteInfo
from ...stats.compare import DEFAULT_THRESHOLD
from ...stats.summary import IQR_WARN_THRESHOLD, summarize
from ..breakdown import COMPONENT_LABELS, COMPONENTS, BreakdownRow, breakdown_rows, domain_table
from ..history import history_tables, series_groups

__all__ = [
    "ENV_FIELDS",
    "INDEX_VERDICTS",
    "IndexRow",
    "LatestRun",
    "ModelHistory",
    "figures_data",
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
    for r in results.runs:
        median, lo, hi, noisy = _time_summary(r.metrics, r.status)
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


def _interval(point: SeriesPoint, metric: str) -> tuple[float | None, float | None]:
    if metric != "time":
        return None, None
    _, low, high, _ = _time_summary(point.metrics, point.status)
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
        for p in pts:
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
                    "traces": trace_paths(p.metrics),
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
            bounds = [_interval(p, metric) for p in pts]
            series.append(
                SeriesData(
                    label,
                    [row[0] for row in table.rows],
                    [p.created_at for p in pts],
                    [row[5] for row in table.rows],
                    [b[0] for b in bounds],
                    [b[1] for b in bounds],
                    [row[6] for row in table.rows],
                    table.steps,
                )
            )
        metrics[metric] = series
    return ModelHistory(model, model_slug(model), metrics, details, envs, threshold)


def _breakdown(records: Sequence[RunRecord]) -> dict[str, Any]:
    """Table 2 and the stacked bars, once per (device, precision, backend) that has breakdowns."""
    groups: dict[str, list[BreakdownRow]] = {}
    for record in records:
        c = record.config
        groups.setdefault(f"{c.device}/{c.precision}/{c.backend}", []).extend(breakdown_rows([record]))
    tables, bars = [], []
    for config, rows in groups.items():
        for kind in COMPONENTS:
            if not any(r.kind == kind for r in rows):
                continue
            columns, table = domain_table(rows, kind)
            tables.append({"kind": kind, "config": config, "columns": columns, "rows": table})
            for mode in ("train", "eval"):
                members = [r for r in rows if r.kind == kind and r.mode == mode]
                if members:
                    bars.append(
                        {
                            "kind": kind,
                            "config": config,
                            "mode": mode,
                            "models": [f"{r.model} ({r.domain})" for r in members],
                            "components": [
                                {"name": COMPONENT_LABELS[n], "values": [100.0 * r.fractions[n] for r in members]}
                                for n in COMPONENTS[kind]
                            ],
                        }
                    )
    return {"tables": tables, "bars": bars}


def _backends(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    present = sorted({r.config.backend for r in records})
    if len(present) < 2:
        return []
    baseline = "eager" if "eager" in present else present[0]
    out = []
    base_runs = [r for r in records if r.config.backend == baseline]
    for candidate in (b for b in present if b != baseline):
        cand_runs = [r for r in records if r.config.backend == candidate]
        try:
            cmp = compare_backends(base_runs, cand_runs, baseline=baseline, candidate=candidate)
        except CompareError as exc:
            out.append({"baseline": baseline, "candidate": candidate, "error": str(exc)})
            continue
        titles = ratio_metrics()
        metrics = [m for m in titles if any(r.ratios.get(m) is not None for r in cmp.rows)]
        out.append(
            {
                "baseline": baseline,
                "candidate": candidate,
                "metrics": metrics,
                "titles": {m: titles[m] for m in metrics},
                "rows": [r.as_dict() for r in cmp.rows],
                "geomeans": cmp.geomeans,
                "failed_candidate": [u.as_dict() for u in cmp.failed_candidate],
                "failed_accuracy": [f"{r.model}/{r.mode}" for r in cmp.failed_accuracy],
            }
        )
    return out


def _device_sides(store: Store, latest: LatestRun) -> list[tuple[str, ResultsFile]]:
    """(label, runs) per device of the latest run of each machine, the latest run's first."""
    newest: dict[str | None, int] = {}
    for s in store.suites():
        if s.runs:
            newest[s.machine_fingerprint] = s.id
    order = [latest.suite.id] + sorted(i for i in newest.values() if i != latest.suite.id)
    sides = []
    for suite_id in order:
        results = latest.results if suite_id == latest.suite.id else store.load(suite_id)
        for device in sorted({r.config.device for r in results.runs}):
            runs = [r for r in results.runs if r.config.device == device]
            label = f"run {suite_id} {device}: {describe_env(results.env)}"
            sides.append((label, ResultsFile(env=results.env, runs=runs, created_at=results.created_at)))
    return sides


def _devices(store: Store, latest: LatestRun) -> list[dict[str, Any]]:
    sides = _device_sides(store, latest)
    out = []
    for b_label, b in sides[1:]:
        a_label, a = sides[0]
        try:
            cmp = compare_devices(a, b, a_label=a_label, b_label=b_label)
        except CompareError as exc:
            out.append({"a": a_label, "b": b_label, "error": str(exc)})
            continue
        if cmp.rows:
            out.append({**cmp.to_dict(), "error": None})
    return out


def _coverage_figure(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a :func:`~torchgauge.stats.coverage_sets.summarize_coverage` summary the page draws."""
    apis, ops = summary.get("apis") or {}, summary.get("ops") or {}
    return {
        "summary": {k: summary.get(k) for k in ("models", "against", "cover_target", "modules")},
        "apis": {
            k: apis.get(k) for k in ("suite", "tagged", "ratio", "universe", "fraction_of_universe", "cover_subset")
        },
        "ops": {k: ops.get(k) for k in ("suite", "tagged", "ratio", "cover_subset")},
        "per_domain": summary.get("per_domain") or {},
        "greedy": apis.get("greedy") or [],
    }


def _recorded_coverage(records: Sequence[RunRecord]) -> dict[str, Any] | None:
    """The coverage summary of runs made with ``--metrics coverage``; None when no run has one.

    Uses :func:`torchgauge.workflows.coverage.entries_from_records` (registry tags, torch's API universe),
    so torch and the model registry are imported only when such runs exist.

    Raises:
        ValueError: a run with coverage is of a model this torchgauge does not register.
    """
    if not any(isinstance(r.metrics.get("coverage"), Mapping) for r in records):
        return None
    from ...harness.api_recorders import api_universe
    from ...registry import UnknownModelError
    from ...stats.coverage_sets import summarize_coverage
    from ...workflows.coverage import entries_from_records

    try:
        entries, _failures = entries_from_records(records)
    except UnknownModelError as exc:
        raise ValueError(f"cannot summarise the recorded coverage: {exc.args[0]}") from None
    return summarize_coverage(entries, universe=api_universe())


def figures_data(store: Store, latest: LatestRun, coverage: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The paper's figures for the latest run: breakdown, backends, devices and coverage.

    Args:
        store: the history (other machines' latest runs are the device comparison's other sides).
        latest: from :func:`latest_run`.
        coverage: a ``torchgauge coverage --output`` document; without it, the coverage recorded by
            the latest run's ``--metrics coverage`` runs, if any.

    Returns:
        JSON-ready figures; ``coverage`` is None without coverage data, ``coverage_error`` says
        why recorded coverage could not be summarised.
    """
    cov, error = None, None
    if coverage is not None:
        cov = _coverage_figure(coverage.get("summary") or {})
    else:
        try:
            recorded = _recorded_coverage(latest.results.runs)
        except ValueError as exc:
            recorded, error = None, str(exc)
        cov = None if recorded is None else _coverage_figure(recorded)
    return {
        "breakdown": _breakdown(latest.results.runs),
        "backends": _backends(latest.results.runs),
        "devices": _devices(store, latest),
        "coverage": cov,
        "coverage_error": error,
    }
