"""Adding a metric is one file: a metric registered with one quantity reaches the store, compare and the tables.

The throwaway metric below lives only in this test module (the registry is restored after
each test): nothing else in torchgauge names it, yet ``history`` (the store), ``compare``
and ``compare-backends`` (ratios, geometric means, the terminal table) pick it up.
"""

from __future__ import annotations

import pytest

from torchgauge.compare.backend_ratios import compare_backends
from torchgauge.compare.regression import compare_results
from torchgauge.harness import metrics as registry
from torchgauge.harness.metrics import Quantity, register_metric
from torchgauge.report.comparisons import backend_columns, backend_rows, compiler_summary_columns, compiler_summary_rows
from torchgauge.report.history import history_tables
from torchgauge.report.regression import format_value
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord
from torchgauge.results.store import Store, metric_value

WIDGETS = Quantity(
    "widgets",
    ("widgets", "per_step"),
    "widgets/iter",
    deterministic=True,
    threshold=0.05,
    rule="exact",
    title="widgets",
    ratio_key="widgets",
)


@pytest.fixture
def widgets_metric(monkeypatch):
    """Register the throwaway metric "widgets" for one test, as a metric file would."""
    monkeypatch.setattr(registry, "_QUANTITIES", dict(registry._QUANTITIES))
    monkeypatch.setattr(registry, "_METRICS", dict(registry._METRICS))

    @register_metric("widgets", "widgets made per step (a test metric)", quantities=[WIDGETS])
    def collect_widgets(workload, config, measured):  # pragma: no cover - never run here
        return {"widgets": {"per_step": 1}}

    return WIDGETS


def _run(model: str, widgets: float, *, backend: str = "eager", time_ms: float = 10.0) -> RunRecord:
    samples = [time_ms * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]
    return RunRecord(
        RunConfig(model, mode="eval", backend=backend),
        "ok",
        batch_size=2,
        metrics={"time_ms": {"samples": samples, "median": time_ms}, "widgets": {"per_step": widgets}},
    )


def test_store_follows_the_new_quantity(widgets_metric, tmp_path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        for widgets in (100.0, 100.0, 100.0, 130.0, 130.0, 130.0):
            suite = store.begin_suite({"torch_version": "2.13.0"})
            store.add_run(suite, _run("m", widgets))
        points = store.series("m")
    assert [metric_value(p.metrics, "widgets") for p in points] == [100.0] * 3 + [130.0] * 3
    (table,) = history_tables(points, "widgets", threshold=0.05)
    assert [(s["position"], s["kind"]) for s in table.steps] == [(3, "regression")]


def test_compare_judges_the_new_quantity_by_its_facts(widgets_metric) -> None:
    base = ResultsFile(env={}, runs=[_run("up", 100.0), _run("same", 100.0)])
    new = ResultsFile(env={}, runs=[_run("up", 106.0), _run("same", 104.0)])
    cmp = compare_results(base, new)
    (reg,) = [f for f in cmp.regressions if f.metric == "widgets"]
    assert (reg.config.model, reg.base, reg.new, reg.p_value) == ("up", 100.0, 106.0, None)  # threshold 5%, no test
    assert [f.config.model for f in cmp.unchanged if f.metric == "widgets"] == ["same"]
    assert format_value("widgets", 1234.0) == "1,234"  # an exact count


def test_backend_comparison_table_gets_a_ratio_column(widgets_metric) -> None:
    cmp = compare_backends(
        [_run("m", 100.0)], [_run("m", 50.0, backend="inductor", time_ms=5.0)], baseline="eager", candidate="inductor"
    )
    (row,) = cmp.rows
    assert row.ratios["widgets"] == 0.5 and cmp.geomeans["eval"]["widgets"] == {"geomean": 0.5, "n": 1}
    columns, justify = backend_columns()
    assert "widgets cand/base" in columns and len(columns) == len(justify) == len(backend_rows(cmp)[0])
    assert backend_rows(cmp)[0][columns.index("widgets cand/base")] == 0.5
    summary = compiler_summary_columns()[0]
    assert "widgets cand/base geomean" in summary and len(compiler_summary_rows(cmp)[0]) == len(summary)


def test_without_the_metric_nothing_changes() -> None:
    columns, _ = backend_columns()
    assert columns == (
        "model",
        "mode",
        "batch",
        "base ms",
        "cand ms",
        "speedup",
        "time cand/base",
        "candidate",
        "CPU mem cand/base",
        "GPU mem cand/base",
        "compile s",
        "graph breaks",
        "accuracy",
    )
    with pytest.raises(ValueError, match="unknown metric 'widgets'"):
        metric_value({}, "widgets")
