from __future__ import annotations

import json

import pytest

from .conftest import PLANTED


def test_run_writes_results_with_samples(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, stdout, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--repeat",
        "4",
        "--warmup",
        "1",
        "--output",
        str(out),
    )
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == 1 and doc["env"]["torch_version"]
    assert [(r["model"], r["mode"], r["status"]) for r in doc["runs"]] == [
        ("planted_ok", "train", "ok"),
        ("planted_ok", "eval", "ok"),
    ]
    for run in doc["runs"]:
        assert len(run["metrics"]["time_ms"]["samples"]) == 4
        for key in ("median", "min", "max", "iqr"):
            assert run["metrics"]["time_ms"][key] is not None
        assert run["metrics"]["cpu_peak_mb"] > 0 and "cpu_delta_mb" in run["metrics"]
        assert (run["precision"], run["backend"], run["size"], run["batch_size"]) == ("fp32", "eager", "smoke", 2)
    assert "planted_ok" in stdout and "median ms" in stdout


def test_run_failure_sets_exit_code_and_keeps_others(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, _, _ = cli(
        "run",
        "planted_ok",
        "planted_raises",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--mode",
        "eval",
        "--repeat",
        "2",
        "--output",
        str(out),
        "--quiet",
    )
    assert code == 1
    runs = json.loads(out.read_text())["runs"]
    assert {r["model"]: r["status"] for r in runs} == {"planted_ok": "ok", "planted_raises": "error"}


def test_diverged_training_fails_the_run_but_keeps_its_timings(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, _, _ = cli(
        "run",
        "planted_diverges",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--mode",
        "train",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--output",
        str(out),
        "--quiet",
    )
    assert code == 1  # a fast wrong answer fails the suite
    runs = {r["model"]: r for r in json.loads(out.read_text())["runs"]}
    assert runs["planted_ok"]["status"] == "ok"
    diverged = runs["planted_diverges"]
    assert diverged["status"] == "fail_accuracy" and diverged["error"].startswith("training diverged:")
    assert len(diverged["metrics"]["time_ms"]["samples"]) == 2


def test_run_json_output(cli, tmp_path) -> None:
    code, stdout, _ = cli(
        "run",
        "planted_eval_only",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--output",
        str(tmp_path / "r.json"),
        "--json",
        "--quiet",
    )
    doc = json.loads(stdout)
    assert code == 0  # unsupported train mode does not fail the suite
    assert [r["status"] for r in doc["runs"]] == ["unsupported", "ok"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["no_such_model"], "no model matches 'no_such_model'"),
        (["planted_okk"], "did you mean: planted_ok"),
        (["planted_ok", "--mode", "infer"], "'infer' is not one of 'train', 'eval', 'both'"),
        (["planted_ok", "--device", "gpu"], "accepted: cpu, cuda"),
        (["planted_ok", "--repeat", "0"], "accepted: an integer >= 1"),
        (["planted_ok", "--metrics", "time,bogus"], "unknown metric 'bogus'"),
        (["planted_ok", "--precision", "fp8"], "'fp8'; accepted: fp32, tf32, fp16, bf16, amp, torchbench"),
        (["planted_ok", "--shard", "3/2"], "invalid shard '3/2'"),
        (["planted_ok", "--model-arg", "oops"], "is not KEY=VALUE"),
    ],
)
def test_bad_input_gets_one_line_error(cli, tmp_path, args, message) -> None:
    code, _, err = cli("run", *args, "--model-file", PLANTED, "--output", str(tmp_path / "r.json"))
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_shard_splits_models(cli, tmp_path) -> None:
    seen = set()
    for i in (1, 2):
        out = tmp_path / f"s{i}.json"
        code, _, _ = cli(
            "run",
            "planted_ok",
            "planted_eval_only",
            "--model-file",
            PLANTED,
            "--size",
            "smoke",
            "--mode",
            "eval",
            "--repeat",
            "1",
            "--shard",
            f"{i}/2",
            "--output",
            str(out),
            "--quiet",
        )
        assert code == 0
        models = {r["model"] for r in json.loads(out.read_text())["runs"]}
        assert len(models) == 1 and not (models & seen)
        seen |= models
    assert seen == {"planted_ok", "planted_eval_only"}


def test_rounds_measure_each_configuration_in_several_interleaved_processes(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, _, err = cli(
        "run",
        "planted_ok",
        "planted_raises",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--mode",
        "eval",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--rounds",
        "3",
        "--metrics",
        "time,memory,op_counts",
        "--output",
        str(out),
        "--quiet",
    )
    doc = json.loads(out.read_text())
    assert [r["model"] for r in doc["runs"]] == ["planted_ok", "planted_raises"] * 3  # round-major
    assert all(r["threads"]["intra_op"] == 1 for r in doc["runs"] if r["status"] == "ok")
    # the operator count is the same in every process: the first round collects it, and says so
    ok = [r for r in doc["runs"] if r["model"] == "planted_ok"]
    assert [r["requested_metrics"] for r in ok] == [["time", "memory", "op_counts"]] + [["time", "memory"]] * 2
    assert ok[0]["metrics"]["op_counts"]["total"] > 0 and not any("op_counts" in r["metrics"] for r in ok[1:])
    assert all(len(r["metrics"]["time_ms"]["samples"]) == 2 for r in ok)


def test_run_prints_counts_summary_and_records_the_plan(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, _, err = cli(
        "run",
        "planted_ok",
        "planted_eval_only",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--jobs",
        "2",
        "--output",
        str(out),
    )
    assert code == 0, err
    assert "--jobs 2: runs overlap" in err and "timings are not" in err
    assert "[1/4]" in err and "[4/4]" in err and "eta" in err  # count lines, piped output included
    assert "4 of 4 runs in" in err and "3 ok, 1 unsupported" in err
    doc = json.loads(out.read_text())
    assert sorted((p["model"], p["mode"]) for p in doc["planned"]) == [
        ("planted_eval_only", "eval"),
        ("planted_eval_only", "train"),
        ("planted_ok", "eval"),
        ("planted_ok", "train"),
    ]
    assert len(doc["runs"]) == 4
    for run in doc["runs"]:  # where each run's wall time went (benchmarks/suite_wall.py sums these)
        if run["status"] == "ok":
            phases = run["phases_s"]
            assert set(phases) == {"worker_start", "build", "warmup", "timed", "extra"}
            assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= run["wall_s"] + 1e-3


def test_run_adaptive_repeats(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, _, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--mode",
        "eval",
        "--repeat",
        "5",
        "--adaptive",
        "0.5",
        "--max-repeat",
        "30",
        "--output",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    (run,) = json.loads(out.read_text())["runs"]
    assert run["options"]["adaptive"] == {"target": 0.5, "max_repeat": 30}
    assert (
        5 <= len(run["metrics"]["time_ms"]["samples"]) <= 30 and run["metrics"]["time_ms"]["stopping"]["target"] == 0.5
    )
    code, _, err = cli("run", "planted_ok", "--model-file", PLANTED, "--adaptive", "2", "--output", str(out))
    assert code == 2 and "accepted: a fraction between 0 and 1" in err


def test_precision_torchbench_runs_each_model_in_its_torchbench_default(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, _, _ = cli(
        "run",
        "planted_ok",
        "planted_torchbench_fp16",
        "--model-file",
        PLANTED,
        "--precision",
        "torchbench",
        "--size",
        "smoke",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--in-process",
        "--output",
        str(out),
        "--quiet",
    )
    runs = {(r["model"], r["mode"]): r for r in json.loads(out.read_text())["runs"]}
    assert code == 0  # unsupported does not fail the suite
    # every record holds the concrete precision: fp32 where nothing is declared, the declared one else
    assert {k: (r["precision"], r["status"]) for k, r in runs.items()} == {
        ("planted_ok", "train"): ("fp32", "ok"),
        ("planted_ok", "eval"): ("fp32", "ok"),
        ("planted_torchbench_fp16", "train"): ("fp32", "ok"),
        ("planted_torchbench_fp16", "eval"): ("fp16", "unsupported"),
    }
    assert "does not support precision 'fp16': planted:" in runs[("planted_torchbench_fp16", "eval")]["error"]


def test_run_stable_warmup(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    args = ("run", "planted_ok", "--model-file", PLANTED, "--size", "smoke", "--mode", "eval", "--output", str(out))
    code, _, err = cli(*args, "--warmup", "4", "--stable-warmup", "0.5", "--quiet")
    assert code == 0, err
    (run,) = json.loads(out.read_text())["runs"]
    timing = run["metrics"]["time_ms"]
    assert run["options"]["stable_warmup"] == 0.5 and run["warmup"] == 4
    assert 2 <= len(timing["warmup_samples"]) <= 4 and timing["warmup_stopping"]["steps"] == len(
        timing["warmup_samples"]
    )
    code, _, err = cli(*args, "--stable-warmup", "0")
    assert code == 2 and "invalid stable_warmup 0.0; accepted: a fraction between 0 and 1" in err
    code, _, err = cli(*args, "--warmup", "1", "--stable-warmup", "0.1")
    assert code == 2 and "accepted: warmup >= 2" in err
