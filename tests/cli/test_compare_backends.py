"""``torchgauge compare-backends`` on hand-made results files (``--from``) with known ratios."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from .conftest import PLANTED

_spec = importlib.util.spec_from_file_location(
    "results_factory", Path(__file__).parents[1] / "fixtures" / "results_factory.py"
)
factory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)

COMPILE = {
    "compile_s": 7.5,
    "first_iter_ms": 500.0,
    "steady_ms": 2.0,
    "graphs": 1,
    "graph_breaks": 1,
    "guards": 3,
    "break_reasons": ["data-dependent branch"],
}


@pytest.fixture
def files(tmp_path):
    r = factory.run
    base = factory.write_results(
        tmp_path / "eager.json",
        [
            r("m1", "train", time_ms=10.0, cpu_mb=400.0, gpu_mb=100.0),
            r("m1", "eval", time_ms=4.0, cpu_mb=200.0, gpu_mb=50.0),
            r("m2", "train", time_ms=10.0, cpu_mb=400.0, gpu_mb=100.0),
            r("m2", "eval", time_ms=4.0, cpu_mb=200.0, gpu_mb=50.0),
            r("m3", "eval", time_ms=4.0),
        ],
    )
    cand = factory.write_results(
        tmp_path / "inductor.json",
        [
            r("m1", "train", backend="inductor", time_ms=5.0, cpu_mb=100.0, gpu_mb=150.0, compile=COMPILE),
            r("m1", "eval", backend="inductor", time_ms=1.0, cpu_mb=100.0, gpu_mb=100.0, compile=COMPILE),
            r("m2", "train", backend="inductor", time_ms=8.0, cpu_mb=400.0, gpu_mb=600.0, compile=COMPILE),
            r("m2", "eval", backend="inductor", time_ms=4.0, cpu_mb=50.0, gpu_mb=50.0, compile=COMPILE),
            r(
                "m3",
                "eval",
                backend="inductor",
                status="error",
                error="Traceback ...\nBackendCompilerFailed: lowering failed",
            ),
        ],
    )
    return base, cand


def test_from_files_json_has_known_ratios_and_geomeans(cli, files, tmp_path) -> None:
    base, cand = files
    report = tmp_path / "cmp.json"
    code, stdout, err = cli("compare-backends", "--from", str(base), str(cand), "--output", str(report), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc == json.loads(report.read_text())
    assert (doc["baseline"], doc["candidate"]) == ("eager", "inductor")
    rows = {(r["model"], r["mode"]): r for r in doc["rows"]}
    assert rows["m1", "train"]["ratios"] == {"time": 0.5, "cpu_mem": 0.25, "gpu_mem": 1.5}
    assert rows["m2", "train"]["ratios"] == {"time": 0.8, "cpu_mem": 1.0, "gpu_mem": 6.0}
    assert rows["m1", "eval"]["ratios"]["time"] == 0.25 and rows["m2", "eval"]["ratios"]["time"] == 1.0
    assert rows["m1", "train"]["compile_s"] == 7.5 and rows["m1", "train"]["graph_breaks"] == 1
    g = doc["geomeans"]
    assert g["train"]["time"] == {"geomean": pytest.approx(0.4**0.5), "n": 2}
    assert g["train"]["cpu_mem"]["geomean"] == pytest.approx(0.5)
    assert g["train"]["gpu_mem"]["geomean"] == pytest.approx(3.0)
    assert g["eval"]["time"]["geomean"] == pytest.approx(0.5)
    assert g["eval"]["cpu_mem"]["geomean"] == pytest.approx((0.5 * 0.25) ** 0.5)
    assert [(f["model"], f["status"]) for f in doc["failed_candidate"]] == [("m3", "error")]
    assert "lowering failed" in doc["failed_candidate"][0]["detail"]


def test_tables_and_chart(cli, files, tmp_path) -> None:
    base, cand = files
    chart = tmp_path / "fig.png"
    code, stdout, err = cli("compare-backends", "--from", str(base), str(cand), "--chart", str(chart))
    assert code == 0, err
    assert chart.stat().st_size > 1000
    assert "speedup = eager / inductor time (> 1: inductor faster)" in stdout
    assert "cand/base = inductor / eager (< 1: inductor better)" in stdout
    for term in ("pass rate", "speedup geomean", "compression ratio", "compilation latency s"):
        assert term in stdout
    assert "1 failed with inductor" in stdout and "BackendCompilerFailed" in stdout


def test_one_file_with_both_backends(cli, files, tmp_path) -> None:
    base, cand = files
    both = json.loads(base.read_text())
    both["runs"] += json.loads(cand.read_text())["runs"]
    one = tmp_path / "both.json"
    one.write_text(json.dumps(both))
    code, stdout, err = cli(
        "compare-backends", "--from", str(one), str(one), "--baseline", "eager", "--candidate", "inductor", "--json"
    )
    assert code == 0, err
    assert len(json.loads(stdout)["rows"]) == 4
    code, _, err = cli("compare-backends", "--from", str(one), str(one))
    assert code == 2 and "holds runs of several backends (eager, inductor)" in err


def test_same_backend_from_two_builds_is_labelled_by_file(cli, files, tmp_path) -> None:
    base, _ = files
    nightly = tmp_path / "nightly.json"
    nightly.write_text(base.read_text())
    code, stdout, err = cli("compare-backends", "--from", str(base), str(nightly), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert (doc["baseline"], doc["candidate"]) == ("eager (eager)", "eager (nightly)")
    assert len(doc["rows"]) == 5 and all(r["ratios"]["time"] == 1.0 for r in doc["rows"])
    code, stdout, _ = cli("compare-backends", "--from", str(base), str(base), "--json")
    assert code == 0 and json.loads(stdout)["candidate"] == "eager (candidate)"


@pytest.mark.parametrize(
    "args, code_, message",
    [
        (["--from", "{base}", "{cand}", "--baseline", "tvm"], 1, "has no runs of backend 'tvm'; it has: eager"),
        (["m1", "--from", "{base}", "{cand}"], 2, "give either PATTERNS"),
        ([], 2, "give model PATTERNS to run, or --from"),
        (["planted_ok", "--candidate", "no_such_backend"], 2, "'no_such_backend'; accepted: eager"),
        (["planted_ok", "--candidate", "eager"], 2, "baseline and candidate are both 'eager'"),
        (["--from", "{base}", "{cand}", "--chart", "x.jpg"], 1, "accepted: .png, .svg, .pdf"),
    ],
)
def test_bad_input_gets_one_line_error(cli, files, args, code_, message) -> None:
    base, cand = files
    args = [a.format(base=base, cand=cand) for a in args]
    code, _, err = cli("compare-backends", *args, "--model-file", PLANTED)
    assert code == code_ and message in err and "Traceback" not in err


def test_live_mode_runs_both_backends_and_keeps_their_results(cli, tmp_path, monkeypatch) -> None:
    from torchgauge import configure

    # aot_eager when registered: a real second backend without code generation (fast to compile).
    candidate = (
        "aot_eager"
        if "aot_eager" in configure.BACKENDS
        else next((b for b in configure.BACKENDS if b != "eager"), None)
    )
    if candidate is None:
        # No second backend registered yet: pretend one is accepted; its runs then end as a
        # status (unsupported) and must be reported as candidate failures, not crash the command.
        candidate = "aot_eager"
        monkeypatch.setattr(configure, "BACKENDS", configure.BACKENDS + (candidate,))
    results_dir = tmp_path / "res"
    code, stdout, err = cli(
        "compare-backends",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--baseline",
        "eager",
        "--candidate",
        candidate,
        "--mode",
        "eval",
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--results-dir",
        str(results_dir),
        "--json",
        "--quiet",
    )
    assert code == 0, err
    doc = json.loads(stdout)
    files = sorted(results_dir.glob("backends-*.json"))
    assert [f.name.rsplit("-", 1)[-1] for f in files] == sorted([f"{candidate}.json", "eager.json"])
    runs = {f.name.rsplit("-", 1)[-1]: json.loads(f.read_text())["runs"] for f in files}
    assert [(r["model"], r["backend"], r["status"]) for r in runs["eager.json"]] == [("planted_ok", "eager", "ok")]
    cand_status = runs[f"{candidate}.json"][0]["status"]
    if cand_status == "ok":
        assert [(r["model"], r["mode"]) for r in doc["rows"]] == [("planted_ok", "eval")]
        assert doc["rows"][0]["ratios"]["time"] > 0
    else:
        assert [(f["model"], f["status"]) for f in doc["failed_candidate"]] == [("planted_ok", cand_status)]


def test_speedup_and_compiler_summary(cli, files) -> None:
    base, cand = files
    code, stdout, err = cli("compare-backends", "--from", str(base), str(cand), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    rows = {(r["model"], r["mode"]): r for r in doc["rows"]}
    assert rows["m1", "train"]["speedup"] == pytest.approx(2.0)  # 10 ms eager / 5 ms inductor
    assert rows["m1", "eval"]["speedup"] == pytest.approx(4.0)
    assert rows["m1", "eval"]["compression_ratio"] == pytest.approx(2.0)  # CPU runs: 200 MB / 100 MB resident
    s = doc["summary"]
    assert (s["train"]["passed"], s["train"]["total"]) == (2, 2)
    assert (s["eval"]["passed"], s["eval"]["total"]) == (2, 3)  # m3 failed with inductor
    assert s["train"]["speedup_geomean"] == pytest.approx((2.0 * 1.25) ** 0.5)
    assert s["eval"]["compression_ratio"] == pytest.approx((2.0 + 4.0) / 2)
    assert s["eval"]["compilation_latency_s"] == pytest.approx(7.5)
    code, stdout, err = cli("compare-backends", "--from", str(base), str(cand))
    assert "67%, 2/3" in stdout and "2.00x" in stdout


def test_csv_one_file_per_mode(cli, files, tmp_path) -> None:
    base, cand = files
    code, stdout, err = cli("compare-backends", "--from", str(base), str(cand), "--csv", str(tmp_path / "perf.csv"))
    assert code == 0, err
    training = (tmp_path / "perf_training.csv").read_text().splitlines()
    inference = (tmp_path / "perf_inference.csv").read_text().splitlines()
    assert training[0].startswith("dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio")
    assert training[1].startswith("cpu,m1,4,2.000000,5.000000,")
    assert inference[3] == "cpu,m3,0,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000"
    assert "perf_training.csv" in err


def test_compile_scope_needs_a_run(cli, files) -> None:
    base, cand = files
    code, _, err = cli("compare-backends", "--from", str(base), str(cand), "--compile-scope", "step")
    assert code == 2 and "--compile-scope applies when running" in err
