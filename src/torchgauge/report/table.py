"""Rows of the results table shared by ``run`` and ``show``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..results.schema import RunRecord

__all__ = ["RESULT_COLUMNS", "RESULT_JUSTIFY", "error_line", "result_row", "result_rows"]

# Characters of an error's last line shown in the status cell (the file keeps it all).
STATUS_ERROR_CHARS = 80
# "noisy": the timed samples' spread is past stats.summary's noise threshold (median less certain).
RESULT_COLUMNS = (
    "model",
    "mode",
    "device",
    "batch",
    "median ms",
    "IQR ms",
    "noisy",
    "precision",
    "backend",
    "peak CPU MB",
    "peak GPU MB",
    "status",
)
RESULT_JUSTIFY = ("left", "left", "left", "right", "right", "right", "left", "left", "left", "right", "right", "left")
# The line of a traceback that names the exception: "RuntimeError: ...", "torch.OutOfMemoryError: ...".
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b")
# c10's "[enforce fail at alloc_cpu.cpp:127] err == 0. " prefix: a source location and the
# failed condition, before the message that says what happened.
_ENFORCE_PREFIX = re.compile(r"\[enforce fail at [^\]]*\]\s*.*?\.\s+")


def error_line(error: str) -> str:
    """The meaningful line of a run's error: the exception's own line, else the last line.

    An exception message may run over several lines (C++ allocator errors end in a bare
    ``err == 0.``), so the last line alone can say nothing; whitespace runs are collapsed.
    """
    lines = [ln.strip() for ln in error.strip().splitlines() if ln.strip()]
    named = [ln for ln in lines if _EXCEPTION_LINE.match(ln)]
    line = named[-1] if named else (lines[-1] if lines else "")
    return " ".join(_ENFORCE_PREFIX.sub("", line, count=1).split())


def result_row(record: RunRecord) -> list[Any]:
    """One table row; failed runs show the meaningful line of their error in the status cell."""
    t = record.metrics.get("time_ms") or {}
    status = record.status
    if record.status not in ("ok",) and record.error:
        status = f"{record.status}: {error_line(record.error)[:STATUS_ERROR_CHARS]}"
    return [
        record.config.model,
        record.config.mode,
        record.config.device,
        record.batch_size,
        t.get("median"),
        t.get("iqr"),
        _noisy_cell(t),
        record.config.precision,
        record.config.backend,
        record.metrics.get("cpu_peak_mb"),
        record.metrics.get("gpu_peak_mb"),
        status,
    ]


def _noisy_cell(time_ms: dict[str, Any]) -> str | None:
    if "noisy" not in time_ms:
        return None
    return "noisy" if time_ms["noisy"] else "no"


def result_rows(records: Iterable[RunRecord]) -> list[list[Any]]:
    return [result_row(r) for r in records]
