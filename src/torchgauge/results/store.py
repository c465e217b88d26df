"""The history store: every run's record, raw samples and environment in one SQLite file.

Layout (``STORE_SCHEMA_VERSION``)::

    meta(key, value)                       -- "schema_version"
    environments(id, env_hash UNIQUE, torch_version, torch_git_version,
                 machine_fingerprint, device_name, env_json)
    suites(id, created_at, torchgauge_version, env_id, source, completed_at)
                                           -- one `torchgauge run` (or import): a "run id";
                                           -- completed_at NULL: interrupted (incomplete)
    runs(id, suite_id, env_id, model, domain, mode, device, precision, backend,
         batch_size, requested_batch_size, size, repeat, warmup, seed, status, error,
         started_at, wall_s, requested_metrics_json, options_json, model_kwargs_json,
         metrics_json, samples_json, model_code_hash, threads_json)
                                           -- one RunRecord; samples_json holds the raw
                                           -- time samples that metrics_json leaves out

The database runs in WAL mode and every :meth:`Store.add_run` is its own transaction, so a
writer killed at any point loses at most the run it was writing (tests/results/test_store.py
kills one with SIGKILL). Several readers and one writer may use the file at once. A suite
is marked complete (:meth:`Store.finish_suite`) only when its command ran to the end;
``latest``/``previous`` skip incomplete suites unless asked. Readers open the file
read-only (``readonly=True``): they never create, migrate or otherwise alter it. Every
SQLite failure (a lock held past ``lock_wait_s``, damaged pages) is a :class:`StoreError`.

Example:
    >>> with Store(tmp / "history.sqlite") as store:  # doctest: +SKIP
    ...     suite = store.begin_suite(results.env)
    ...     for record in results.runs:
    ...         store.add_run(suite, record)
    ...     again = store.load(suite)  # a ResultsFile
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .schema import ResultsFile, RunRecord
from .store_queries import StoreQueries
from .store_tables import (
    _DDL,
    BUSY_TIMEOUT_S,
    DB_ENV_VAR,
    STORE_SCHEMA_VERSION,
    SeriesPoint,
    StoreError,
    StoreLockedError,
    SuiteInfo,
    _dumps,
    _now,
    _sqlite_errors,
    _Tx,
    default_db_path,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "DB_ENV_VAR",
    "STORE_SCHEMA_VERSION",
    "SeriesPoint",
    "Store",
    "StoreError",
    "StoreLockedError",
    "SuiteInfo",
    "default_db_path",
    "metric_value",
]

_SAMPLE_KEYS = ("samples", "warmup_samples")  # lists moved from metrics_json["time_ms"] to samples_json


def metric_value(metrics: Mapping[str, Any], metric: str) -> float | None:
    """The value of quantity ``metric`` (:func:`torchgauge.harness.metrics.quantity`) in a record's metrics, or None.

    ``time`` falls back to the median of the raw samples when no summary was stored.
    """
    from ..harness.metrics import quantity

    return quantity(metric).value(metrics)


class Store(StoreQueries):
    """A SQLite history database (see the module docstring for the layout).

    Args:
        path: database file; parent directories are created.
        create: False to refuse a missing file (readers) instead of creating an empty one.
        readonly: open for reading only (``history``, ``compare``, ``export``): a missing
            file is refused and nothing is ever written, not even a schema into an empty file.
        lock_wait_s: how long a write waits for another writer's lock before StoreLockedError
            (default BUSY_TIMEOUT_S).
    """

    def __init__(
        self, path: str | os.PathLike, *, create: bool = True, readonly: bool = False, lock_wait_s: float | None = None
    ) -> None:
        self.path = Path(path).expanduser()
        self.readonly = readonly
        self.lock_wait_s = BUSY_TIMEOUT_S if lock_wait_s is None else lock_wait_s
        if not self.path.exists():
            if not create or readonly:
                raise StoreError(
                    f"no history database at {self.path}; record runs with `torchgauge run --db {self.path}`"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._open()

    @_sqlite_errors
    def _open(self) -> None:
        if self.readonly:
            uri = self.path.resolve().as_uri() + "?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=self.lock_wait_s, isolation_level=None)
            self._check_schema()
        else:
            # isolation_level=None: no implicit transactions; each write opens its own below.
            self._conn = sqlite3.connect(str(self.path), timeout=self.lock_wait_s, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")  # WAL + FULL: a commit survives power loss too
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._init_schema()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def _transaction(self) -> _Tx:
        return _Tx(self._conn)

    def _init_schema(self) -> None:
        self._has_completed_at = True
        with self._transaction():
            for statement in filter(str.strip, _DDL.split(";")):
                self._conn.execute(statement)
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                self._conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(STORE_SCHEMA_VERSION),))
                return
            version = self._version(row[0])
            if version < 2:  # suites.completed_at; every suite stored before it counts as complete
                self._conn.execute("ALTER TABLE suites ADD COLUMN completed_at TEXT")
                self._conn.execute("UPDATE suites SET completed_at = created_at")
                self._conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
            if version < 3:  # runs.model_code_hash; NULL for runs stored before it
                self._conn.execute("ALTER TABLE runs ADD COLUMN model_code_hash TEXT")
                self._conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
            if version < 4:  # runs.threads_json (the record's thread settings); NULL for runs stored before it
                self._conn.execute("ALTER TABLE runs ADD COLUMN threads_json TEXT")
                self._conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")

    def _check_schema(self) -> None:
        """Read-only open: the file must already be a torchgauge database this version reads."""
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a torchgauge history database: {exc}") from None
        if row is None:
            raise StoreError(f"{self.path} is not a torchgauge history database: no schema version")
        self._has_completed_at = self._version(row[0]) >= 2

    def _version(self, text: str) -> int:
        try:
            version = int(text)
        except ValueError:
            raise StoreError(f"{self.path} is not a torchgauge history database: schema version {text!r}") from None
        if version > STORE_SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has store schema {version}, newer than this torchgauge "
                f"supports ({STORE_SCHEMA_VERSION}); upgrade torchgauge"
            )
        return version

    @property
    @_sqlite_errors
    def schema_version(self) -> int:
        return int(self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    # -- writing ----------------------------------------------------------------------------

    def _env_id(self, env: Mapping[str, Any]) -> int:
        text = _dumps(dict(env))
        digest = hashlib.sha256(text.encode()).hexdigest()
        row = self._conn.execute("SELECT id FROM environments WHERE env_hash = ?", (digest,)).fetchone()
        if row:
            return int(row[0])
        device = env.get("gpu_name") or env.get("cpu_model")
        cur = self._conn.execute(
            "INSERT INTO environments"
            " (env_hash, torch_version, torch_git_version, machine_fingerprint, device_name, env_json)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                digest,
                env.get("torch_version"),
                env.get("torch_git_version"),
                env.get("machine_fingerprint"),
                device,
                text,
            ),
        )
        return int(cur.lastrowid)

    @_sqlite_errors
    def begin_suite(
        self,
        env: Mapping[str, Any],
        *,
        source: str = "run",
        torchgauge_version: str = "",
        created_at: str | None = None,
    ) -> int:
        """Record a new, incomplete suite (before its runs) and return its id, the "run id" users see."""
        with self._transaction():
            env_id = self._env_id(env)
            cur = self._conn.execute(
                "INSERT INTO suites (created_at, torchgauge_version, env_id, source) VALUES (?, ?, ?, ?)",
                (created_at or _now(), torchgauge_version, env_id, source),
            )
            return int(cur.lastrowid)

    @_sqlite_errors
    def finish_suite(self, suite_id: int) -> None:
        """Mark a suite complete: its command ran to the end (an interrupted one stays incomplete)."""
        with self._transaction():
            self._conn.execute("UPDATE suites SET completed_at = ? WHERE id = ?", (_now(), suite_id))

    @_sqlite_errors
    def add_run(self, suite_id: int, record: RunRecord) -> int:
        """Insert one record in its own transaction; returns its row id."""
        with self._transaction():
            return self._insert_run(suite_id, record)

    def _insert_run(self, suite_id: int, record: RunRecord) -> int:
        row = self._conn.execute("SELECT env_id FROM suites WHERE id = ?", (suite_id,)).fetchone()
        if row is None:
            raise StoreError(f"no stored run {suite_id}")
        env_id = self._env_id(record.env) if record.env else int(row[0])
        metrics = dict(record.metrics)
        samples: dict[str, Any] = {}
        if isinstance(metrics.get("time_ms"), Mapping):
            time_ms = dict(metrics["time_ms"])
            samples = {k: time_ms.pop(k) for k in _SAMPLE_KEYS if k in time_ms}
            metrics["time_ms"] = time_ms
        c = record.config
        cur = self._conn.execute(
            "INSERT INTO runs (suite_id, env_id, model, domain, mode, device, precision, backend, batch_size,"
            " requested_batch_size, size, repeat, warmup, seed, status, error, started_at, wall_s,"
            " requested_metrics_json, options_json, model_kwargs_json, metrics_json, samples_json, model_code_hash,"
            " threads_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                suite_id,
                env_id,
                c.model,
                record.domain,
                c.mode,
                c.device,
                c.precision,
                c.backend,
                record.batch_size,
                c.batch_size,
                c.size,
                c.repeat,
                c.warmup,
                c.seed,
                record.status,
                record.error,
                record.started_at,
                record.wall_s,
                _dumps(list(c.metrics)),
                _dumps(c.options.to_dict()),
                _dumps(dict(c.model_kwargs)),
                _dumps(metrics),
                _dumps(samples),
                record.model_code_hash,
                None if record.threads is None else _dumps(record.threads),
            ),
        )
        return int(cur.lastrowid)

    @_sqlite_errors
    def save(self, results: ResultsFile, *, source: str = "import") -> int:
        """Store a whole results file atomically (one transaction); returns the new run id.

        The suite is complete unless the file says its run was interrupted (``complete``).
        """
        with self._transaction():
            env_id = self._env_id(results.env)
            cur = self._conn.execute(
                "INSERT INTO suites (created_at, torchgauge_version, env_id, source, completed_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (
                    results.created_at or _now(),
                    results.torchgauge_version,
                    env_id,
                    source,
                    _now() if results.complete else None,
                ),
            )
            suite_id = int(cur.lastrowid)
            for record in results.runs:
                self._insert_run(suite_id, record)
        return suite_id
