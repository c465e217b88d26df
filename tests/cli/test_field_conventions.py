"""TorchBench-style aliases on ``run``, the ``dynamo`` harness command, and ``run --csv`` (issue 23)."""

from __future__ import annotations

import json

import pytest

from .conftest import PLANTED


def test_torchbench_aliases_mean_the_long_options(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, stdout, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "-d",
        "cpu",
        "-t",
        "eval",
        "--bs",
        "3",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "-o",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    (run,) = json.loads(out.read_text())["runs"]
    assert (run["device"], run["mode"], run["batch_size"]) == ("cpu", "eval", 3)
    code, _, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--test",
        "train",
        "--size",
        "smoke",
        "--repeat",
        "1",
        "--warmup",
        "1",
        "-o",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    assert [r["mode"] for r in json.loads(out.read_text())["runs"]] == ["train"]


def test_case_insensitive_model_name_on_the_command_line(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    code, _, err = cli(
        "run",
        "PLANTED_OK",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "-t",
        "eval",
        "--repeat",
        "1",
        "--warmup",
        "1",
        "-o",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    assert json.loads(out.read_text())["runs"][0]["model"] == "planted_ok"


def test_results_table_shows_precision_backend_and_noisy(cli, tmp_path) -> None:
    code, stdout, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "-t",
        "eval",
        "--repeat",
        "3",
        "--warmup",
        "1",
        "-o",
        str(tmp_path / "r.json"),
        "--quiet",
    )
    assert code == 0, err
    header = next(line for line in stdout.splitlines() if "median ms" in line)
    for column in ("precision", "backend", "noisy"):
        assert column in header
    row = next(line for line in stdout.splitlines() if "planted_ok" in line)
    assert "fp32" in row and "eager" in row


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            [
                "--performance",
                "--training",
                "--inductor",
                "--only",
                "hf_Bert",
                "--devices",
                "cuda",
                "--output",
                "p.csv",
            ],
            "torchgauge run hf_Bert --mode train --device cuda --precision fp32 --backend inductor "
            "--compile-scope step --csv p.csv",
        ),
        (
            ["--performance", "--backend", "aot_eager", "--only", "resnet50", "--bfloat16", "--batch-size", "8"],
            "torchgauge run resnet50 --mode eval --batch-size 8 --precision bf16 --backend aot_eager "
            "--compile-scope step",
        ),
        (
            ["--accuracy", "--inference", "--inductor", "--only", "resnet50", "--amp"],
            "torchgauge run resnet50 --mode eval --precision amp --backend inductor --compile-scope step --accuracy",
        ),
    ],
)
def test_dynamo_flags_map_to_the_equivalent_run(cli, flags, expected) -> None:
    code, _, err = cli("dynamo", *flags, "--dry-run")
    assert code == 0, err
    assert f"equivalent: {expected}" in err


def test_dynamo_flags_without_equivalent_fail_printing_the_rest(cli) -> None:
    code, _, err = cli("dynamo", "--performance", "--inductor", "--only", "resnet50", "--export-aot-inductor")
    assert code == 2
    assert "no torchgauge equivalent for --export-aot-inductor" in err
    assert "torchgauge run resnet50 --mode eval" in err
    code, _, err = cli("dynamo", "--inductor", "--only", "resnet50")
    assert code == 2 and "give one of --performance or --accuracy" in err


def test_dynamo_command_runs_the_equivalent(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # run's default results file goes under ./torchgauge-results
    code, _, err = cli(
        "dynamo",
        "--performance",
        "--backend",
        "eager",
        "--only",
        "pyhpc_equation_of_state",
        "--output",
        "perf.csv",
        "--repeat",
        "2",
        "-d",
        "cpu",
        "--batch-size",
        "1",
    )
    assert code == 0, err
    assert (
        "equivalent: torchgauge run pyhpc_equation_of_state --mode eval --device cpu --batch-size 1 "
        "--precision fp32 --backend eager --repeat 2 --csv perf.csv" in err
    )
    assert (tmp_path / "perf.csv").read_text().splitlines()[1].startswith("cpu,pyhpc_equation_of_state,1,1.000000,")


def test_run_csv_eager_only_is_its_own_baseline(cli, tmp_path) -> None:
    csv_path = tmp_path / "perf.csv"
    code, _, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "-t",
        "eval",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "-o",
        str(tmp_path / "r.json"),
        "--csv",
        str(csv_path),
        "--quiet",
    )
    assert code == 0, err
    header, row = csv_path.read_text().splitlines()
    assert header == (
        "dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio,eager_peak_mem,dynamo_peak_mem"
    )
    assert row.startswith("cpu,planted_ok,2,1.000000,") and ",0.000000,1.000000," in row


def test_run_csv_with_a_compiler_also_runs_eager(cli, tmp_path) -> None:
    out, csv_path = tmp_path / "r.json", tmp_path / "perf.csv"
    code, _, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "-t",
        "train",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--backend",
        "aot_eager",
        "--compile-scope",
        "step",
        "-o",
        str(out),
        "--csv",
        str(csv_path),
        "--quiet",
    )
    assert code == 0, err
    runs = json.loads(out.read_text())["runs"]
    assert [(r["backend"], r["options"].get("compile_scope")) for r in runs] == [("eager", None), ("aot_eager", "step")]
    (row,) = csv_path.read_text().splitlines()[1:]
    fields = row.split(",")
    assert fields[:3] == ["cpu", "planted_ok", "2"] and float(fields[3]) > 0 and float(fields[4]) > 0


def test_zoo_model_without_its_package_is_one_line(cli, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ModuleNotFoundError
    code, _, err = cli("run", "timm:resnet50", "--size", "smoke", "--quiet")
    assert code == 2 and "timm:resnet50 needs the timm package, which is not installed" in err
