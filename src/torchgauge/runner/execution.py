"""One run in this process: build, configure, measure; every exception becomes a status.

This is what a worker process runs for each configuration (and what ``isolate=False`` runs in
the suite's own process). The record also gets the hash of its model's code here, where the
code that ran is the code on disk (:mod:`torchgauge.model_code`).
"""

from __future__ import annotations

import time
import traceback

from ..results.schema import RunConfig, RunRecord

__all__ = ["ERROR_LINE_CHARS", "ERROR_TAIL_LINES", "classify_exception", "error_tail", "execute"]

# Lines of a traceback or worker log kept in a record's ``error``.
ERROR_TAIL_LINES = 20
# Characters of one such line kept (its start and end): a model that prints megabytes on
# one line must not put them into the results file, every rewrite of it and the database.
ERROR_LINE_CHARS = 2000

_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "defaultcpuallocator",
    "std::bad_alloc",
)


def _clip_line(line: str, limit: int = ERROR_LINE_CHARS) -> str:
    if len(line) <= limit:
        return line
    half = limit // 2
    return f"{line[:half]} [... {len(line) - 2 * half:,} characters cut ...] {line[-half:]}"


def error_tail(text: str, n: int = ERROR_TAIL_LINES) -> str:
    """The last ``n`` non-blank lines, each clipped to ERROR_LINE_CHARS, saying what was cut."""
    lines = [ln for ln in text.rstrip().splitlines() if ln.strip()]
    kept = [_clip_line(ln) for ln in lines[-n:]]
    if len(lines) > n:
        kept.insert(0, f"[... {len(lines) - n} earlier lines cut ...]")
    return "\n".join(kept)


def classify_exception(exc: BaseException) -> str:
    """Status for an exception raised by a run: ``unsupported``, ``oom`` or ``error``."""
    from ..workload import UnsupportedError

    if isinstance(exc, UnsupportedError):
        return "unsupported"
    if isinstance(exc, MemoryError):
        return "oom"
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    message = str(exc).lower()
    if isinstance(exc, RuntimeError) and any(m in message for m in _OOM_MARKERS):
        return "oom"
    return "error"


def execute(config: RunConfig) -> RunRecord:
    """Build, configure and measure one run in this process; exceptions become statuses.

    The record (a failed one too, once the model is known) carries the hash of the model's code.
    """
    from ..configure import apply_config, build_workload
    from ..measurement import measure_run
    from ..model_code import model_code_hash
    from ..registry import get_spec

    code_hash = None
    try:
        code_hash = model_code_hash(get_spec(config.model).module)
        t_build = time.perf_counter()
        workload = apply_config(build_workload(config), config)
        build_s = time.perf_counter() - t_build
        record = measure_run(workload, config)
        record.phases_s = {"build": round(build_s, 4), **record.phases_s}
        record.model_code_hash = code_hash
        if config.options.accuracy:
            del workload  # the check builds fresh workloads from the seed; free this one first
            _add_accuracy(record)
        return record
    except Exception as exc:  # a failing model never takes the suite down
        status = classify_exception(exc)
        if status == "unsupported":
            error = str(exc)
        else:
            error = error_tail(traceback.format_exc())
        return RunRecord(config, status, error=error, model_code_hash=code_hash)


def _add_accuracy(record: RunRecord) -> None:
    """Run the --accuracy check in its own pass; a failed check sets the run's status."""
    from ..accuracy import check_accuracy

    try:
        accuracy = check_accuracy(record.config)
    except Exception as exc:  # the timing stands; say why it could not be judged
        # The first line: dispatcher errors end in a long list of registered kernels.
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        record.error = f"accuracy check could not run: {type(exc).__name__}: {first}"
        return
    record.metrics["accuracy"] = accuracy
    if accuracy["status"] != "pass":  # fail_accuracy or eager_nondeterministic
        record.status = accuracy["status"]
        record.error = accuracy.get("reason")
