"""leak metric on a planted leaking workload versus the same workload without the leak."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torchgauge.config import RunOptions
from torchgauge.harness.leak import DEFAULT_LEAK_ITERATIONS, leak_iterations, sample_memory
from torchgauge.registry import get_spec, load_model_file
from torchgauge.results.schema import RunConfig
from torchgauge.runner import RunnerOptions, run_suite
from torchgauge.stats.leak import CPU_TOLERANCE_MB_PER_ITER, min_samples

MODELS = "tests/harness/counting_models.py"


def _run(model: str, iterations: int = 40) -> dict:
    # In a fresh worker, as the suite runs it: in this long-lived pytest process, memory freed
    # by earlier tests sits resident in the heap and would absorb the planted leak's growth.
    config = RunConfig(
        model=model,
        mode="train",
        size="smoke",
        repeat=3,
        warmup=3,
        metrics=("leak",),
        options={"leak_iterations": iterations},
    )
    (record,) = run_suite([config], RunnerOptions(timeout_s=120, model_files=(str(Path(MODELS).resolve()),)))
    assert record.status == "ok", record.error
    return record.metrics["leak"]


def test_planted_leak_is_flagged_with_its_growth_rate() -> None:
    rec = _run("counting_leaky")
    load_model_file(MODELS)
    leaked_mb = sys.modules[get_spec("counting_leaky").module].LEAK_FLOATS * 4 / 2**20  # 0.25 MiB
    assert rec["leaking"] is True and rec["cpu_leaking"] is True
    assert rec["iterations"] == 40 and len(rec["cpu_samples_mb"]) == 40
    assert rec["cpu_growth_mb_per_iter"] == pytest.approx(leaked_mb, rel=0.25)
    assert rec["tolerance_mb_per_iter"] == CPU_TOLERANCE_MB_PER_ITER


def test_clean_workload_is_not_flagged() -> None:
    rec = _run("counting_matmul")
    assert rec["leaking"] is False and rec["cpu_leaking"] is False
    assert rec["cpu_growth_mb_per_iter"] < CPU_TOLERANCE_MB_PER_ITER
    assert rec["gpu_growth_mb_per_iter"] is None and rec["gpu_leaking"] is None  # CPU run


def test_iterations_option_is_validated() -> None:
    assert leak_iterations(RunOptions()) == DEFAULT_LEAK_ITERATIONS
    assert leak_iterations(RunOptions(leak_iterations=20)) == 20
    for bad in (min_samples() - 1, "50", 12.5, True):
        with pytest.raises(ValueError, match=f"invalid leak_iterations .*; accepted: an integer >= {min_samples()}"):
            RunOptions.from_dict({"leak_iterations": bad})


def test_sample_memory_one_sample_per_iteration() -> None:
    calls = []
    series = sample_memory(lambda: calls.append(1), 7, "cpu")
    assert len(calls) == 7 and len(series.cpu_mb) == 7 and series.gpu_mb is None
    assert all(v > 0 for v in series.cpu_mb)
