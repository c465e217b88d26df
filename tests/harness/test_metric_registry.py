"""The metric registry's quantities: their facts, look-up and validation."""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchgauge.harness import metrics as registry
from torchgauge.harness.metrics import Quantity, quantities, quantity
from torchgauge.stats.compare import DEFAULT_THRESHOLD
from torchgauge.stats.deterministic import COUNT_THRESHOLD, INSTRUCTIONS_THRESHOLD


def test_every_builtin_quantity_and_its_facts() -> None:
    facts = {q.name: (q.path, q.unit, q.better, q.deterministic, q.threshold, q.rule) for q in quantities()}
    assert facts == {
        "time": (("time_ms", "median"), "ms", "lower", False, DEFAULT_THRESHOLD, "rank_test"),
        "cpu_peak_mb": (("cpu_peak_mb",), "MiB", "lower", False, DEFAULT_THRESHOLD, "memory"),
        "gpu_peak_mb": (("gpu_peak_mb",), "MiB", "lower", False, DEFAULT_THRESHOLD, "memory"),
        "compile_s": (("compile", "compile_s"), "s", "lower", False, DEFAULT_THRESHOLD, "none"),
        "instructions": (
            ("instructions", "per_step"),
            "instructions/iter",
            "lower",
            True,
            INSTRUCTIONS_THRESHOLD,
            "exact",
        ),
        "op_counts": (("op_counts", "total"), "ops/iter", "lower", True, COUNT_THRESHOLD, "exact"),
        "flops": (("flops", "total"), "FLOP/iter", "lower", True, COUNT_THRESHOLD, "exact"),
        "tflops": (("flops", "tflops"), "TFLOP/s", "higher", False, DEFAULT_THRESHOLD, "none"),
        "leak": (("leak", "cpu_growth_mb_per_iter"), "MiB/iter", "lower", False, DEFAULT_THRESHOLD, "flag"),
        "cpu_tensor_peak_mb": (("tensor_memory", "cpu_peak_mb"), "MiB", "lower", True, DEFAULT_THRESHOLD, "memory"),
    }
    # the timed pass first; the counts in the order compare reports them
    assert [q.name for q in quantities()][:4] == ["time", "cpu_peak_mb", "gpu_peak_mb", "compile_s"]
    assert {q.ratio_key for q in quantities() if q.ratio_key} == {"time", "cpu_mem", "gpu_mem"}


def test_metrics_collected_once_per_configuration_follow_their_quantities() -> None:
    """run --rounds collects these in the first round only: every quantity compare judges is
    deterministic (flops' tflops is only shown); the timed pass and noisy or undeclared ones repeat."""
    from torchgauge.harness.metrics import collected_once, get_metric, list_metrics

    assert {m for m in list_metrics() if collected_once(m)} == {"instructions", "op_counts", "flops", "tensor_memory"}
    assert get_metric("flops").deterministic and not get_metric("leak").deterministic
    assert not get_metric("coverage").deterministic  # declares no quantity: nothing says so
    with pytest.raises(ValueError, match="unknown metric 'speed'"):
        collected_once("speed")


def test_quantity_lookup_and_value() -> None:
    time = quantity("time")
    assert time.record_key == "time_ms" and quantity("tflops").record_key == "flops"
    assert time.value({"time_ms": {"median": 3.0, "samples": [1.0, 2.0]}}) == 3.0
    assert time.value({"time_ms": {"samples": [5.0, None, 1.0, 2.0]}}) == 2.0  # no median stored: the samples'
    assert quantity("instructions").value({"instructions": {"per_step": 7}}) == 7.0
    for absent in ({}, {"flops": {"total": True}}, {"flops": {"total": float("nan")}}, {"flops": "x"}):
        assert quantity("flops").value(absent) is None
    with pytest.raises(ValueError, match="unknown metric 'speed'; accepted: time, cpu_peak_mb, gpu_peak_mb"):
        quantity("speed")


def test_quantity_rejects_bad_facts() -> None:
    with pytest.raises(ValueError, match="invalid rule 'guess'; accepted: rank_test, memory, exact, flag, none"):
        Quantity("x", ("x",), "s", rule="guess")
    with pytest.raises(ValueError, match="invalid better 'up'; accepted: lower, higher"):
        Quantity("x", ("x",), "s", better="up", rule="exact")
    with pytest.raises(ValueError, match="a rank test needs the path of its raw samples"):
        Quantity("x", ("x", "median"), "s")
    with pytest.raises(ValueError, match="needs a path"):
        Quantity("x", (), "s", rule="exact")


def test_duplicate_quantity_or_metric_raises(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_QUANTITIES", dict(registry._QUANTITIES))
    monkeypatch.setattr(registry, "_METRICS", dict(registry._METRICS))
    with pytest.raises(ValueError, match="quantity 'time' is already declared"):
        registry.register_metric("stopwatch", "again", quantities=[Quantity("time", ("sw",), "ms", rule="exact")])(
            lambda w, c, m: {}
        )
    assert "stopwatch" not in registry.list_metrics()  # nothing half-registered


def test_reading_the_registry_does_not_import_torch() -> None:
    # compare, the store and the CLI read metric facts; judging must not pay torch's import
    code = (
        "import sys; import torchgauge.harness, torchgauge.compare.regression, torchgauge.results.store; "
        "from torchgauge.harness.metrics import quantities; assert quantities(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
