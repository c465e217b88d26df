"""The ``tensor_memory`` metric: peak live CPU tensor bytes of a step, exact and identical run to run."""

from __future__ import annotations

import torch

from torchgauge.compare.regression import compare_results
from torchgauge.harness.metrics import get_metric, quantity
from torchgauge.harness.tensor_memory import live_bytes_peak, step_tensor_bytes
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord

MIB = 1024 * 1024


def test_running_sum_in_time_order_from_the_measured_step() -> None:
    assert live_bytes_peak([]) == (0, 0)
    assert live_bytes_peak([(2, -50), (1, 100), (3, 30)]) == (100, 80)
    # an earlier step sets the level: the measured one frees its 100 and allocates 60 at most
    assert live_bytes_peak([(1, 100), (5, -100), (6, 60), (7, -60)], since=5) == (0, -100)
    assert live_bytes_peak([(1, 100), (5, 60), (6, -100), (7, -60)], since=5) == (60, -100)


def _step() -> torch.Tensor:
    a = torch.ones(256, 1024)  # 1 MiB
    b = a * 2  # 1 MiB more: both live
    del a
    c = b + 1  # a freed, c allocated: still 2 MiB live
    return c.sum()


def test_a_step_allocates_the_same_bytes_every_time() -> None:
    peak, net = step_tensor_bytes(_step, "cpu")
    assert 2 * MIB <= peak < 2 * MIB + 4096 and net == 0  # the 2 MiB of tensors (+ the 4-byte sum)
    assert step_tensor_bytes(_step, "cpu") == (peak, net)


def test_the_quantity_is_judged_by_the_threshold_and_the_absolute_floor() -> None:
    q = quantity("cpu_tensor_peak_mb")
    assert (q.rule, q.deterministic, q.spread) == ("memory", True, 0.0)
    assert q in get_metric("tensor_memory").quantities

    def rf(*peaks: tuple[str, float]) -> ResultsFile:
        return ResultsFile(
            env={},
            runs=[
                RunRecord(RunConfig(m, mode="eval"), "ok", metrics={"tensor_memory": {"cpu_peak_mb": p}})
                for m, p in peaks
            ],
        )

    cmp = compare_results(
        rf(("big", 100.0), ("tiny", 1.0), ("same", 50.0)), rf(("big", 108.0), ("tiny", 2.5), ("same", 52.0))
    )
    flagged = {f.config.model: f for f in cmp.regressions}
    assert set(flagged) == {"big"} and flagged["big"].metric == "tensor_memory"  # +8% of 100 MiB: no spread to clear
    assert flagged["big"].detail["floor_mb"] == 2.0
    assert {f.config.model for f in cmp.unchanged if f.metric == "tensor_memory"} == {
        "tiny",
        "same",
    }  # +150% but 1.5 MiB; +4%


def test_a_run_collects_it_after_timing() -> None:
    import torchgauge

    w = torchgauge.create("resnet18", mode="eval", size="smoke")
    rec = torchgauge.measure(w, repeat=2, warmup=1, metrics=("time", "memory", "tensor_memory"))
    again = torchgauge.measure(w, repeat=2, warmup=1, metrics=("tensor_memory",))
    assert rec.metrics["tensor_memory"]["cpu_peak_mb"] > 0 and rec.metrics["tensor_memory"]["cpu_net_mb"] == 0
    assert again.metrics["tensor_memory"] == rec.metrics["tensor_memory"]
    assert quantity("cpu_tensor_peak_mb").value(rec.metrics) == rec.metrics["tensor_memory"]["cpu_peak_mb"]
