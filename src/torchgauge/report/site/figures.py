"""The dashboard's figures for the latest run: time breakdown, backend and device ratios and
API coverage, as plain data for the page's charts (:mod:`.data` gives the index and the
per-model histories)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...compare.backend_ratios import compare_backends, ratio_metrics
from ...compare.devices import compare_devices, describe_env
from ...compare.matching import CompareError
from ...results.schema import ResultsFile, RunRecord
from ...results.store import Store
from ..breakdown import COMPONENT_LABELS, COMPONENTS, BreakdownRow, breakdown_rows, domain_table
from .data import LatestRun

__all__ = ["figures_data"]


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
