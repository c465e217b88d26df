"""``torchgauge history``, ``import`` and ``export`` on a small stored history."""

from __future__ import annotations

import json

import pytest

from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord, load_results


def _file(path, level: float, git: str, *, status: str = "ok") -> None:
    metrics = {"time_ms": {"samples": [level * f for f in (0.99, 1.0, 1.01)], "median": level}, "cpu_peak_mb": 400.0}
    runs = [
        RunRecord(RunConfig("resnet18", mode="eval"), status, metrics=metrics if status == "ok" else {}, batch_size=2),
        RunRecord(RunConfig("resnet18", mode="train"), "ok", metrics={"time_ms": {"samples": [50.0], "median": 50.0}}),
    ]
    ResultsFile(
        env={"torch_version": "2.13.0", "torch_git_version": git, "machine_fingerprint": "m1"}, runs=runs
    ).write(path)


@pytest.fixture
def db(cli, tmp_path):
    levels = [10.0, 10.1, 9.9, 10.0, 12.0, 12.1, 11.9, 12.0]
    paths = []
    for i, level in enumerate(levels):
        paths.append(tmp_path / f"r{i}.json")
        _file(paths[-1], level, f"sha{i}", status="error" if i == 2 else "ok")
    db = tmp_path / "h.sqlite"
    code, _, err = cli("import", *map(str, paths), "--db", str(db))
    assert code == 0 and err.count("stored as run") == len(levels)
    return db


def test_history_marks_the_step(cli, db) -> None:
    code, stdout, _ = cli("history", "resnet18", "--mode", "eval", "--db", str(db), "--json")
    assert code == 0
    (table,) = json.loads(stdout)
    assert table["config"] == "eval/cpu/fp32/eager"
    assert [r[0] for r in table["rows"]] == list(range(1, 9))
    assert table["rows"][2][4] == "error" and table["rows"][2][5] is None  # the failed run keeps its row
    (step,) = table["steps"]
    assert (step["run"], step["kind"]) == (5, "regression") and step["change"] == pytest.approx(0.2, abs=0.01)
    code, stdout, _ = cli("history", "resnet18", "--db", str(db))
    assert code == 0 and "regression +20" in stdout and "eval/cpu/fp32/eager" in stdout and "train/cpu" in stdout


def test_history_other_metric_and_errors(cli, db, tmp_path) -> None:
    code, stdout, _ = cli("history", "resnet18", "--mode", "eval", "--metric", "cpu_peak_mb", "--db", str(db), "--json")
    assert code == 0 and json.loads(stdout)[0]["steps"] == []
    code, _, err = cli("history", "vgg16", "--db", str(db))
    assert code == 1 and "no stored run of 'vgg16'" in err
    code, _, err = cli("history", "resnet18", "--db", str(tmp_path / "absent.sqlite"))
    assert code == 1 and "no history database" in err
    code, _, err = cli("history", "resnet18", "--metric", "speed", "--db", str(db))
    assert code == 2 and "'speed' is not one of" in err


def test_export_round_trip_and_list(cli, db, tmp_path) -> None:
    out = tmp_path / "latest.json"
    assert cli("export", "latest", "--db", str(db), "--output", str(out))[0] == 0
    original = load_results(tmp_path / "r7.json")
    assert [r.to_dict() for r in load_results(out).runs] == [r.to_dict() for r in original.runs]
    code, stdout, _ = cli("export", "--list", "--db", str(db), "--json")
    runs = json.loads(stdout)
    assert code == 0 and [r["id"] for r in runs] == list(range(1, 9)) and runs[0]["source"].startswith("import:")
    code, stdout, _ = cli("export", "3", "--db", str(db))
    assert code == 0 and json.loads(stdout)["env"]["torch_git_version"] == "sha2"
    assert cli("export", "--db", str(db))[0] == 2


def test_import_rejects_a_bad_file_before_storing_anything(cli, tmp_path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    _file(good, 1.0, "x")
    bad.write_text('{"runs": []}')
    db = tmp_path / "h.sqlite"
    code, _, err = cli("import", str(good), str(bad), "--db", str(db))
    assert code == 1 and "schema_version" in err and not db.exists()


def test_import_merge_stores_shards_as_one_run(cli, tmp_path) -> None:
    a, b = tmp_path / "shard-1.json", tmp_path / "shard-2.json"
    _file(a, 1.0, "x")
    _file(b, 2.0, "y")  # another env (git): its runs keep their own
    db = tmp_path / "h.sqlite"
    assert cli("import", str(a), str(b), "--merge", "--db", str(db))[0] == 0
    code, stdout, _ = cli("export", "latest", "--db", str(db))
    doc = json.loads(stdout)
    assert code == 0 and len(doc["runs"]) == 4 and doc["env"]["torch_git_version"] == "x"
    assert [r.get("env", {}).get("torch_git_version") for r in doc["runs"]] == [None, None, "y", "y"]


def test_run_stores_each_finished_run(cli, tmp_path) -> None:
    from pathlib import Path

    from torchgauge.results.store import Store

    planted = str(Path("tests/fixtures/planted_models.py").resolve())
    db = tmp_path / "h.sqlite"
    code, _, err = cli(
        "run",
        "planted_ok",
        "planted_raises",
        "--model-file",
        planted,
        "--size",
        "smoke",
        "--mode",
        "eval",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--output",
        str(tmp_path / "r.json"),
        "--db",
        str(db),
        "--in-process",
    )  # in-process: the store hook is the same, without a worker start-up
    assert code == 1 and "stored as run 1" in err
    with Store(db, create=False) as store:
        stored = store.load(1)
    assert {r.config.model: r.status for r in stored.runs} == {"planted_ok": "ok", "planted_raises": "error"}
    assert len(stored.runs[0].metrics["time_ms"]["samples"]) == 2 and stored.env["torch_version"]
    code, _, err = cli(
        "run",
        "planted_ok",
        "--model-file",
        planted,
        "--size",
        "smoke",
        "--mode",
        "eval",
        "--repeat",
        "2",
        "--output",
        str(tmp_path / "r2.json"),
        "--db",
        str(db),
        "--no-db",
        "-q",
        "--in-process",
    )
    assert code == 0 and "stored as run" not in err


def test_history_plot_and_sparkline(cli, db, tmp_path) -> None:
    plot = tmp_path / "plots" / "resnet18.png"
    code, stdout, err = cli("history", "resnet18", "--mode", "eval", "--db", str(db), "--plot", str(plot))
    assert code == 0 and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "plot written to" in err
    # levels 10, 10.1, failed, 10, then 12, 12.1, 11.9, 12: low blocks, a blank, high blocks
    assert "\u2581\u2581 \u2581\u2588\u2588\u2587\u2588" in stdout
    code, _, err = cli("history", "resnet18", "--db", str(db), "--plot", str(tmp_path / "x.txt"))
    assert code == 2 and "accepted extensions: .png, .svg, .pdf" in err


def test_sparkline() -> None:
    from torchgauge.report.history import sparkline

    assert sparkline([1.0, 2.0, None, 3.0]) == "\u2581\u2585 \u2588"
    assert sparkline([5.0, 5.0]) == "\u2581\u2581" and sparkline([None]) == " " and sparkline([]) == ""


def test_import_merge_refuses_shards_from_different_hardware(cli, tmp_path) -> None:
    hardware = {"cpu_model": "Xeon A", "cpu_count": 4, "memory_gib": 16.0, "gpu_name": None}
    paths = []
    for i, cpu in enumerate(("Xeon A", "Xeon A", "EPYC B")):
        path = tmp_path / f"shard-{i}.json"
        runs = [RunRecord(RunConfig(f"m{i}", mode="eval"), "ok", metrics={"time_ms": {"samples": [1.0]}})]
        ResultsFile(env={**hardware, "cpu_model": cpu, "hostname": f"runner-{i}"}, runs=runs).write(path)
        paths.append(str(path))
    db = tmp_path / "h.sqlite"
    code, _, err = cli("import", *paths[:2], "--merge", "--db", str(db))  # other hostnames, same hardware: fine
    assert code == 0, err
    code, _, err = cli("import", *paths, "--merge", "--db", str(tmp_path / "mixed.sqlite"))
    assert code == 1 and "2 different hardware types" in err and "EPYC B, 4 CPUs, 16 GiB, no GPU" in err
    assert "--allow-mixed-hardware" in err and not (tmp_path / "mixed.sqlite").exists()
    code, _, err = cli("import", *paths, "--merge", "--allow-mixed-hardware", "--db", str(tmp_path / "mixed.sqlite"))
    assert code == 0 and "2 hardware types" in err


NIGHTLY_METRICS = ("time", "memory", "tensor_memory", "op_counts", "flops")


def _rounds_shard(path, models: dict[str, int], night: int, *, rounds: int = 3, counted_at: int = 1) -> None:
    """A shard of ``run --rounds 3 --metrics <nightly>``: every configuration in 3 records, the
    deterministic metrics in the record of the round that collected them (``counted_at``: with
    several jobs the first round need not be stored first); ``models`` maps model -> op count."""
    runs = []
    for r in range(rounds):
        for model, ops in models.items():
            once = r == counted_at
            metrics = {"time_ms": {"samples": [10.0 + night + 0.1 * r], "median": 10.0 + night + 0.1 * r}}
            metrics["cpu_peak_mb"] = 400.0 + r
            if once:
                metrics["op_counts"] = {"total": ops, "by_op": {"aten::mm": ops}}
                metrics["tensor_memory"] = {"cpu_peak_mb": 12.0, "cpu_net_mb": 0.0}
                metrics["flops"] = {"total": 5000, "tflops": 0.1}
            config = RunConfig(model, mode="eval", metrics=NIGHTLY_METRICS if once else ("time", "memory"))
            runs.append(RunRecord(config, "ok", metrics=metrics, batch_size=2))
    env = {"torch_version": "2.13.0", "torch_git_version": f"night{night}", "machine_fingerprint": "m1"}
    ResultsFile(env=env, runs=runs).write(path)


def test_rounds_runs_through_import_merge_history_compare_and_the_dashboard(cli, tmp_path) -> None:
    """The nightly's path for a rounds run whose deterministic counts sit in one record per
    configuration: shards merged into one stored run, followed night by night, judged, shown."""
    from torchgauge.report.site.data import latest_run, model_history
    from torchgauge.results.store import Store

    db = tmp_path / "h.sqlite"
    nights = [{"a": 100, "b": 50}, {"a": 130, "b": 50}]
    for night, counts in enumerate(nights):
        shards = []
        for i, model in enumerate(counts):
            shards.append(tmp_path / f"night{night}-shard{i}.json")
            _rounds_shard(shards[-1], {model: counts[model]}, night, counted_at=night)
        code, _, err = cli("import", *map(str, shards), "--merge", "--db", str(db))
        assert code == 0 and "6 run(s) stored" in err, err
    # the store keeps what each record measured
    with Store(db, create=False) as store:
        latest = store.load(2)
    requested = sorted(r.config.metrics for r in latest.runs if r.config.model == "a")
    assert requested == [("time", "memory"), ("time", "memory"), NIGHTLY_METRICS]
    # history: one row per stored run, the count from the record that has it
    code, stdout, _ = cli("history", "a", "--metric", "op_counts", "--db", str(db), "--json")
    assert code == 0
    (table,) = json.loads(stdout)
    assert [(row[0], row[4], row[5]) for row in table["rows"]] == [(1, "ok", 100.0), (2, "ok", 130.0)]
    code, stdout, _ = cli("history", "a", "--metric", "time", "--db", str(db), "--json")
    (table,) = json.loads(stdout)
    assert [row[5] for row in table["rows"]] == [pytest.approx(10.1), pytest.approx(11.1)]  # median of 3 processes
    # compare: the count gates, and the report says which signal flagged it
    out, report = tmp_path / "c.json", tmp_path / "r.md"
    code, _, _ = cli("compare", "previous", "latest", "--db", str(db), "--output", str(out), "--markdown", str(report))
    assert code == 1
    found = json.loads(out.read_text())
    assert [(f["model"], f["metric"], f["base"], f["new"]) for f in found["regressions"]] == [
        ("a", "op_counts", 100.0, 130.0)
    ]
    assert "1 by ATen operators per step, deterministic count" in report.read_text()
    # the dashboard: one index row per configuration, one point per night
    with Store(db, create=False) as store:
        index = latest_run(store)
        page = model_history(store, "a")
    assert [(r.model, r.status) for r in index.rows] == [("a", "ok"), ("b", "ok")]
    assert index.rows[0].median_ms == pytest.approx(11.1) and index.rows[0].ci_low is not None
    (series,) = page.metrics["op_counts"]
    assert series.values == [100.0, 130.0] and len(page.points[series.label]) == 2
    (time_series,) = page.metrics["time"]
    assert len(time_series.values) == len(time_series.low) == 2


def test_history_names_records_that_disagree_on_a_count(cli, tmp_path) -> None:
    path = tmp_path / "split.json"
    _rounds_shard(path, {"a": 100}, 0)
    results = load_results(path)
    results.runs[0].metrics["op_counts"] = {"total": 104, "by_op": {"aten::mm": 104}}  # a second record counted 104
    results.write(path)
    db = tmp_path / "h.sqlite"
    assert cli("import", str(path), "--db", str(db))[0] == 0
    code, stdout, _ = cli("history", "a", "--metric", "op_counts", "--db", str(db), "--json")
    (table,) = json.loads(stdout)
    (row,) = table["rows"]
    assert row[5] is None and row[7] == "records disagree: 100, 104"
