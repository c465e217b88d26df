"""The dynamo harness's performance figures, computed from a baseline and a candidate's runs.

PyTorch's ``benchmarks/dynamo/common.py`` (``speedup_experiment`` and
``BenchmarkRunner.run_performance_test``) measures eager and the compiled model in one
process and reports, per model:

- ``speedup``: eager median step time / compiled median step time (> 1: compiled faster);
- ``abs_latency``: the compiled median step time in milliseconds;
- ``compilation_latency``: seconds of the compiled warm-up minus seconds of the eager
  warm-up over the same number of iterations (what compiling added);
- ``eager_peak_mem`` / ``dynamo_peak_mem``: peak memory in GB (10**9 bytes) — the CUDA
  allocator's peak on a GPU, the process's resident set on a CPU;
- ``compression_ratio``: ``eager_peak_mem / dynamo_peak_mem`` (> 1: compiled leaner),
  0.0 when the compiled peak is unknown.

A model whose compiled run failed is written as its ``write_csv_when_exception`` does: batch
size 0 and every figure 0.0, which the HUD and ``runner.py`` count as not passing. Here
the baseline is any backend (eager by default) and each side is its own isolated run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..results.schema import RunConfig, RunRecord
from .matching import USABLE_STATUSES, config_key, run_values

__all__ = [
    "BYTES_PER_MIB",
    "BYTES_PER_GB",
    "DYNAMO_MODES",
    "DynamoPerfRow",
    "dynamo_performance_rows",
    "suite_performance_rows",
    "with_eager_baseline",
]

BYTES_PER_MIB = 1024 * 1024  # the unit of torchgauge's *_peak_mb metrics
BYTES_PER_GB = 10**9  # the dynamo harness divides bytes by 10**9 (get_peak_memory)
# torchgauge mode -> the harness's name for it (--training / --inference; one CSV file each).
DYNAMO_MODES = {"train": "training", "eval": "inference"}
# Statuses for which the dynamo harness writes no row: it skips models it cannot run there.
_NOT_RUN = ("unsupported", "skipped")


@dataclass(frozen=True)
class DynamoPerfRow:
    """One line of the dynamo harness's performance CSV (units as there)."""

    dev: str  # device type: "cpu", "cuda"
    name: str  # model name
    batch_size: int  # the batch size run; 0 when the compiled run failed
    speedup: float  # baseline median / candidate median; 0.0 on failure
    abs_latency: float  # candidate median step time, ms
    compilation_latency: float  # s
    compression_ratio: float  # eager_peak_mem / dynamo_peak_mem, 0.0 when unknown
    eager_peak_mem: float  # GB
    dynamo_peak_mem: float  # GB

    @property
    def passed(self) -> bool:
        """The HUD's pass test: a row with a positive speedup."""
        return self.speedup > 0


def _peak_gb(record: RunRecord) -> float:
    values = run_values(record)
    mib = values["gpu_mem"] if record.config.device.startswith("cuda") else values["cpu_mem"]
    return 0.0 if mib is None else float(mib) * BYTES_PER_MIB / BYTES_PER_GB


def _warmup_s(record: RunRecord) -> list[float]:
    t = record.metrics.get("time_ms") or {}
    return [float(x) / 1e3 for x in t.get("warmup_samples") or [] if x is not None]


def _compilation_latency(base: RunRecord, cand: RunRecord) -> float:
    """Candidate warm-up minus baseline warm-up (s), as the harness; else the candidate's compile_s."""
    b, c = _warmup_s(base), _warmup_s(cand)
    if b and len(b) == len(c):
        return sum(c) - sum(b)
    compile_info = cand.metrics.get("compile")
    if isinstance(compile_info, dict) and compile_info.get("compile_s") is not None:
        return float(compile_info["compile_s"])
    return 0.0


def _failed(record: RunRecord) -> DynamoPerfRow:
    return DynamoPerfRow(record.config.device.split(":")[0], record.config.model, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def dynamo_performance_rows(
    baseline_runs: Sequence[RunRecord], candidate_runs: Sequence[RunRecord]
) -> dict[str, list[DynamoPerfRow]]:
    """Rows per harness mode (``"training"``, ``"inference"``; the harness writes one file per
    mode): one row per candidate run, in candidate order, paired with the baseline run of the
    same model, mode, device, precision and requested batch size.

    A candidate run that failed (or whose baseline is missing or failed, so no speedup
    exists) gives a failure row; unsupported and skipped runs give none. Passing the same
    runs as both sides (an eager-only ``run``) gives speedup 1.0 and compilation latency 0.
    """
    baseline = {config_key(r, without="backend"): r for r in baseline_runs}
    by_mode: dict[str, list[DynamoPerfRow]] = {}
    for cand in candidate_runs:
        if cand.status in _NOT_RUN:
            continue
        rows = by_mode.setdefault(DYNAMO_MODES[cand.config.mode], [])
        base = baseline.get(config_key(cand, without="backend"))
        if base is None or cand.status not in USABLE_STATUSES or base.status not in USABLE_STATUSES:
            rows.append(_failed(cand))
            continue
        base_ms, cand_ms = run_values(base)["time"], run_values(cand)["time"]
        if not base_ms or not cand_ms:
            rows.append(_failed(cand))
            continue
        eager_gb, dynamo_gb = _peak_gb(base), _peak_gb(cand)
        rows.append(
            DynamoPerfRow(
                dev=cand.config.device.split(":")[0],
                name=cand.config.model,
                batch_size=int(cand.batch_size or base.batch_size or 0),
                speedup=float(base_ms) / float(cand_ms),
                abs_latency=float(cand_ms),
                compilation_latency=_compilation_latency(base, cand),
                compression_ratio=eager_gb / dynamo_gb if dynamo_gb else 0.0,
                eager_peak_mem=eager_gb,
                dynamo_peak_mem=dynamo_gb,
            )
        )
    return by_mode


# RunConfig.options that belong to the compiled side only: its eager baseline drops them.
_CANDIDATE_ONLY_OPTIONS = ("compile_mode", "dynamic", "compile_scope", "accuracy")


def with_eager_baseline(configs: Sequence[RunConfig]) -> list[RunConfig]:
    """``configs`` with an eager run before each non-eager one (same model, batch, precision).

    The dynamo harness's ``--performance`` always times eager beside the compiled model;
    interleaving the pairs lets load drift hit both sides of a speedup alike.
    """
    out: list[RunConfig] = []
    for config in configs:
        if config.backend != "eager":
            out.append(config.with_(backend="eager", options=config.options.without(*_CANDIDATE_ONLY_OPTIONS)))
        out.append(config)
    return out


def suite_performance_rows(runs: Sequence[RunRecord]) -> dict[str, list[DynamoPerfRow]]:
    """Rows of a ``run`` suite: each non-eager run against its eager twin, or, when the suite
    ran only eager, every eager run against itself (speedup 1)."""
    eager = [r for r in runs if r.config.backend == "eager"]
    compiled = [r for r in runs if r.config.backend != "eager"]
    return dynamo_performance_rows(eager, compiled or eager)
