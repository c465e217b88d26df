from __future__ import annotations

import json

import pytest

from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord

from .conftest import PLANTED


def _cuda_record(model: str, domain: str, mode: str, active: float, h2d: float, idle: float) -> RunRecord:
    fractions = {"active": active, "data_movement_h2d": h2d, "data_movement_d2h": 0.0, "data_movement_d2d": 0.0,
                 "idle": idle}
    metrics = {"breakdown": {"kind": "cuda", "steps": 5, "span_ms": 10.0, "fractions": fractions,
                             "ms": {k: 10.0 * v for k, v in fractions.items()}}}
    return RunRecord(RunConfig(model, mode, device="cuda"), "ok", domain=domain, metrics=metrics)


def test_run_with_breakdown_and_profile_then_report(cli, tmp_path) -> None:
    out, traces, chart = tmp_path / "r.json", tmp_path / "traces", tmp_path / "bars.svg"
    code, _, err = cli("run", "planted_ok", "--model-file", PLANTED, "--size", "smoke", "--repeat", "2", "--warmup", "1",
                       "--metrics", "time", "--profile", str(traces), "--output", str(out), "--quiet", "--in-process")
    assert code == 0, err
    runs = json.loads(out.read_text())["runs"]
    for run in runs:  # --profile implies the breakdown pass
        b = run["metrics"]["breakdown"]
        assert b["kind"] == "cpu" and b["steps"] >= 1 and b["span_ms"] > 0
        assert sum(b["fractions"].values()) == pytest.approx(1.0)
        assert set(b["fractions"]) == {"aten", "overhead"} and b["ms"]["aten"] > 0
        trace = json.loads(open(b["trace"]).read())
        assert any(e.get("cat") == "cpu_op" for e in trace["traceEvents"])
    assert sorted(p.name for p in traces.iterdir()) == ["planted_ok-eval-cpu-fp32-eager.pt.trace.json",
                                                        "planted_ok-train-cpu-fp32-eager.pt.trace.json"]
    code, stdout, err = cli("breakdown", str(out), "--output", str(chart), "--per-model")
    assert code == 0, err
    assert "ATen ops %" in stdout and "planted_ok" in stdout and "other" in stdout
    assert chart.read_text().lstrip().startswith("<?xml")


def test_domain_table_is_the_mean_over_models(cli, tmp_path) -> None:
    results = ResultsFile(env={}, runs=[
        _cuda_record("a", "vision", "train", 0.8, 0.1, 0.1),
        _cuda_record("b", "vision", "train", 0.6, 0.0, 0.4),
        _cuda_record("c", "nlp", "eval", 0.5, 0.25, 0.25),
    ])
    path = tmp_path / "cuda.json"
    results.write(path)
    code, stdout, err = cli("breakdown", str(path), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    rows = {(r["domain"], r["mode"]): r for r in doc["domains"]["cuda"]}
    assert rows[("vision", "train")]["models"] == 2
    assert rows[("vision", "train")]["GPU active %"] == pytest.approx(70.0)
    assert rows[("vision", "train")]["GPU idle %"] == pytest.approx(25.0)
    assert rows[("nlp", "eval")]["H2D copy %"] == pytest.approx(25.0)
    assert [r["model"] for r in doc["runs"]] == ["a", "b", "c"]
    code, _, err = cli("breakdown", str(path), "--output", str(tmp_path / "bars.png"))
    assert code == 0, err
    assert (tmp_path / "bars.png").read_bytes()[:4] == b"\x89PNG"


def test_results_without_breakdown_get_one_line_error(cli, tmp_path) -> None:
    path = tmp_path / "plain.json"
    ResultsFile(env={}, runs=[RunRecord(RunConfig("m"), "ok", metrics={"time_ms": {"samples": [1.0]}})]).write(path)
    code, _, err = cli("breakdown", str(path))
    assert code == 1 and "has a breakdown" in err and "--metrics time,breakdown" in err


@pytest.mark.parametrize("args, message", [
    (["missing.json"], "results file not found"),
    (["cuda.json", "--output", "chart.txt"], "accepted extensions: .png, .svg, .pdf"),
])
def test_bad_input_gets_one_line_error(cli, tmp_path, monkeypatch, args, message) -> None:
    monkeypatch.chdir(tmp_path)
    ResultsFile(env={}, runs=[_cuda_record("a", "vision", "train", 1.0, 0.0, 0.0)]).write(tmp_path / "cuda.json")
    code, _, err = cli("breakdown", *args)
    assert code == 1 and message in err
