"""Measuring a built point: every configuration of a :class:`MeasureSpec` in one fresh process.

The point's own interpreter runs ``torchgauge run --in-process`` (the process is the
isolation) and writes a results file; this module reads back each configuration's values of
the followed metric, or why it has none.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...results.schema import ResultsFile
from .errors import BuildFailed, output_tail
from .metric_facts import record_values
from .ranges import PointEnv
from .spec import MeasureSpec

__all__ = ["DEFAULT_MEASURE_TIMEOUT_S", "MeasureFn", "Measurement", "measure_in_subprocess"]

DEFAULT_MEASURE_TIMEOUT_S = 1800.0
# Runs ``torchgauge run`` in any interpreter that can import torchgauge (no console script
# needed in a scratch venv).
_RUN_SNIPPET = "import sys; from torchgauge.cli import main; sys.exit(main(sys.argv[1:]))"

# label -> timing samples (ms) or [count] for a deterministic metric, or the run's error
Measurement = dict[str, "list[float] | str"]
MeasureFn = Callable[[PointEnv, MeasureSpec], Measurement]


def measure_in_subprocess(
    point_env: PointEnv, spec: MeasureSpec, *, timeout_s: float = DEFAULT_MEASURE_TIMEOUT_S
) -> Measurement:
    """Measure every config of ``spec`` in one fresh process under the point's interpreter.

    Raises:
        BuildFailed: the process produced no results file (torchgauge or torch cannot be
            imported there, a crash); the point is skipped.
    """
    with tempfile.TemporaryDirectory(prefix="torchgauge-bisect-run-") as tmp:
        output = os.path.join(tmp, "results.json")
        cmd = [point_env.python, "-c", _RUN_SNIPPET, *spec.run_args(output)]
        # bisection points are not history: keep them out of the user's run database
        env = {k: v for k, v in point_env.env.items() if k != "TORCHGAUGE_DB"}
        try:
            proc = subprocess.run(
                cmd,
                cwd=point_env.cwd,
                env=env,
                timeout=timeout_s,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            )
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"measurement timed out after {timeout_s:g} s") from None
        if not os.path.exists(output):
            raise BuildFailed(
                f"measurement exited with code {proc.returncode} without results\n{output_tail(proc.stdout)}"
            )
        try:
            results = ResultsFile.from_dict(json.loads(Path(output).read_text()))
        except ValueError as exc:  # SchemaError and JSONDecodeError are ValueErrors
            raise BuildFailed(f"unreadable results from the measurement: {exc}") from None
    out: Measurement = {}
    for record in results.runs:
        values = record_values(record.metrics, spec.metric)
        if record.ok and values:
            out[record.config.label()] = [float(v) for v in values]
        else:
            error = (record.error or f"no {spec.metric} values").splitlines()[-1]
            out[record.config.label()] = f"{record.status}: {error}"
    return out
