"""The notebook API: torchgauge.run / load / compare and Results.to_pandas (issue 23)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import torchgauge
from torchgauge.api import PANDAS_MISSING, Results
from torchgauge.compare.backend_ratios import BackendComparison
from torchgauge.compare.regression import Comparison
from torchgauge.results.schema import SchemaError
from torchgauge.results.store import Store

PLANTED = str(Path(__file__).parent / "fixtures" / "planted_models.py")
_spec = importlib.util.spec_from_file_location(
    "results_factory", Path(__file__).parent / "fixtures" / "results_factory.py"
)
factory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)


@pytest.fixture(scope="module")
def smoke_results() -> Results:
    return torchgauge.run(
        ["PLANTED_OK", "planted_raises"],
        mode="eval",
        size="smoke",
        repeat=3,
        warmup=1,
        isolate=False,
        model_files=[PLANTED],
    )


def test_run_returns_records_in_plan_order(smoke_results) -> None:
    assert [(r.config.model, r.status) for r in smoke_results] == [("planted_ok", "ok"), ("planted_raises", "error")]
    assert len(smoke_results[0].metrics["time_ms"]["samples"]) == 3
    assert smoke_results.env["torch_version"] and smoke_results.source == "run"


def test_run_isolated_in_workers(tmp_path) -> None:
    out = tmp_path / "r.json"
    res = torchgauge.run(
        "planted_ok", mode="train", size="smoke", repeat=2, warmup=1, model_files=[PLANTED], output=out
    )
    assert [r.status for r in res] == ["ok"] and torchgauge.load(out)[0].config.mode == "train"


def test_rows_and_to_pandas(smoke_results) -> None:
    rows = smoke_results.rows()
    assert rows[0]["model"] == "planted_ok" and rows[0]["median_ms"] > 0 and rows[1]["status"] == "error"
    pd = pytest.importorskip("pandas", reason="pandas is optional; to_pandas is tested where it is installed")
    df = smoke_results.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df["model"]) == ["planted_ok", "planted_raises"]
    assert {"precision", "backend", "median_ms", "noisy", "cpu_peak_mb"} <= set(df.columns)


def test_to_pandas_without_pandas_says_how_to_fix(smoke_results, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(ImportError, match="pip install pandas") as info:
        smoke_results.to_pandas()
    assert str(info.value) == PANDAS_MISSING


def test_load_json_and_database(smoke_results, tmp_path) -> None:
    path = smoke_results.save(tmp_path / "r.json")
    from_json = torchgauge.load(path)
    assert [r.config.model for r in from_json] == ["planted_ok", "planted_raises"]
    db = tmp_path / "history.db"
    with Store(db) as store:
        first = store.save(from_json.file)
        store.save(from_json.file)
    assert torchgauge.load(db).source.endswith(f"#{first + 1}")
    assert torchgauge.load(db, run_id=first).source.endswith(f"#{first}")
    assert len(torchgauge.load(db, "previous")) == 2
    with pytest.raises(SchemaError, match="no results file or history database"):
        torchgauge.load(tmp_path / "missing.json")


def test_compare_picks_backends_or_regressions(tmp_path) -> None:
    eager = factory.write_results(tmp_path / "eager.json", [factory.run("m1", time_ms=10.0)])
    inductor = factory.write_results(tmp_path / "inductor.json", [factory.run("m1", backend="inductor", time_ms=4.0)])
    slower = factory.write_results(tmp_path / "slower.json", [factory.run("m1", time_ms=20.0)])
    cmp = torchgauge.compare(eager, inductor)
    assert isinstance(cmp, BackendComparison) and cmp.rows[0].speedup == pytest.approx(2.5)
    judged = torchgauge.compare(torchgauge.load(eager), slower, threshold=0.05)
    assert isinstance(judged, Comparison) and [f.config.model for f in judged.regressions] == ["m1"]


def test_run_with_torchbench_precision_stores_concrete_precisions() -> None:
    res = torchgauge.run(
        ["planted_ok", "planted_torchbench_fp16"],
        mode="eval",
        precision="torchbench",
        size="smoke",
        repeat=1,
        warmup=0,
        isolate=False,
        model_files=[PLANTED],
    )
    assert [(r.config.model, r.config.precision, r.status) for r in res] == [
        ("planted_ok", "fp32", "ok"),
        ("planted_torchbench_fp16", "fp16", "unsupported"),  # as when fp16 is asked for by name
    ]
    assert "does not support precision 'fp16'" in res[1].error


@pytest.mark.parametrize("field, value", [("precision", "fp8"), ("backend", "nosuch")])
def test_run_refuses_an_unknown_precision_or_backend_up_front(field: str, value: str) -> None:
    # one error naming the accepted values, before any worker starts (not an error record per model)
    from torchgauge.config import ConfigError

    with pytest.raises(ConfigError, match=f"invalid {field} '{value}'; accepted: .*"):
        torchgauge.run("lennard_jones", mode="eval", size="smoke", **{field: value})
