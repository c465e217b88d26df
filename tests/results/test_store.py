"""The SQLite history store: round trips, queries, schema versions, and a writer killed mid-run."""

from __future__ import annotations

import json
import sqlite3

import pytest

from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord
from torchgauge.results.store import STORE_SCHEMA_VERSION, Store, StoreError, default_db_path, metric_value

ENV = {
    "torch_version": "2.13.0",
    "torch_git_version": "abc123",
    "machine_fingerprint": "m1",
    "cpu_model": "Xeon",
    "gpu_name": None,
}


def _rec(model: str, median: float, *, mode: str = "eval", status: str = "ok", **extra) -> RunRecord:
    metrics = (
        {
            "time_ms": {
                "samples": [median - 0.1, median, median + 0.1],
                "median": median,
                "warmup_samples": [median * 3],
            },
            "cpu_peak_mb": 500.0,
            **extra,
        }
        if status == "ok"
        else {}
    )
    return RunRecord(
        RunConfig(model, mode=mode, size="smoke", repeat=3, warmup=1, options={"channels_last": True}),
        status,
        domain="vision",
        metrics=metrics,
        batch_size=2,
        started_at="2026-11-23T10:00:00+00:00",
        wall_s=1.5,
        error="boom" if status != "ok" else None,
    )


def test_round_trip_keeps_records_and_samples(tmp_path) -> None:
    results = ResultsFile(
        env=ENV,
        runs=[
            _rec("a", 10.0),
            _rec("b", 20.0, status="error"),
            _rec("c", 5.0, flops={"total": 123, "by_op": {"aten::mm": 123}}),
        ],
        torchgauge_version="0.1.0",
    )
    with Store(tmp_path / "h.sqlite") as store:
        suite = store.save(results)
        loaded = store.load(suite)
        assert store.schema_version == STORE_SCHEMA_VERSION
    assert loaded.env == ENV and loaded.torchgauge_version == "0.1.0"
    assert [r.to_dict() for r in loaded.runs] == [r.to_dict() for r in results.runs]
    raw = (
        sqlite3.connect(tmp_path / "h.sqlite").execute("SELECT samples_json, metrics_json FROM runs LIMIT 1").fetchone()
    )
    assert json.loads(raw[0])["samples"] == [9.9, 10.0, 10.1] and "samples" not in json.loads(raw[1])["time_ms"]


def test_environments_deduplicated_and_per_run_env_kept(tmp_path) -> None:
    other = dict(ENV, torch_version="2.14.0.dev")
    odd = _rec("x", 1.0)
    odd.env = other
    with Store(tmp_path / "h.sqlite") as store:
        s1 = store.begin_suite(ENV)
        s2 = store.begin_suite(ENV)
        store.add_run(s1, _rec("a", 1.0))
        store.add_run(s2, odd)
        assert store._conn.execute("SELECT COUNT(*) FROM environments").fetchone()[0] == 2
        assert store.load(s1).runs[0].env is None
        assert store.load(s2).runs[0].env == other


def test_latest_previous_resolve_and_series(tmp_path) -> None:
    with Store(tmp_path / "h.sqlite") as store:
        ids = [
            store.save(
                ResultsFile(
                    env=dict(ENV, torch_git_version=f"g{i}"), runs=[_rec("a", 10.0 + i), _rec("a", 1.0, mode="train")]
                )
            )
            for i in range(3)
        ]
        other = store.save(ResultsFile(env=dict(ENV, machine_fingerprint="m2"), runs=[_rec("a", 99.0)]))
        store.begin_suite(ENV)  # an empty suite (a run that stored nothing) is never "latest"
        assert store.resolve("latest") == other and store.resolve("previous") == ids[2]
        assert store.resolve("latest", machine="m1") == ids[2] and store.resolve("previous", machine="m1") == ids[1]
        assert store.resolve(str(ids[0])) == ids[0]
        with pytest.raises(StoreError, match="no previous run for machine m2"):
            store.resolve("previous", machine="m2")
        with pytest.raises(StoreError, match="no stored run 999"):
            store.resolve("999")
        with pytest.raises(StoreError, match="accepted: a run id, latest or previous"):
            store.resolve("yesterday")
        points = store.series("a", mode="eval", machine="m1")
        assert [metric_value(p.metrics, "time") for p in points] == [10.0, 11.0, 12.0]
        assert [p.torch_git_version for p in points] == ["g0", "g1", "g2"]
        assert len(store.series("a")) == 7 and store.series("nope") == []
        assert [s.runs for s in store.suites()] == [2, 2, 2, 1, 0]


def test_metric_value_paths() -> None:
    m = {
        "time_ms": {"samples": [3.0, 1.0, 2.0]},
        "cpu_peak_mb": 10.0,
        "instructions": {"per_step": 7},
        "flops": {"total": 5, "tflops": None},
        "gpu_peak_mb": None,
    }
    assert metric_value(m, "time") == 2.0  # no stored median: from the samples
    assert (metric_value(m, "cpu_peak_mb"), metric_value(m, "instructions"), metric_value(m, "flops")) == (
        10.0,
        7.0,
        5.0,
    )
    assert (
        metric_value(m, "gpu_peak_mb") is None
        and metric_value(m, "tflops") is None
        and metric_value({}, "op_counts") is None
    )
    with pytest.raises(ValueError, match="accepted: time, cpu_peak_mb"):
        metric_value(m, "speed")


def test_missing_newer_and_foreign_databases(tmp_path) -> None:
    with pytest.raises(StoreError, match="no history database at"):
        Store(tmp_path / "none.sqlite", create=False)
    path = tmp_path / "h.sqlite"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer than this torchgauge supports"):
        Store(path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match="is not a torchgauge history database"):
        Store(junk)


def test_default_path_honours_env(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("TORCHGAUGE_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_db_path() == tmp_path / "torchgauge" / "history.sqlite"
    monkeypatch.setenv("TORCHGAUGE_DB", str(tmp_path / "x.sqlite"))
    assert default_db_path() == tmp_path / "x.sqlite"


def test_thread_settings_survive_the_store_and_old_databases_gain_the_column(tmp_path) -> None:
    threads = {"intra_op": 1, "inter_op": 1, "env": {"OMP_NUM_THREADS": "1"}, "oversubscribed": False}
    record = _rec("a", 10.0)
    record.threads = threads
    path = tmp_path / "h.sqlite"
    with Store(path) as store:
        suite = store.save(ResultsFile(env=ENV, runs=[record, _rec("b", 5.0)]))
        a, b = store.load(suite).runs
    assert a.threads == threads and b.threads is None  # compare's time signal and thread notes read them
    # a version-3 database (before threads_json): opened for writing, it is migrated; its runs load without threads
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE runs DROP COLUMN threads_json")
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        assert [r.threads for r in store.load(suite).runs] == [None, None]
