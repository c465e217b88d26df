from __future__ import annotations

import json

import pytest

from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord

from .conftest import PLANTED


def _cuda_record(model: str, domain: str, mode: str, active: float, h2d: float, idle: float) -> RunRecord:
    fractions = {
        "active": active,
        "data_movement_h2d": h2d,
        "data_movement_d2h": 0.0,
        "data_movement_d2d": 0.0,
        "idle": idle,
    }
    metrics = {
        "breakdown": {
            "kind": "cuda",
            "steps": 5,
            "span_ms": 10.0,
            "fractions": fractions,
            "ms": {k: 10.0 * v for k, v in fractions.items()},
        }
    }
    return RunRecord(RunConfig(model, mode, device="cuda"), "ok", domain=domain, metrics=metrics)


def test_run_with_breakdown_and_profile_then_report(cli, tmp_path) -> None:
    out, traces, chart = tmp_path / "r.json", tmp_path / "traces", tmp_path / "bars.svg"
    code, _, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--metrics",
        "time",
        "--profile",
        str(traces),
        "--output",
        str(out),
        "--quiet",
        "--in-process",
    )
    assert code == 0, err
    runs = json.loads(out.read_text())["runs"]
    for run in runs:  # --profile implies the breakdown pass
        b = run["metrics"]["breakdown"]
        assert b["kind"] == "cpu" and b["steps"] >= 1 and b["span_ms"] > 0
        assert sum(b["fractions"].values()) == pytest.approx(1.0)
        assert set(b["fractions"]) == {"aten", "overhead"} and b["ms"]["aten"] > 0
        trace = json.loads(open(b["trace"]).read())
        assert any(e.get("cat") == "cpu_op" for e in trace["traceEvents"])
    assert sorted(p.name for p in traces.iterdir()) == [
        "planted_ok-eval-cpu-fp32-eager.pt.trace.json",
        "planted_ok-train-cpu-fp32-eager.pt.trace.json",
    ]
    code, stdout, err = cli("breakdown", str(out), "--output", str(chart), "--per-model")
    assert code == 0, err
    assert "ATen ops %" in stdout and "planted_ok" in stdout and "other" in stdout
    assert chart.read_text().lstrip().startswith("<?xml")


def test_domain_table_is_the_mean_over_models(cli, tmp_path) -> None:
    results = ResultsFile(
        env={},
        runs=[
            _cuda_record("a", "vision", "train", 0.8, 0.1, 0.1),
            _cuda_record("b", "vision", "train", 0.6, 0.0, 0.4),
            _cuda_record("c", "nlp", "eval", 0.5, 0.25, 0.25),
        ],
    )
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


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.json"], "results file not found"),
        (["cuda.json", "--output", "chart.txt"], "accepted extensions: .png, .svg, .pdf"),
    ],
)
def test_bad_input_gets_one_line_error(cli, tmp_path, monkeypatch, args, message) -> None:
    monkeypatch.chdir(tmp_path)
    ResultsFile(env={}, runs=[_cuda_record("a", "vision", "train", 1.0, 0.0, 0.0)]).write(tmp_path / "cuda.json")
    code, _, err = cli("breakdown", *args)
    assert code == 1 and message in err


def _two_step_trace(kineto, path):
    ev = [kineto.step(0, 0, 100), kineto.step(1, 100, 100)]
    ev += kineto.launched("void gemm<float>()", 1, 10, 50, corr=1)
    ev += kineto.launched("Memcpy HtoD (Pinned -> Device)", 2, 70, 10, corr=2, cat="gpu_memcpy", bytes=64)
    ev += kineto.launched("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 101, 110, 40, corr=3, stream=20)
    ev.append({"ph": "X", "cat": "mystery", "name": "x", "ts": 5, "dur": 1})
    return kineto.write_trace(path, ev, gz=True)


def test_breakdown_of_trace_files_per_device_and_step(cli, kineto, tmp_path) -> None:
    path = _two_step_trace(kineto, tmp_path / "t.json.gz")
    code, stdout, err = cli("breakdown", "--trace", str(path), "--json")
    assert code == 0, err
    (t,) = json.loads(stdout)["traces"]
    assert (t["device"], t["platform"], t["skipped"]) == ("cuda:0", "cuda", {"unknown category mystery": 1})
    assert t["breakdown"]["span_ms"] == pytest.approx(0.2)  # 2 steps of 100 us
    assert t["breakdown"]["fractions"]["active"] == pytest.approx(90 / 200)
    assert t["breakdown"]["kernel_types"]["communication"] == pytest.approx(40 / 200)
    assert [s["fractions"]["idle"] for s in t["per_step"]] == pytest.approx([0.4, 0.6])
    assert [r["kernels"] for r in t["launches_per_step"]] == [1, 1]
    assert t["top_kernels"][0]["kind"] == "compute" and t["kernel_types"]["memory"]["count"] == 1
    chart = tmp_path / "bars.svg"
    code, stdout, err = cli("breakdown", "--trace", str(path), "--per-model", "--output", str(chart))
    assert code == 0, err
    assert "GPU idle %" in stdout and "step 1" in stdout and "Top 3 kernels" in stdout and "Launches per step" in stdout
    assert chart.read_text().lstrip().startswith("<?xml")


def test_breakdown_trace_errors_are_one_line(cli, tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", ')
    code, _, err = cli("breakdown", "--trace", str(bad))
    assert code == 1 and "cut short" in err and "Traceback" not in err
    code, _, err = cli("breakdown")
    assert code == 2 and "either RESULTS_FILE or --trace" in err


def test_breakdown_of_a_real_rocm_trace(cli, gpu_traces) -> None:
    code, stdout, err = cli("breakdown", "--trace", str(gpu_traces / "rocm-mi250-toy-train.json.gz"), "--json")
    assert code == 0, err
    (t,) = json.loads(stdout)["traces"]
    assert t["platform"] == "rocm" and t["device"] == "cuda:2" and len(t["per_step"]) == 2
