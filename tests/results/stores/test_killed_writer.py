"""A writer killed with SIGKILL mid-write loses only the run it was writing, in SQLite and PostgreSQL alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchgauge.results.schema import RunConfig, RunRecord
from torchgauge.results.stores import open_store

SRC = str(Path(__file__).resolve().parents[3] / "src")
# Stores three runs, then dies inside the open write transaction of a fourth (holding the writers' lock).
_KILLED = textwrap.dedent("""
    import sys, time
    from torchgauge.results.schema import RunConfig, RunRecord
    from torchgauge.results.stores import open_store
    store = open_store(sys.argv[1])
    suite = store.begin_suite({"torch_version": "2.13.0", "machine_fingerprint": "m1"})
    for i in range(3):
        store.add_run(suite, RunRecord(RunConfig(f"m{i}"), "ok", metrics={"time_ms": {"samples": [1.0, 2.0]}}))
    store._transaction().__enter__()
    store._insert_run(suite, RunRecord(RunConfig("m3"), "ok", metrics={}))
    print("writing", flush=True)
    time.sleep(60)
""")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path) -> str:
    """A fresh history: a SQLite file, or a database on the session's PostgreSQL server (skipped without one)."""
    return str(tmp_path / "h.sqlite") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_writer_killed_mid_write_loses_nothing_stored(store_location) -> None:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, store_location], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "writing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    with open_store(store_location, create=False) as store:
        if not store_location.startswith("postgresql"):
            assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        (suite,) = store.suites()
        assert [r.config.model for r in store.load(suite.id).runs] == ["m0", "m1", "m2"]
        store.add_run(suite.id, RunRecord(RunConfig("after"), "ok"))  # the dead writer's lock went with it
        assert store.suites()[0].runs == 4
