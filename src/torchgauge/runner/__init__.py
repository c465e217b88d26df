"""Isolated runner: one worker process per (model, config), with a timeout and a memory cap.

A model that raises, segfaults, exits, hangs or runs out of memory becomes a status
(``error``, ``oom``, ``timeout``, ``unsupported``, ``skipped``) with the last lines of its
error, and the suite goes on. Every finished run is handed to ``on_result`` as soon as it
ends (the CLI writes it to disk there), so nothing measured is lost to a later crash or
Ctrl-C.

Parts, each readable on its own:

- :mod:`.options`: :class:`RunnerOptions` (how to run: timeout, memory cap, jobs, threads).
- :mod:`.execution`: :func:`execute`, one run in this process; exceptions become statuses.
- :mod:`.worker_process`: the worker's start, its watchdogs and the parent's watch over it
  (no process of a run outlives it; docs/reliability.md lists what is tested).
- :mod:`.suite_loop`: :func:`run_suite`, pre-checks, worker groups and jobs at once.
"""

from __future__ import annotations

from .execution import ERROR_LINE_CHARS, ERROR_TAIL_LINES, classify_exception, execute
from .options import ISOLATIONS, RunnerOptions, worker_threads
from .suite_loop import POLL_INTERVAL_S, PRELOAD_ENV, PRELOAD_MODULES, run_suite
from .worker_process import LOG_TAIL_BYTES, WATCHDOG_GRACE_S, forkserver_dies_with_parent

__all__ = [
    "ERROR_LINE_CHARS",
    "ERROR_TAIL_LINES",
    "ISOLATIONS",
    "LOG_TAIL_BYTES",
    "POLL_INTERVAL_S",
    "PRELOAD_ENV",
    "PRELOAD_MODULES",
    "WATCHDOG_GRACE_S",
    "RunnerOptions",
    "classify_exception",
    "execute",
    "forkserver_dies_with_parent",
    "run_suite",
    "worker_threads",
]
