"""Rows of the results table shared by ``run`` and ``show``."""

from __future__ import annotations

from typing import Any, Iterable

from ..results.schema import RunRecord

__all__ = ["RESULT_COLUMNS", "RESULT_JUSTIFY", "result_row", "result_rows"]

# Characters of an error's last line shown in the status cell (the file keeps it all).
STATUS_ERROR_CHARS = 60
# "noisy": the timed samples' spread is past stats.summary's noise threshold (median less certain).
RESULT_COLUMNS = ("model", "mode", "device", "batch", "median ms", "IQR ms", "noisy", "precision", "backend",
                  "peak CPU MB", "peak GPU MB", "status")
RESULT_JUSTIFY = ("left", "left", "left", "right", "right", "right", "left", "left", "left", "right", "right", "left")


def result_row(record: RunRecord) -> list[Any]:
    """One table row; failed runs show the first line of their error in the status cell."""
    t = record.metrics.get("time_ms") or {}
    status = record.status
    if record.status not in ("ok",) and record.error:
        first = record.error.strip().splitlines()[-1][:STATUS_ERROR_CHARS]
        status = f"{record.status}: {first}"
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


