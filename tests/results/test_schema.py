"""Results schema: round trips, strict JSON, versioning, atomic writes."""

from __future__ import annotations

import json

import pytest

from torchgauge.results.schema import (
    SCHEMA_VERSION,
    ResultsFile,
    RunConfig,
    RunRecord,
    SchemaError,
    load_results,
    migrate,
)


def _record(**kw) -> RunRecord:
    metrics = {
        "time_ms": {"samples": [1.0, 2.0, 3.0], "median": 2.0, "min": 1.0, "max": 3.0, "iqr": 1.0},
        "cpu_peak_mb": 300.0,
        "cpu_delta_mb": 50.0,
    }
    return RunRecord(
        RunConfig("resnet50", mode="eval", batch_size=None, **kw), "ok", domain="vision", metrics=metrics, batch_size=64
    )


def test_round_trip_keeps_everything(tmp_path) -> None:
    f = ResultsFile(
        env={"torch_version": "2.13.0"},
        runs=[_record(model_kwargs={"width": 2}, options={"x": 1})],
        torchgauge_version="0.1.0",
    )
    path = tmp_path / "r.json"
    f.write(path)
    back = load_results(path)
    run = back.runs[0]
    assert run.config == f.runs[0].config and run.batch_size == 64 and run.metrics == f.runs[0].metrics
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    for key in (
        "model",
        "domain",
        "mode",
        "device",
        "precision",
        "backend",
        "batch_size",
        "size",
        "status",
        "error",
        "metrics",
    ):
        assert key in doc["runs"][0]


def test_non_finite_values_become_null() -> None:
    rec = _record()
    rec.metrics["tflops"] = float("nan")
    doc = json.loads(ResultsFile(env={}, runs=[rec]).to_json())
    assert doc["runs"][0]["metrics"]["tflops"] is None


def test_invalid_status_and_missing_fields() -> None:
    with pytest.raises(SchemaError, match="invalid status 'crashed'"):
        RunRecord(RunConfig("m"), "crashed")
    with pytest.raises(SchemaError, match="lacks required field"):
        RunRecord.from_dict({"model": "m"})


def test_versions(tmp_path) -> None:
    with pytest.raises(SchemaError, match="newer than this torchgauge"):
        migrate({"schema_version": SCHEMA_VERSION + 1, "runs": []})
    with pytest.raises(SchemaError, match="schema_version"):
        migrate({"runs": []})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        load_results(bad)
    with pytest.raises(SchemaError, match="not found"):
        load_results(tmp_path / "missing.json")


def test_write_is_atomic(tmp_path, monkeypatch) -> None:
    path = tmp_path / "r.json"
    ResultsFile(env={}, runs=[_record()]).write(path)
    before = path.read_text()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("os.fsync", boom)
    with pytest.raises(OSError):
        ResultsFile(env={}, runs=[]).write(path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_config_key_and_label() -> None:
    cfg = RunConfig("m", mode="eval", device="cuda", batch_size=8)
    assert cfg.key() == ("m", "eval", "cuda", "fp32", "eager", 8)
    assert cfg.label() == "m/eval/cuda/fp32/eager"
    assert cfg.with_(mode="train").mode == "train"


def test_planned_configurations_say_what_is_missing(tmp_path) -> None:
    planned = [RunConfig("a", mode="train"), RunConfig("a", mode="eval"), RunConfig("b", mode="eval", batch_size=4)]
    results = ResultsFile(env={}, planned=planned, runs=[RunRecord(planned[0], "ok")])
    path = tmp_path / "r.json"
    results.write(path)
    doc = json.loads(path.read_text())
    assert doc["planned"][2] == {
        "model": "b",
        "mode": "eval",
        "device": "cpu",
        "precision": "fp32",
        "backend": "eager",
        "batch_size": 4,
        "size": "full",
    }
    loaded = load_results(path)
    assert [c.label() for c in loaded.missing()] == ["a/eval/cpu/fp32/eager", "b/eval/cpu/fp32/eager"]
    assert loaded.missing()[1].batch_size == 4
    doc.pop("planned")  # files from before the field: nothing planned, nothing missing
    assert ResultsFile.from_dict(doc).missing() == []
    with pytest.raises(SchemaError, match="lacks 'model'"):
        ResultsFile.from_dict({**doc, "planned": [{"mode": "eval"}]})
