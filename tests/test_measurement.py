"""measure(): the record the library returns is the one the CLI stores."""

from __future__ import annotations

import pytest
import torch

import torchgauge
from torchgauge.harness.metrics import register_metric, validate_metrics
from torchgauge.registry import load_model_file


@pytest.fixture(autouse=True)
def _planted():
    load_model_file("tests/fixtures/planted_models.py")


def test_measure_returns_samples_and_summary() -> None:
    w = torchgauge.create("planted_ok", mode="eval", size="smoke")
    rec = torchgauge.measure(w, repeat=7, warmup=2)
    t = rec.metrics["time_ms"]
    assert rec.status == "ok" and rec.domain == "other" and rec.batch_size == 2
    assert len(t["samples"]) == 7 and len(t["warmup_samples"]) == 2
    assert t["median"] == sorted(t["samples"])[3]
    assert t["min"] == min(t["samples"]) and t["max"] == max(t["samples"]) and t["iqr"] >= 0
    assert rec.metrics["cpu_peak_mb"] > 0 and "cpu_delta_mb" in rec.metrics
    assert rec.config.repeat == 7 and rec.config.mode == "eval"
    assert rec.to_dict()["metrics"]["time_ms"]["samples"] == t["samples"]


def test_unknown_metric_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown metric 'bogus'; accepted: time, memory"):
        validate_metrics(("time", "bogus"))
    assert validate_metrics(("time", "time", "memory")) == ("time", "memory")


def test_extra_metric_runs_after_timing_and_sees_it() -> None:
    seen = {}

    @register_metric("planted_probe_metric", "test-only metric")
    def probe(workload, config, measured):
        seen.update(measured)
        return {"probe": workload.name}

    with pytest.raises(ValueError, match="already registered"):
        register_metric("planted_probe_metric", "again")(probe)
    w = torchgauge.create("planted_ok", mode="eval", size="smoke")
    rec = torchgauge.measure(w, repeat=2, warmup=0, metrics=("time", "planted_probe_metric"))
    assert rec.metrics["probe"] == "planted_ok" and "time_ms" in seen and "cpu_peak_mb" not in rec.metrics


def test_failing_extra_metric_keeps_the_timings() -> None:
    from torchgauge.workload import UnsupportedError

    @register_metric("planted_broken_metric", "test-only metric that raises")
    def broken(workload, config, measured):
        raise RuntimeError("planted metric failure")

    @register_metric("planted_unsupported_metric", "test-only metric that cannot run")
    def unsupported(workload, config, measured):
        raise UnsupportedError("needs a tool this machine lacks")

    w = torchgauge.create("planted_ok", mode="eval", size="smoke")
    rec = torchgauge.measure(
        w, repeat=3, warmup=0, metrics=("time", "planted_broken_metric", "planted_unsupported_metric")
    )
    assert rec.status == "ok" and len(rec.metrics["time_ms"]["samples"]) == 3
    assert rec.metrics["metric_errors"] == {
        "planted_broken_metric": "RuntimeError: planted metric failure",
        "planted_unsupported_metric": "unsupported: needs a tool this machine lacks",
    }


def test_diverged_training_keeps_timings_but_fails() -> None:
    rec = torchgauge.measure(torchgauge.create("planted_diverges", mode="train", size="smoke"), repeat=3, warmup=2)
    assert rec.status == "fail_accuracy"
    assert rec.error.startswith("training diverged: 2 parameter tensors hold NaN/inf after 5 fp32 train steps")
    assert "1.weight" in rec.error and len(rec.metrics["time_ms"]["samples"]) == 3


def test_finite_training_and_eval_pass() -> None:
    from torchgauge.measurement import nonfinite_parameters

    w = torchgauge.create("planted_ok", mode="train", size="smoke")
    assert torchgauge.measure(w, repeat=3, warmup=1).status == "ok" and nonfinite_parameters(w) == []
    eval_w = torchgauge.create("planted_diverges", mode="eval", size="smoke")
    with torch.no_grad():
        next(eval_w.module.parameters()).fill_(float("nan"))
    assert torchgauge.measure(eval_w, repeat=2, warmup=1).status == "ok"  # eval never trains: not checked
    assert nonfinite_parameters(eval_w) == ["1.weight"]


def test_nonfinite_parameters_finds_each_kind_of_bad_value_in_every_parameter_type() -> None:
    """The min/max check: NaN anywhere (not only at an end), +-inf, half precision, complex and
    empty parameters, as ``isfinite(p).all()`` would judge each."""
    from types import SimpleNamespace

    from torchgauge.measurement import nonfinite_parameters

    module = torch.nn.Module()
    values = {
        "fine": torch.linspace(-3, 3, 1000),
        "nan_inside": torch.ones(1000),
        "pos_inf": torch.zeros(10),
        "neg_inf_half": torch.zeros(10, dtype=torch.float16),
        "big_finite_half": torch.full((10,), 65504.0, dtype=torch.float16),
        "big_finite_double": torch.full((10,), 1e300, dtype=torch.float64),  # beyond float32: judged as float64
        "nan_bf16": torch.zeros(10, dtype=torch.bfloat16),
        "complex_fine": torch.ones(4, dtype=torch.complex64),
        "complex_inf": torch.ones(4, dtype=torch.complex64),
        "empty": torch.zeros(0),
    }
    values["nan_inside"][500] = float("nan")
    values["pos_inf"][3] = float("inf")
    values["neg_inf_half"][9] = float("-inf")
    values["nan_bf16"][0] = float("nan")
    values["complex_inf"][1] = complex(1.0, float("inf"))
    for name, value in values.items():
        module.register_parameter(name, torch.nn.Parameter(value, requires_grad=False))
    module.register_buffer("nan_buffer", torch.full((3,), float("nan")))  # buffers are not parameters
    expected = [n for n, p in module.named_parameters() if not torch.isfinite(p).all()]
    assert expected == ["nan_inside", "pos_inf", "neg_inf_half", "nan_bf16", "complex_inf"]
    assert nonfinite_parameters(SimpleNamespace(module=module)) == expected


def test_adaptive_repeats_stop_within_bounds_and_record_the_rule() -> None:
    from torchgauge.measurement import measure_run
    from torchgauge.results.schema import RunConfig

    workload = torchgauge.create("planted_ok", mode="eval", size="smoke")
    config = RunConfig(
        "planted_ok",
        mode="eval",
        size="smoke",
        repeat=6,
        warmup=1,
        metrics=("time",),
        options={"adaptive": {"target": 0.9, "max_repeat": 40}},
    )
    timing = measure_run(workload, config).metrics["time_ms"]
    stopping = timing["stopping"]
    assert 6 <= len(timing["samples"]) <= 40 and stopping["samples"] == len(timing["samples"])
    assert stopping["rule"] == "median_ci_relative_width" and stopping["stopped_by"] in ("interval", "max_repeat")
    strict = config.with_(repeat=3, options={"adaptive": {"target": 1e-9, "max_repeat": 12}})
    timing = measure_run(workload, strict).metrics["time_ms"]
    assert len(timing["samples"]) == 12 and timing["stopping"]["stopped_by"] == "max_repeat"


def test_adaptive_repeats_keep_the_cpu_series_and_a_stable_warmup_is_recorded() -> None:
    from torchgauge.measurement import measure_run
    from torchgauge.results.schema import RunConfig

    workload = torchgauge.create("planted_ok", mode="eval", size="smoke")
    options = {"adaptive": {"target": 0.9, "max_repeat": 12}, "stable_warmup": 0.999}
    config = RunConfig("planted_ok", mode="eval", size="smoke", repeat=6, warmup=5, metrics=("time",), options=options)
    timing = measure_run(workload, config).metrics["time_ms"]
    # the adaptive loop keeps the same series as a fixed count: compare --time-signal cpu works on it
    assert len(timing["cpu_samples"]) == len(timing["samples"]) and timing["undisturbed_fraction"] is not None
    warm = timing["warmup_stopping"]
    assert warm["rule"] == "consecutive_steps_within" and warm["steps"] == len(timing["warmup_samples"])
    assert len(timing["warmup_cpu_samples"]) == warm["steps"]
    # the pytest process runs OMP_NUM_THREADS=2 (conftest): CPU time adds the threads' waits, so wall is judged
    assert warm["signal"] == timing["stopping"]["signal"] == ("cpu" if torch.get_num_threads() == 1 else "wall")
    assert warm["min_warmup"] == 2 and warm["max_warmup"] == 5 and 2 <= warm["steps"] <= 5
    # (the rule's decisions on known series: tests/stats/test_adaptive.py; a real step's time is noisy)
    assert warm["stopped_by"] == ("stable" if warm["steps"] < 5 else warm["stopped_by"])
    fixed = measure_run(workload, config.with_(options={})).metrics["time_ms"]
    assert "warmup_stopping" not in fixed and "stopping" not in fixed and len(fixed["warmup_samples"]) == 5


def test_one_thread_cpu_runs_judge_cpu_time_as_compare_tests_it() -> None:
    from torchgauge.measurement import judged_signal, measure_run
    from torchgauge.results.schema import RunConfig

    workload = torchgauge.create("planted_ok", mode="eval", size="smoke")
    options = {"adaptive": {"target": 0.99, "max_repeat": 8}, "stable_warmup": 0.5}
    config = RunConfig("planted_ok", mode="eval", size="smoke", repeat=6, warmup=4, metrics=("time",), options=options)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert judged_signal(torch.device("cpu")) == "cpu"
        timing = measure_run(workload, config).metrics["time_ms"]
        torch.set_num_threads(2)
        assert judged_signal(torch.device("cpu")) == "wall" and judged_signal(torch.device("meta")) == "wall"
    finally:
        torch.set_num_threads(threads)
    stopping, warm = timing["stopping"], timing["warmup_stopping"]
    assert stopping["signal"] == warm["signal"] == "cpu" and stopping["samples"] == len(timing["cpu_samples"])
    from torchgauge.stats.adaptive import AdaptiveRule

    judged = AdaptiveRule(0.99, 6, 8).relative_width(timing["cpu_samples"])  # the record's width is CPU time's
    assert stopping["relative_width"] == pytest.approx(judged, abs=1e-6)


def test_divergence_counts_the_steps_that_ran() -> None:
    from torchgauge.measurement import measure_run
    from torchgauge.results.schema import RunConfig

    workload = torchgauge.create("planted_diverges", mode="train", size="smoke")
    options = {"adaptive": {"target": 0.99, "max_repeat": 4}, "stable_warmup": 0.999}
    config = RunConfig("planted_diverges", size="smoke", repeat=4, warmup=3, metrics=("time",), options=options)
    rec = measure_run(workload, config)
    ran = len(rec.metrics["time_ms"]["warmup_samples"]) + len(rec.metrics["time_ms"]["samples"])
    assert 6 <= ran <= 7 and f"after {ran} fp32 train steps" in rec.error  # what ran, however the rules ended


def test_measure_takes_repeat_and_warmup_and_measure_run_a_configuration() -> None:
    from torchgauge.measurement import config_for, measure_run

    workload = torchgauge.create("planted_ok", mode="eval", size="smoke")
    with pytest.raises(TypeError, match="config"):
        torchgauge.measure(workload, config=config_for(workload, 2, 1, ("time",)))  # one signature, not both
    record = measure_run(workload, config_for(workload, 4, 1, ("time",)))
    assert record.config.repeat == 4 and len(record.metrics["time_ms"]["samples"]) == 4
    assert record.domain == "other"  # copied from the registry entry when the workload was built


def test_timing_metrics_count_the_steps_that_held_their_cpu() -> None:
    from torchgauge.harness.timer import TimingSamples
    from torchgauge.measurement import timing_metrics

    ms = 1_000_000
    # steps 2 and 4 waited for a CPU (wall 3x their CPU time), the other three did not
    wall = (10 * ms, 30 * ms, 10 * ms, 31 * ms, 11 * ms)
    cpu = (10 * ms, 10 * ms, 10 * ms, 10 * ms, 10 * ms)
    t = timing_metrics(TimingSamples(wall_ns=wall, warmup_ns=(), cpu_ns=cpu))
    assert t["undisturbed_fraction"] == 0.6 and t["undisturbed_median"] == 10.0
    assert "undisturbed_fraction" not in timing_metrics(TimingSamples(wall_ns=wall, warmup_ns=()))
