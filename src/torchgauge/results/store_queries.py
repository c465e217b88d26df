"""The read side of the SQLite history store (:class:`torchgauge.results.store.Store`): stored
suites, references (``latest``, ``previous``, ids), whole runs back as results files, and
per-configuration series for ``history``. A mixin over the store's connection; the PostgreSQL
store inherits it through ``Store``."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from .schema import ResultsFile, RunConfig, RunRecord, SchemaError
from .store_tables import SeriesPoint, StoreError, SuiteInfo, _sqlite_errors

__all__ = ["StoreQueries"]


class StoreQueries:
    """Queries over an open store (``self._conn``, ``self.path``); see :class:`~torchgauge.results.store.Store`."""

    # -- reading ----------------------------------------------------------------------------

    @_sqlite_errors
    def suites(self, *, machine: str | None = None) -> list[SuiteInfo]:
        """Stored suites, oldest first; ``machine`` restricts to one machine fingerprint."""
        complete = "s.completed_at IS NOT NULL" if self._has_completed_at else "1"
        sql = (
            "SELECT s.id, s.created_at, s.source, (SELECT COUNT(*) FROM runs r WHERE r.suite_id = s.id),"
            f" e.torch_version, e.torch_git_version, e.machine_fingerprint, e.device_name, {complete}"
            " FROM suites s JOIN environments e ON e.id = s.env_id"
        )
        args: tuple = ()
        if machine:
            sql += " WHERE e.machine_fingerprint = ?"
            args = (machine,)
        return [SuiteInfo(*row[:8], complete=bool(row[8])) for row in self._conn.execute(sql + " ORDER BY s.id", args)]

    def latest_ids(self, *, machine: str | None = None, count: int = 2, include_incomplete: bool = False) -> list[int]:
        """Ids of the ``count`` newest suites holding at least one run (newest first).

        Interrupted suites are skipped unless ``include_incomplete``.
        """
        ids = [s.id for s in self.suites(machine=machine) if s.runs and (s.complete or include_incomplete)]
        return ids[::-1][:count]

    @_sqlite_errors
    def resolve(self, ref: str, *, machine: str | None = None, include_incomplete: bool = False) -> int:
        """A run id from ``"latest"``, ``"previous"`` or a number; raises StoreError if absent."""
        if ref in ("latest", "previous"):
            ids = self.latest_ids(machine=machine, count=2, include_incomplete=include_incomplete)
            pos = 0 if ref == "latest" else 1
            if len(ids) <= pos:
                where = f" for machine {machine}" if machine else ""
                skipped = "" if include_incomplete else "; interrupted runs are skipped unless --include-incomplete"
                raise StoreError(f"no {ref} run{where} in {self.path} ({len(ids)} stored{skipped})")
            return ids[pos]
        try:
            suite_id = int(ref)
        except ValueError:
            raise StoreError(f"invalid run reference {ref!r}; accepted: a run id, latest or previous") from None
        if self._conn.execute("SELECT 1 FROM suites WHERE id = ?", (suite_id,)).fetchone() is None:
            raise StoreError(f"no stored run {suite_id} in {self.path}")
        return suite_id

    @_sqlite_errors
    def load(self, suite_id: int) -> ResultsFile:
        """A stored suite as a ResultsFile (runs whose environment differs carry their own env)."""
        complete = "s.completed_at IS NOT NULL" if self._has_completed_at else "1"
        row = self._conn.execute(
            f"SELECT s.created_at, s.torchgauge_version, s.env_id, e.env_json, {complete} FROM suites s"
            " JOIN environments e ON e.id = s.env_id WHERE s.id = ?",
            (suite_id,),
        ).fetchone()
        if row is None:
            raise StoreError(f"no stored run {suite_id} in {self.path}")
        created_at, version, env_id, env_json, done = row
        runs = [self._record(r, suite_env_id=env_id) for r in self._runs("WHERE r.suite_id = ?", (suite_id,))]
        return ResultsFile(
            env=self._json(env_json, dict, f"run {suite_id}'s environment"),
            runs=runs,
            created_at=created_at,
            torchgauge_version=version or "",
            complete=bool(done),
        )

    def _json(self, text: Any, kind: type, what: str) -> Any:
        """A JSON column's value of the expected type; garbage is a StoreError naming the row."""
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            value = None
        if not isinstance(value, kind):
            raise StoreError(f"{self.path}: {what} is not valid JSON of type {kind.__name__}")
        return value

    @_sqlite_errors
    def series(
        self,
        model: str,
        *,
        mode: str | None = None,
        device: str | None = None,
        precision: str | None = None,
        backend: str | None = None,
        machine: str | None = None,
    ) -> list[SeriesPoint]:
        """Every stored run of ``model`` (optionally one mode/device/...), oldest first."""
        where, args = ["r.model = ?"], [model]
        for column, value in (
            ("r.mode", mode),
            ("r.device", device),
            ("r.precision", precision),
            ("r.backend", backend),
            ("e.machine_fingerprint", machine),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        out = []
        for r in self._runs("WHERE " + " AND ".join(where), tuple(args)):
            rec = self._record(r, suite_env_id=None)
            out.append(
                SeriesPoint(
                    r["id"],
                    r["suite_id"],
                    r["suite_created_at"],
                    r["torch_version"],
                    r["torch_git_version"],
                    rec.status,
                    rec.metrics,
                    rec.config,
                    rec.env,
                    rec.error,
                )
            )
        return out

    def _runs(self, where: str, args: tuple) -> list[sqlite3.Row]:
        cur = self._conn.cursor()
        cur.row_factory = sqlite3.Row  # this cursor only: other queries keep plain tuples
        return cur.execute(
            "SELECT r.*, s.created_at AS suite_created_at, e.torch_version, e.torch_git_version,"
            " e.machine_fingerprint, e.env_json FROM runs r JOIN suites s ON s.id = r.suite_id"
            f" JOIN environments e ON e.id = r.env_id {where} ORDER BY r.suite_id, r.id",
            args,
        ).fetchall()

    def _record(self, row: sqlite3.Row, *, suite_env_id: int | None) -> RunRecord:
        try:
            return self._decode_record(row, suite_env_id=suite_env_id)
        except SchemaError as exc:  # a status written by a newer torchgauge
            raise StoreError(f"stored run {row['id']}: {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:  # garbage in a column
            raise StoreError(f"{self.path}: stored run {row['id']} is damaged: {type(exc).__name__}: {exc}") from None

    @staticmethod
    def _decode_record(row: sqlite3.Row, *, suite_env_id: int | None) -> RunRecord:
        metrics = json.loads(row["metrics_json"])
        samples = json.loads(row["samples_json"])
        if samples:
            metrics.setdefault("time_ms", {}).update(samples)
        config = RunConfig(
            model=row["model"],
            mode=row["mode"],
            device=row["device"],
            precision=row["precision"],
            backend=row["backend"],
            batch_size=row["requested_batch_size"],
            size=row["size"] or "full",
            repeat=row["repeat"] if row["repeat"] is not None else 10,
            warmup=row["warmup"] if row["warmup"] is not None else 3,
            seed=row["seed"] or 0,
            metrics=tuple(json.loads(row["requested_metrics_json"] or "[]")) or ("time", "memory"),
            options=json.loads(row["options_json"] or "{}"),
            model_kwargs=json.loads(row["model_kwargs_json"] or "{}"),
        )
        return RunRecord(
            config=config,
            status=row["status"],
            domain=row["domain"] or "",
            error=row["error"],
            metrics=metrics,
            batch_size=row["batch_size"],
            started_at=row["started_at"] or "",
            wall_s=row["wall_s"] or 0.0,
            env=None if suite_env_id is not None and row["env_id"] == suite_env_id else json.loads(row["env_json"]),
            model_code_hash=row["model_code_hash"] if "model_code_hash" in row.keys() else None,  # store schema >= 3
            threads=json.loads(row["threads_json"]) if "threads_json" in row.keys() and row["threads_json"] else None,
        )
