"""``torchgauge compare-devices`` on hand-made results files with known ratios, geomeans and wins."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "results_factory", Path(__file__).parents[1] / "fixtures" / "results_factory.py"
)
factory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)


@pytest.fixture
def files(tmp_path):
    r = factory.run
    a = factory.write_results(
        tmp_path / "a100.json",
        [
            r("m1", "train", device="cuda", time_ms=10.0),
            r("m1", "eval", device="cuda", time_ms=4.0),
            r("m2", "train", device="cuda", time_ms=40.0),
            r("m2", "eval", device="cuda", time_ms=1.0),
            r("m3", "eval", device="cuda", time_ms=5.0),
            r("m4", "eval", device="cuda", status="timeout", error="timed out after 900 s"),
        ],
        env=factory.ENV_GPU,
    )
    b = factory.write_results(
        tmp_path / "mi210.json",
        [
            r("m1", "train", device="cuda", time_ms=20.0),
            r("m1", "eval", device="cuda", time_ms=1.0),
            r("m2", "train", device="cuda", time_ms=10.0),
            r("m2", "eval", device="cuda", time_ms=4.0),
            r("m4", "eval", device="cuda", time_ms=5.0),
            r("m9", "eval", device="cuda", time_ms=5.0),
        ],
        env=factory.ENV_CPU,
    )
    return a, b


def test_json_output_has_known_ratios_geomeans_and_wins(cli, files, tmp_path) -> None:
    a, b = files
    report = tmp_path / "cmp.json"
    code, stdout, err = cli("compare-devices", str(a), str(b), "--output", str(report), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc == json.loads(report.read_text())
    assert (doc["a"], doc["b"]) == ("a100", "mi210")
    assert {(r["model"], r["mode"]): r["ratio"] for r in doc["rows"]} == {
        ("m1", "train"): 0.5,
        ("m1", "eval"): 4.0,
        ("m2", "train"): 4.0,
        ("m2", "eval"): 0.25,
    }
    assert doc["geomeans"]["train"] == {"geomean": pytest.approx(2**0.5), "n": 2}
    assert doc["geomeans"]["eval"] == {"geomean": pytest.approx(1.0), "n": 2}
    assert doc["wins"] == {"train": {"a": 1, "b": 1, "ties": 0}, "eval": {"a": 1, "b": 1, "ties": 0}}
    why = {u["model"]: u["detail"] for u in doc["unmatched"]}
    assert why == {
        "m3": "missing in mi210",
        "m4": "failed in a100: timeout (timed out after 900 s)",
        "m9": "missing in a100",
    }


def test_tables_and_chart(cli, files, tmp_path) -> None:
    a, b = files
    for ext in ("png", "svg"):
        chart = tmp_path / f"chart.{ext}"
        code, stdout, err = cli("compare-devices", str(a), str(b), "--chart", str(chart))
        assert code == 0, err
        assert chart.stat().st_size > 1000
    assert chart.read_text().lstrip().startswith("<?xml") and "<svg" in chart.read_text()
    assert "A / B" in stdout and "geomean A / B" in stdout and "not compared" in stdout
    assert "A speedup = B / A (> 1: A faster)" in stdout and "0.71x" in stdout  # train: 1 / sqrt(2)
    assert "Test GPU X1" in err and "torch 2.13.0+cpu" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--chart", "out.gif"], "accepted: .png, .svg, .pdf"),
        (["--tie-band", "2"], "accepted: a fraction in [0, 1)"),
    ],
)
def test_bad_options(cli, files, tmp_path, extra, message) -> None:
    a, b = files
    code, _, err = cli("compare-devices", str(a), str(b), *extra)
    assert code in (1, 2) and message in err and "Traceback" not in err


def test_missing_or_invalid_file(cli, files, tmp_path) -> None:
    a, _ = files
    code, _, err = cli("compare-devices", str(a), str(tmp_path / "nope.json"))
    assert code == 1 and "results file not found" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = cli("compare-devices", str(a), str(bad))
    assert code == 1 and "is not valid JSON" in err


def test_nothing_matched_warns(cli, files, tmp_path) -> None:
    a, _ = files
    other = factory.write_results(tmp_path / "other.json", [factory.run("zz")])
    code, _, err = cli("compare-devices", str(a), str(other))
    assert code == 0 and "no configuration could be matched" in err
