"""``torchgauge report``: the dashboard from a history database or from results files."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("plotly", reason="the dashboard needs plotly (pip install plotly)")

from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord


def _night(path, level: float, git: str) -> str:
    metrics = {"time_ms": {"samples": [level * f for f in (0.98, 0.99, 1.0, 1.01, 1.02)]}, "cpu_peak_mb": 300.0}
    runs = [
        RunRecord(RunConfig("resnet18", mode=mode), "ok", domain="vision", metrics=metrics, batch_size=4)
        for mode in ("train", "eval")
    ]
    ResultsFile(
        env={"torch_version": "2.13.0", "torch_git_version": git, "machine_fingerprint": "m1", "hostname": "box"},
        runs=runs,
    ).write(path)
    return str(path)


def test_report_from_files_and_from_db(cli, tmp_path) -> None:
    files = [_night(tmp_path / f"n{i}.json", level, f"sha{i}") for i, level in enumerate((10.0, 10.0, 10.0, 13.0))]
    code, _, err = cli("report", *files, "--output", str(tmp_path / "site"))
    assert code == 0 and "wrote 3 pages (1 models" in err
    index = (tmp_path / "site" / "index.html").read_text()
    assert (
        index.count('class="verdict v-regression"') == 2 and (tmp_path / "site" / "assets" / "plotly.min.js").is_file()
    )
    db = tmp_path / "h.sqlite"
    assert cli("import", *files, "--db", str(db))[0] == 0
    coverage = tmp_path / "cov.json"
    coverage.write_text(
        json.dumps(
            {
                "summary": {
                    "apis": {"suite": 3, "tagged": 1, "ratio": 3.0, "cover_subset": []},
                    "ops": {"suite": 5, "tagged": 2, "ratio": 2.5, "cover_subset": []},
                    "per_domain": {"vision": {"models": 1, "apis": 3, "ops": 5}},
                    "against": "mlperf",
                }
            }
        )
    )
    code, _, err = cli(
        "report",
        "--db",
        str(db),
        "-o",
        str(tmp_path / "site2"),
        "--coverage",
        str(coverage),
        "--threshold",
        "50%",
        "--title",
        "nightly <cpu>",
    )
    assert code == 0
    index = (tmp_path / "site2" / "index.html").read_text()
    assert "v-regression" not in index and "v-inconclusive" not in index  # +30% is under a 50% threshold
    assert "<title>nightly &lt;cpu&gt;</title>" in index
    assert "Python APIs" in (tmp_path / "site2" / "figures.html").read_text()


def test_report_bad_input(cli, tmp_path) -> None:
    good = _night(tmp_path / "a.json", 10.0, "a")
    code, _, err = cli("report", good, "--db", str(tmp_path / "h.sqlite"), "-o", str(tmp_path / "s"))
    assert code == 2 and "RESULTS_FILES or --db, not both" in err
    code, _, err = cli("report", "--db", str(tmp_path / "absent.sqlite"), "-o", str(tmp_path / "s"))
    assert code == 1 and "no history database" in err
    code, _, err = cli("report", str(tmp_path / "missing.json"), "-o", str(tmp_path / "s"))
    assert code == 1 and "results file not found" in err
    (tmp_path / "cov.json").write_text("[1]")
    code, _, err = cli("report", good, "-o", str(tmp_path / "s"), "--coverage", str(tmp_path / "cov.json"))
    assert code == 2 and "torchgauge coverage --output" in err
    code, _, err = cli("report", good, "-o", str(tmp_path / "s"), "--threshold", "-3")
    assert code == 2 and "must be positive" in err
