"""A suite run as ``torchgauge run`` does it: the planned configurations run isolated, the
results file rewritten after each, and each finished run stored in the history database.

The command parses its arguments, plans with :func:`torchgauge.config.plan` and hands this
module printer callbacks; nothing here writes to the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..results.schema import ResultsFile, RunRecord

__all__ = ["SuiteRun", "open_history"]

Note = Callable[[str], None]


def open_history(target: str, env: dict[str, Any]) -> tuple[Any, int]:
    """(Store, stored run id) of a new suite in the history database ``target`` (a SQLite
    file or a ``postgresql://`` URL). Raises StoreError when it cannot be opened."""
    from .. import __version__
    from ..results.stores import open_store

    store = open_store(target)
    return store, store.begin_suite(env, source="run", torchgauge_version=__version__)


@dataclass
class SuiteRun:
    """The configurations of one suite run and what became of them so far.

    ``finished`` and ``not_stored`` stay readable when the run is interrupted, so the caller
    can say what was kept (:meth:`saved_message`).
    """

    configs: Sequence[RunConfig]
    output: Path
    store: Any = None  # history Store (results.stores.open_store), or None when not storing
    suite_id: int | None = None
    finished: list[RunRecord] = field(default_factory=list)
    not_stored: list[str] = field(default_factory=list)  # labels of runs the store refused

    def run(
        self,
        runner_options: Any,
        *,
        env: dict[str, Any],
        executor: Any,
        on_start: Callable[[RunConfig], None],
        on_result: Callable[[RunRecord, str], None],
        warn: Note,
        info: Note,
    ) -> ResultsFile:
        """Run every configuration; ``on_result(record, mark)`` sees each finished run with a
        mark (``"  (not stored)"`` or ``""``), ``warn``/``info`` the store's notes."""
        from ..suite import run_and_save

        def keep(record: RunRecord) -> None:
            self.finished.append(record)
            on_result(record, self._store(record, warn) if self.store is not None else "")

        results = run_and_save(
            self.configs, runner_options, self.output, env=env, on_start=on_start, on_result=keep, executor=executor
        )
        if self.store is not None:
            self._finish_stored(warn, info)
        return results

    def _store(self, record: RunRecord, warn: Note) -> str:
        """Store one run; a failure (a lock held too long, a damaged file) is a warning."""
        try:  # each run in its own transaction: a crash keeps the finished ones
            self.store.add_run(self.suite_id, record)
            return ""
        except Exception as exc:  # StoreError or worse: the results file still has the run
            self.not_stored.append(record.config.label())
            warn(f"{record.config.label()} not stored in {self.store.path}: {exc}")
            return "  (not stored)"

    def _finish_stored(self, warn: Note, info: Note) -> None:
        """Mark the stored suite complete and say where it is (or what it lacks)."""
        from ..results.store import StoreError

        try:
            self.store.finish_suite(self.suite_id)
        except StoreError as exc:
            warn(f"run {self.suite_id} in {self.store.path} stays marked incomplete: {exc}")
        missing = f"; {len(self.not_stored)} run(s) not stored: {', '.join(self.not_stored)}" if self.not_stored else ""
        (warn if self.not_stored else info)(f"stored as run {self.suite_id} in {self.store.path}{missing}")

    def saved_message(self, what: str) -> str:
        """What an interrupted run kept: ``interrupted by SIGINT: 3 of 10 runs finished, saved in ...``."""
        done = len(self.finished)
        total = len(self.configs)
        parts = [f"{what}: {done} of {total} run(s) finished and saved in {self.output} (marked incomplete)"]
        if self.store is not None:
            parts.append(f"{done - len(self.not_stored)} stored as incomplete run {self.suite_id} in {self.store.path}")
        return "; ".join(parts)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
