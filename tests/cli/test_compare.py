"""``torchgauge compare`` on hand-made results files and a stored history."""

from __future__ import annotations

import json
import random

import pytest

from torchgauge.compare.regression import FINDING_KEYS
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord
from torchgauge.results.store import Store


def _results(
    levels: dict[str, float], *, seed: int, status: dict[str, str] | None = None, git: str = "g"
) -> ResultsFile:
    rng = random.Random(seed)
    runs = []
    for model, level in levels.items():
        st = (status or {}).get(model, "ok")
        metrics = (
            {"time_ms": {"samples": [level * (1 + 0.01 * rng.gauss(0, 1)) for _ in range(10)]}, "cpu_peak_mb": 300.0}
            if st == "ok"
            else {}
        )
        runs.append(
            RunRecord(
                RunConfig(model, mode="eval"),
                st,
                metrics=metrics,
                batch_size=2,
                error="RuntimeError: it broke" if st != "ok" else None,
            )
        )
    return ResultsFile(
        env={"torch_version": "2.13.0", "torch_git_version": git, "machine_fingerprint": "m1"}, runs=runs
    )


@pytest.fixture
def files(tmp_path):
    base = tmp_path / "base.json"
    new = tmp_path / "new.json"
    _results({"a": 10.0, "b": 20.0, "c": 5.0}, seed=1, git="old").write(base)
    _results({"a": 12.0, "b": 20.0, "c": 4.0}, seed=2, git="new").write(new)
    return base, new


def test_regression_exit_code_json_and_markdown(cli, files, tmp_path) -> None:
    base, new = files
    out, md = tmp_path / "cmp.json", tmp_path / "cmp.md"
    code, stdout, err = cli("compare", str(base), str(new), "--output", str(out), "--markdown", str(md))
    assert code == 1, err
    doc = json.loads(out.read_text())
    assert [(r["model"], r["metric"]) for r in doc["regressions"]] == [("a", "time_ms")]
    assert [(r["model"], r["metric"]) for r in doc["improvements"]] == [("c", "time_ms")]
    assert list(doc["regressions"][0])[:10] == list(FINDING_KEYS)
    assert doc["regressions"][0]["change"] == pytest.approx(0.2, abs=0.02)
    text = md.read_text()
    assert text.startswith("# torchgauge: regressions found (new.json vs base.json)")
    assert "| torch_git_version | old | new |" in text
    assert "1 regression(s), 1 improvement(s)" in err and "regressions" in stdout


def test_no_regression_exits_zero_and_json_stdout(cli, files) -> None:
    base, _ = files
    code, stdout, _ = cli("compare", str(base), str(base), "--json", "--quiet")
    assert code == 0
    doc = json.loads(stdout)
    assert doc["regressions"] == [] and doc["compared"] == 3


def test_threshold_forms_and_new_failures(cli, files, tmp_path) -> None:
    base, new = files
    # a 25% threshold: the 20% slowdown of "a" no longer counts, whichever way it is written
    for form in ("25%", "0.25", "25"):
        assert cli("compare", str(base), str(new), "--threshold", form, "-q")[0] == 0
    broken = tmp_path / "broken.json"
    _results({"a": 10.0, "b": 20.0, "c": 5.0}, seed=3, status={"b": "error"}).write(broken)
    code, _, err = cli("compare", str(base), str(broken), "-q")
    assert code == 1 and "new failure: b/eval" in err and "RuntimeError: it broke" in err


@pytest.mark.parametrize(
    "args,msg",
    [
        (("--threshold", "-5%"), "must be positive"),
        (("--threshold", "1"), "ambiguous"),
        (("--alpha", "2"), "accepted: 0 < alpha < 1"),
        (("--correction", "bonferroni"), "'bonferroni' is not one of"),
        (("--baseline-python", "python3"), "need --confirm"),
    ],
)
def test_bad_options_are_one_line_errors(cli, files, args, msg) -> None:
    base, new = files
    code, _, err = cli("compare", str(base), str(new), *args)
    assert code == 2 and msg in err


def test_stored_runs_latest_previous_and_ids(cli, files, tmp_path) -> None:
    base, new = files
    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        first = store.save(ResultsFile.from_dict(json.loads(base.read_text())))
        second = store.save(ResultsFile.from_dict(json.loads(new.read_text())))
    code, _, err = cli("compare", "previous", "latest", "--db", str(db), "-q")
    assert code == 1 and f"(run {second} vs run {first})" in err
    assert cli("compare", str(first), str(base), "--db", str(db), "-q")[0] == 0  # an id against a file
    code, _, err = cli("compare", "previous", "latest", "--db", str(db), "--machine", "elsewhere")
    assert code == 1 and "no previous run for machine elsewhere" in err
    code, _, err = cli("compare", "latest", str(new), "--db", str(tmp_path / "none.sqlite"))
    assert code == 1 and "no history database" in err
    elsewhere = tmp_path / "elsewhere.json"
    other = _results({"a": 10.0, "b": 20.0, "c": 5.0}, seed=1)
    other.env["machine_fingerprint"] = "m2"
    other.write(elsewhere)
    code, _, err = cli("compare", str(base), str(elsewhere))
    assert code == 0 and "different hardware" in err
    code, _, err = cli("compare", str(tmp_path / "missing.json"), str(new))
    assert code == 1 and "results file not found" in err


def test_an_underpowered_slowdown_exits_3_unless_allowed(cli, tmp_path) -> None:
    # issue 17: --repeat 3 made a 3.4x slowdown pass as "0 regression(s)", exit 0
    def side(level: float, path) -> str:
        runs = [
            RunRecord(
                RunConfig("m", mode="eval"),
                "ok",
                batch_size=2,
                metrics={"time_ms": {"samples": [level, level * 1.01, level * 0.99]}},
            )
        ]
        ResultsFile(env={"machine_fingerprint": "m1"}, runs=runs).write(path)
        return str(path)

    base, new = side(831.0, tmp_path / "base.json"), side(2824.0, tmp_path / "new.json")
    md = tmp_path / "report.md"
    code, out, err = cli("compare", base, new, "--markdown", str(md))
    assert code == 3 and "cannot reach alpha" in " ".join((out + err).split())
    assert md.read_text().index("## Inconclusive") < md.read_text().index("## Regressions")
    code, _, _ = cli("compare", base, new, "--allow-inconclusive")
    assert code == 0
    code, stdout, _ = cli("compare", base, new, "--json", "--allow-inconclusive")
    doc = json.loads(stdout)
    assert doc["inconclusive"][0]["verdict"] == "inconclusive" and doc["regressions"] == []
