"""The PostgreSQL history store against a real server: parity with SQLite, concurrent
writers, a writer killed mid-write, and versioned migrations."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord
from torchgauge.results.store import STORE_SCHEMA_VERSION, Store, StoreError
from torchgauge.results.stores import open_store

ENV = {
    "torch_version": "2.13.0",
    "torch_git_version": "abc123",
    "machine_fingerprint": "m1",
    "cpu_model": "Xeon",
    "gpu_name": None,
    "hostname": "box-a",
}
SRC = str(Path(__file__).resolve().parents[3] / "src")


def _rec(model: str, median: float, *, mode: str = "eval", status: str = "ok") -> RunRecord:
    metrics = (
        {
            "time_ms": {
                "samples": [median - 0.1, median, median + 0.1],
                "median": median,
                "warmup_samples": [median * 3],
            },
            "cpu_peak_mb": 500.0,
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


def _fill(store: Store) -> list[int]:
    """The same history in any backend: suites from two machines, a per-run env, an empty suite."""
    ids = [
        store.save(
            ResultsFile(
                env=dict(ENV, torch_git_version=f"g{i}"),
                created_at=f"2026-11-2{i}T00:00:00+00:00",
                runs=[_rec("a", 10.0 + i), _rec("a", 1.0, mode="train"), _rec("b", 0, status="oom")],
            )
        )
        for i in range(3)
    ]
    other = store.begin_suite(dict(ENV, machine_fingerprint="m2"), created_at="2026-11-25T00:00:00+00:00")
    odd = _rec("a", 99.0)
    odd.env = dict(ENV, hostname="box-b", machine_fingerprint="m2")
    store.add_run(other, odd)
    store.begin_suite(ENV, created_at="2026-11-26T00:00:00+00:00")  # stored nothing: never "latest"
    return ids + [other]


def _snapshot(store: Store) -> dict:
    return {
        "suites": [s for s in store.suites()],
        "loads": [store.load(s.id).to_dict() for s in store.suites()],
        "series": [(p.suite_id, p.status, p.metrics, p.config) for p in store.series("a", mode="eval", machine="m1")],
        "refs": [store.resolve(r, machine=m) for r in ("latest", "previous") for m in (None, "m1")],
        "version": store.schema_version,
    }


def test_same_history_as_sqlite(pg_url, tmp_path) -> None:
    with Store(tmp_path / "h.sqlite") as lite, open_store(pg_url) as pg:
        assert _fill(lite) == _fill(pg)
        assert _snapshot(pg) == _snapshot(lite)
        assert pg.load(4).runs[0].env["hostname"] == "box-b"
        count = "SELECT COUNT(*) FROM environments"
        assert (
            pg._conn.execute(count).fetchone()[0] == lite._conn.execute(count).fetchone()[0] == 6
        )  # de-duplicated alike


def test_schema_matches_sqlite_column_for_column(pg_url, tmp_path) -> None:
    from torchgauge.results.stores.postgres import MIGRATIONS

    assert max(MIGRATIONS) == STORE_SCHEMA_VERSION  # a new SQLite schema needs its PostgreSQL migration
    lite = sqlite3.connect(tmp_path / "h.sqlite")
    Store(tmp_path / "h.sqlite").close()
    with open_store(pg_url) as pg:
        for table in ("meta", "environments", "suites", "runs"):
            lite_cols = [(row[1], bool(row[3] or row[5])) for row in lite.execute(f"PRAGMA table_info({table})")]
            pg_cols = [
                (name, nullable == "NO")
                for name, nullable in pg._conn.execute(
                    "SELECT column_name, is_nullable FROM information_schema.columns"
                    " WHERE table_name = ? ORDER BY ordinal_position",
                    (table,),
                )
            ]
            assert pg_cols == lite_cols, table  # names, order, NOT NULL (primary keys count as NOT NULL)


_WRITER = textwrap.dedent("""
    import sys
    from torchgauge.results.schema import RunConfig, RunRecord
    from torchgauge.results.stores import open_store
    store = open_store(sys.argv[1])
    suite = store.begin_suite({"torch_version": "2.13.0", "machine_fingerprint": "m1"})
    print(suite, flush=True)
    sys.stdin.readline()  # both writers start writing together
    for i in range(int(sys.argv[2])):
        record = RunRecord(RunConfig(f"{sys.argv[3]}{i}"), "ok", metrics={"time_ms": {"samples": [1.0, 2.0]}})
        store.add_run(suite, record)
    print("done", flush=True)
""")


def _writer(script: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )


def test_two_writer_processes_at_once(pg_url) -> None:
    writers = [_writer(_WRITER, pg_url, "40", name) for name in ("x", "y")]
    try:
        suites = [int(w.stdout.readline()) for w in writers]
        for w in writers:
            w.stdin.write("go\n")
            w.stdin.flush()
        assert [w.stdout.readline().strip() for w in writers] == ["done", "done"]
        assert [w.wait(timeout=60) for w in writers] == [0, 0]
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
    with open_store(pg_url, create=False) as store:
        assert sorted(suites) == [s.id for s in store.suites()] and [s.runs for s in store.suites()] == [40, 40]
        for suite, name in zip(suites, ("x", "y")):
            assert [r.config.model for r in store.load(suite).runs] == [f"{name}{i}" for i in range(40)]
        assert store._conn.execute("SELECT COUNT(*) FROM environments").fetchone()[0] == 1  # no duplicate env row


def _v2_store(steps: tuple[str, ...]):
    from torchgauge.results.stores.postgres import MIGRATIONS as current
    from torchgauge.results.stores.postgres import PostgresStore

    class PostgresStoreV2(PostgresStore):
        MIGRATIONS = {**current, STORE_SCHEMA_VERSION + 1: steps}
        SCHEMA_VERSION = STORE_SCHEMA_VERSION + 1

    return PostgresStoreV2


def test_migration_from_an_older_schema_runs_once_and_keeps_the_data(pg_url) -> None:
    with open_store(pg_url) as old:
        ids = _fill(old)
        before = [old.load(i).to_dict() for i in ids]
    newer = _v2_store(("ALTER TABLE runs ADD COLUMN hostname TEXT", "CREATE INDEX runs_by_host ON runs (hostname)"))
    opened: list = []
    # Two machines upgrading at once: the writers' lock lets one migrate, the other sees it done.
    threads = [threading.Thread(target=lambda: opened.append(newer(pg_url))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(opened) == 2
    for store in opened:
        assert store.schema_version == STORE_SCHEMA_VERSION + 1
        store.close()
    with newer(pg_url) as store:
        assert [store.load(i).to_dict() for i in ids] == before
        assert store._conn.execute("SELECT COUNT(hostname) FROM runs").fetchone()[0] == 0  # the new column, empty
    with pytest.raises(StoreError, match="newer than this torchgauge supports"):
        open_store(pg_url)


def test_failed_migration_leaves_the_old_version(pg_url) -> None:
    open_store(pg_url).close()
    broken = _v2_store(("ALTER TABLE runs ADD COLUMN half TEXT", "ALTER TABLE no_such_table ADD COLUMN x TEXT"))
    with pytest.raises(StoreError, match="not usable as a torchgauge history database"):
        broken(pg_url)
    with open_store(pg_url) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        columns = [
            r[0]
            for r in store._conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'")
        ]
        assert "half" not in columns  # the first step rolled back with the failed second


def test_unreachable_server_and_missing_history_are_one_line_errors(pg_url) -> None:
    with pytest.raises(
        StoreError, match=r"cannot connect to the history database postgresql://u:\*\*\*@127.0.0.1:1/db"
    ):
        open_store("postgresql://u:secret@127.0.0.1:1/db")
    with pytest.raises(StoreError, match="no torchgauge history in"):
        open_store(pg_url, create=False)


def test_cli_imports_exports_and_reads_history_from_postgres(pg_url, tmp_path, monkeypatch, capsys) -> None:
    from torchgauge.cli import main

    path = tmp_path / "r.json"
    ResultsFile(env=ENV, runs=[_rec("a", 10.0), _rec("a", 1.0, mode="train")]).write(path)
    assert main(["import", str(path), "--db", pg_url]) == 0
    monkeypatch.setenv("TORCHGAUGE_DB", pg_url)  # the URL through the environment, unmangled
    assert main(["import", str(path)]) == 0
    capsys.readouterr()
    assert main(["export", "--list", "--json"]) == 0
    assert [s["runs"] for s in json.loads(capsys.readouterr().out)] == [2, 2]
    assert main(["history", "a", "--mode", "eval", "--json"]) == 0
    assert "10.0" in capsys.readouterr().out
