"""The history store's tables (DDL and schema version), its errors, records and write transaction.

Shared by the SQLite :class:`~torchgauge.results.store.Store` and the PostgreSQL store
(:mod:`torchgauge.results.stores.postgres`); the layout is described in
:mod:`torchgauge.results.store`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .schema import RunConfig

__all__ = [
    "BUSY_TIMEOUT_S",
    "DB_ENV_VAR",
    "STORE_SCHEMA_VERSION",
    "SeriesPoint",
    "StoreError",
    "StoreLockedError",
    "SuiteInfo",
    "default_db_path",
]

STORE_SCHEMA_VERSION = 4  # 2: suites.completed_at; 3: runs.model_code_hash; 4: runs.threads_json
# Environment variable naming the database (overrides the XDG default).
DB_ENV_VAR = "TORCHGAUGE_DB"
# Seconds a writer waits (SQLite retries with a growing backoff) for another writer's lock
# before StoreLockedError: `run` then marks the run "not stored" and goes on.
BUSY_TIMEOUT_S = 30.0

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS environments (
    id INTEGER PRIMARY KEY,
    env_hash TEXT NOT NULL UNIQUE,
    torch_version TEXT,
    torch_git_version TEXT,
    machine_fingerprint TEXT,
    device_name TEXT,
    env_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS suites (
    id INTEGER PRIMARY KEY,
    created_at TEXT NOT NULL,
    torchgauge_version TEXT,
    env_id INTEGER NOT NULL REFERENCES environments(id),
    source TEXT NOT NULL,
    completed_at TEXT
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    suite_id INTEGER NOT NULL REFERENCES suites(id),
    env_id INTEGER NOT NULL REFERENCES environments(id),
    model TEXT NOT NULL, domain TEXT, mode TEXT NOT NULL, device TEXT NOT NULL,
    precision TEXT NOT NULL, backend TEXT NOT NULL,
    batch_size INTEGER, requested_batch_size INTEGER, size TEXT,
    repeat INTEGER, warmup INTEGER, seed INTEGER,
    status TEXT NOT NULL, error TEXT, started_at TEXT, wall_s REAL,
    requested_metrics_json TEXT, options_json TEXT, model_kwargs_json TEXT,
    metrics_json TEXT NOT NULL, samples_json TEXT NOT NULL, model_code_hash TEXT, threads_json TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_config ON runs (model, mode, device, precision, backend);
CREATE INDEX IF NOT EXISTS runs_by_suite ON runs (suite_id);
"""


class StoreError(ValueError):
    """The database cannot be used as asked (missing, damaged, newer schema, unknown run id)."""


class StoreLockedError(StoreError):
    """Another process held the database's write lock for longer than ``lock_wait_s``."""


def _sqlite_errors(method):
    """Turn SQLite's exceptions (locks, damaged pages, garbage rows) into StoreError."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreLockedError(
                    f"{self.path} stayed locked by another process for more than {self.lock_wait_s:g} s"
                ) from None
            raise StoreError(f"{self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a torchgauge history database, or is damaged: {exc}") from None

    return wrapper


def default_db_path() -> Path:
    """``$TORCHGAUGE_DB``, else ``$XDG_DATA_HOME/torchgauge/history.sqlite`` (``~/.local/share`` by default)."""
    if os.environ.get(DB_ENV_VAR):
        return Path(os.environ[DB_ENV_VAR]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "torchgauge" / "history.sqlite"


@dataclass(frozen=True)
class SuiteInfo:
    """One stored suite (a `torchgauge run` invocation or an imported results file)."""

    id: int
    created_at: str
    source: str
    runs: int
    torch_version: str | None
    torch_git_version: str | None
    machine_fingerprint: str | None
    device_name: str | None
    complete: bool = True  # False: the command storing it was interrupted


@dataclass(frozen=True)
class SeriesPoint:
    """One run of a configuration in time order (see :meth:`Store.series`)."""

    run_id: int
    suite_id: int
    created_at: str
    torch_version: str | None
    torch_git_version: str | None
    status: str
    metrics: dict[str, Any]
    config: RunConfig
    env: dict[str, Any] | None = None  # the run's environment (hostname, devices, versions)
    error: str | None = None  # the failed run's error text


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class _Tx:
    """``with`` block around BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error); nests as a no-op."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.outer = False

    def __enter__(self) -> None:
        if not self.conn.in_transaction:
            self.begin()
            self.outer = True

    def begin(self) -> None:
        """Open the write transaction (a backend takes its writers' lock here)."""
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if not self.outer:
            return
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
