"""FLOPs metric: hand-computed Linear FLOPs, forward/backward split, TFLOP/s and peaks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgauge.harness.flop_counter import count_flops
from torchgauge.harness.flops import achieved_tflops, collect_flops, flops_record
from torchgauge.harness.peaks import PEAKS, find_device_peak, peak_tflops
from torchgauge.registry import create, load_model_file
from torchgauge.results.schema import RunConfig

B, I, O = 3, 8, 4  # noqa: E741  (batch, in features, out features)
MODELS = "tests/harness/counting_models.py"


def test_linear_forward_and_backward_hand_computed() -> None:
    lin = nn.Linear(I, O)
    x = torch.randn(B, I, requires_grad=True)
    c = count_flops(lambda: lin(x).sum().backward())
    assert c.forward == 2 * B * I * O  # one (B, I) x (I, O) product, multiply-adds count 2
    assert c.backward == 2 * (2 * B * I * O)  # grad of input and grad of weight
    assert c.total == c.forward + c.backward
    assert c.by_op == {"aten::mm": 2 * 2 * B * I * O, "aten::addmm": 2 * B * I * O}


def test_backward_skips_the_input_gradient_when_inputs_need_none() -> None:
    lin = nn.Linear(I, O)
    x = torch.randn(B, I)  # data, not a parameter: only the weight gradient is computed
    c = count_flops(lambda: lin(x).sum().backward())
    assert (c.forward, c.backward) == (2 * B * I * O, 2 * B * I * O)


def test_eval_step_is_all_forward_and_counts_match_across_runs() -> None:
    load_model_file(MODELS)
    w = create("counting_matmul", mode="eval", size="smoke")  # x (2, 64) @ w (64, 64)
    first = count_flops(w.step)
    assert (first.total, first.forward, first.backward) == (2 * 2 * 64 * 64, 2 * 2 * 64 * 64, 0)
    assert count_flops(w.step).by_op == first.by_op


def test_collect_flops_record_and_tflops_from_the_timed_median() -> None:
    load_model_file(MODELS)
    w = create("counting_matmul", mode="train", size="smoke")
    config = RunConfig(model="counting_matmul", mode="train", size="smoke", metrics=("time", "flops"))
    rec = collect_flops(w, config, {"time_ms": {"median": 2.0}})["flops"]
    fwd = 2 * 2 * 64 * 64  # forward mm; backward computes the weight gradient only
    assert (rec["total"], rec["forward"], rec["backward"]) == (2 * fwd, fwd, fwd)
    assert rec["by_op"] == {"aten::mm": 2 * fwd}
    assert rec["tflops"] == pytest.approx(2 * fwd / 2e-3 / 1e12)
    assert rec["device_name"] == "cpu" and rec["peak_tflops"] is None and rec["fraction_of_peak"] is None
    assert collect_flops(w, config, {})["flops"]["tflops"] is None  # no timed pass, no rate


def test_achieved_tflops_arithmetic() -> None:
    assert achieved_tflops(19_500_000_000_000, 1000.0) == pytest.approx(19.5)
    assert achieved_tflops(1_000_000_000, 1.0) == pytest.approx(1.0)  # 1 GFLOP in 1 ms
    assert achieved_tflops(10, None) is None
    assert achieved_tflops(10, 0.0) is None


def test_fraction_of_peak_uses_the_run_precision() -> None:
    c = count_flops(lambda: torch.randn(64, 64) @ torch.randn(64, 64))
    median_ms = c.total / 78e12 * 1e3  # a time at which the step runs at 78 TFLOP/s
    rec = flops_record(c, median_ms, "NVIDIA A100-SXM4-80GB", "tf32")
    assert rec["tflops"] == pytest.approx(78.0)
    assert rec["peak_tflops"] == 156.0
    assert rec["fraction_of_peak"] == pytest.approx(0.5)
    assert flops_record(c, median_ms, "NVIDIA A100-SXM4-80GB", "fp32")["fraction_of_peak"] == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("device", "precision", "peak"),
    [
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),  # the paper's Table 3
        ("NVIDIA A100-PCIE-40GB", "tf32", 156.0),
        ("NVIDIA A100 80GB PCIe", "bf16", 312.0),
        ("NVIDIA A100-SXM4-40GB", "amp", 312.0),
        ("AMD Instinct MI210", "fp32", 45.3),
        ("AMD Instinct MI210", "fp16", 181.0),
        ("AMD Instinct MI210", "tf32", None),
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 PCIe", "fp32", 51.0),
        ("NVIDIA H100 NVL", "tf32", 417.5),
        ("NVIDIA H200", "fp16", 989.4),
        ("NVIDIA L4", "fp16", 121.0),
        ("NVIDIA A10", "fp32", 31.2),
        ("Tesla T4", "fp16", 65.0),
        ("Tesla T4", "bf16", None),
        ("Tesla V100-SXM2-16GB", "fp16", 125.0),
        ("Tesla V100-PCIE-32GB", "fp32", 14.0),
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2),
    ],
)
def test_peak_lookup_by_device_name_and_precision(device: str, precision: str, peak: float | None) -> None:
    assert peak_tflops(device, precision) == peak


def test_similar_names_do_not_match_the_wrong_device() -> None:
    assert find_device_peak("NVIDIA A10").name == "A10"  # not A100
    assert find_device_peak("NVIDIA A100-SXM4-40GB").name == "A100"  # not A10
    for unknown in ("NVIDIA A10G", "NVIDIA L40S", "cpu", "NVIDIA GeForce RTX 3090"):
        assert find_device_peak(unknown) is None
    assert len({p.name for p in PEAKS}) == len(PEAKS)


def test_unknown_precision_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown precision 'fp8'; accepted: fp32, tf32"):
        peak_tflops("NVIDIA A100-SXM4-40GB", "fp8")
