from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURE = str(Path("tests/fixtures/planted_perf_bugs.py").resolve())


def test_diagnose_json_lists_findings_with_sources(cli) -> None:
    code, stdout, err = cli("diagnose", "planted_bug_sync", "--model-file", FIXTURE, "--size", "smoke", "--json")
    assert code == 0, err
    (run,) = json.loads(stdout)["runs"]  # the model has no train mode: warned and skipped
    assert "unsupported" in err
    assert (run["model"], run["mode"], run["device"], run["steps"]) == ("planted_bug_sync", "eval", "cpu", 5)
    assert {f["operator"] for f in run["findings"]} == {"aten::item", "aten::nonzero"}
    for f in run["findings"]:
        assert f["rule"] == "sync" and f["count"] == 1 and "planted_perf_bugs.py:" in f["source"]


def test_diagnose_table_and_trace_export(cli, tmp_path) -> None:
    code, stdout, err = cli(
        "diagnose",
        "planted_bug_zero_loop",
        "--model-file",
        FIXTURE,
        "--size",
        "smoke",
        "--mode",
        "train",
        "--profile",
        str(tmp_path),
    )
    assert code == 0, err
    assert "launch_storm" in stdout and "aten::zero_" in stdout and "torch._foreach_zero_" in err
    (trace,) = tmp_path.iterdir()
    assert trace.name == "planted_bug_zero_loop-train-cpu-diagnose.pt.trace.json"
    assert json.loads(trace.read_text())["traceEvents"]


def test_clean_model_has_no_findings(cli) -> None:
    code, stdout, err = cli(
        "diagnose", "planted_clean_nosync", "--model-file", FIXTURE, "--size", "smoke", "--mode", "eval"
    )
    assert code == 0 and "no findings" in " ".join(err.split())


def test_bad_input_gets_one_line_error(cli) -> None:
    code, _, err = cli("diagnose", "planted_bug_synk", "--model-file", FIXTURE)
    assert code == 2 and "did you mean: planted_bug_sync" in err
    code, _, err = cli("diagnose", "planted_bug_*", "--model-file", FIXTURE)
    assert code == 2 and "matches 11 models; accepted: one registered name" in err
    code, _, err = cli("diagnose", "planted_bug_sync", "--model-file", FIXTURE, "--device", "gpu")
    assert code == 2 and "accepted: cpu, cuda" in err


def test_diagnose_trace_files(cli, kineto, tmp_path) -> None:
    ev = [kineto.step(0, 0, 1000)]
    ev.append(kineto.host_op("model.py(7): forward", 5, 500, cat="python_function"))
    ev.append(kineto.host_op("aten::item", 10, 300))
    ev.append(kineto.host_op("cudaStreamSynchronize", 20, 280, cat="cuda_runtime", correlation=9))
    ev += kineto.launched("void gemm<float>()", 400, 410, 500, corr=1)
    path = kineto.write_trace(tmp_path / "t.json", ev)
    code, stdout, err = cli("diagnose", "--trace", str(path), "--json")
    assert code == 0, err
    (t,) = json.loads(stdout)["traces"]
    (f,) = t["findings"]
    assert (t["device"], f["rule"], f["operator"], f["count"]) == ("cuda:0", "sync", "aten::item", 1)
    assert f["source"].startswith("model.py:7 in forward") and f["time_ms"] == pytest.approx(0.28)
    code, stdout, err = cli("diagnose", "--trace", str(path))
    assert code == 0 and "sync" in stdout and "model.py:7" in stdout
    code, _, err = cli("diagnose", "planted_bug_sync", "--trace", str(path))
    assert code == 2 and "either MODEL or --trace" in err
