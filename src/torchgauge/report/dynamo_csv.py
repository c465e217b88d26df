"""Write the dynamo harness's performance CSV (the HUD's and ``runner.py``'s input format).

The format follows PyTorch's ``benchmarks/dynamo/common.py``: a header row
``dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio,eager_peak_mem,dynamo_peak_mem``
then one row per model, floats with six decimals (``output_csv``), ``\\n`` line endings,
one file per mode (the harness's ``..._training_...`` / ``..._inference_...`` files).
Units and meanings: :mod:`torchgauge.compare.dynamo_perf`.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import astuple
from pathlib import Path

from ..compare.dynamo_perf import DynamoPerfRow

__all__ = ["PERFORMANCE_HEADERS", "format_performance_csv", "performance_csv_paths", "write_performance_csv"]

PERFORMANCE_HEADERS = (
    "dev",
    "name",
    "batch_size",
    "speedup",
    "abs_latency",
    "compilation_latency",
    "compression_ratio",
    "eager_peak_mem",
    "dynamo_peak_mem",
)


def _cell(value: object) -> object:
    return f"{value:.6f}" if isinstance(value, float) else value


def format_performance_csv(rows: Sequence[DynamoPerfRow]) -> str:
    """The CSV text: header, then one line per row."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(PERFORMANCE_HEADERS)
    for row in rows:
        writer.writerow([_cell(v) for v in astuple(row)])
    return buf.getvalue()


def performance_csv_paths(path: str | os.PathLike, modes: Sequence[str]) -> dict[str, Path]:
    """Where each mode's file goes: ``path`` itself for one mode, else ``<stem>_<mode><suffix>``."""
    path = Path(path)
    if len(modes) == 1:
        return {modes[0]: path}
    return {m: path.with_name(f"{path.stem}_{m}{path.suffix or '.csv'}") for m in modes}


def write_performance_csv(path: str | os.PathLike, rows_by_mode: Mapping[str, Sequence[DynamoPerfRow]]) -> list[Path]:
    """Write one CSV per mode (atomically: temp file + rename); returns the paths written.

    With rows of one mode the file is ``path``; with both, ``<stem>_training.csv`` and
    ``<stem>_inference.csv`` beside it (model names must be unique within a file: the
    checking scripts look rows up by name). No rows at all still writes ``path`` with the header.
    """
    modes = list(rows_by_mode) or ["inference"]
    written = []
    for mode, target in performance_csv_paths(path, modes).items():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", newline="") as fh:
                fh.write(format_performance_csv(rows_by_mode.get(mode, ())))
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(target)
    return written
