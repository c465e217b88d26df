from __future__ import annotations

import json

from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord


def _write(tmp_path):
    rec = RunRecord(
        RunConfig("m", mode="eval"),
        "ok",
        domain="other",
        batch_size=2,
        metrics={"time_ms": {"samples": [1.0, 2.0], "median": 1.5, "iqr": 0.5}, "cpu_peak_mb": 10.0},
    )
    bad = RunRecord(RunConfig("n", mode="train"), "error", error="Traceback...\nValueError: boom")
    path = tmp_path / "r.json"
    ResultsFile(env={"torch_version": "2.13.0", "cpu_model": "X"}, runs=[rec, bad]).write(path)
    return path


def test_show_table(cli, tmp_path) -> None:
    code, out, err = cli("show", str(_write(tmp_path)))
    assert code == 0 and "1.5" in out and "ValueError: boom" in out and "torch 2.13.0" in err


def test_show_json(cli, tmp_path) -> None:
    code, out, _ = cli("show", str(_write(tmp_path)), "--json")
    assert code == 0 and json.loads(out)["runs"][1]["status"] == "error"


def test_show_rejects_bad_file(cli, tmp_path) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    code, _, err = cli("show", str(tmp_path / "x.json"))
    assert code == 1 and "must be a JSON object" in err
