"""op_counts metric: exact operator counts of tiny known steps, identical across runs."""

from __future__ import annotations

import torch

from torchgauge.harness.metrics import list_metrics
from torchgauge.harness.op_counts import collect_op_counts, count_ops
from torchgauge.registry import create, load_model_file
from torchgauge.results.schema import RunConfig

MODELS = "tests/harness/counting_models.py"


def test_forward_and_backward_ops_of_a_hand_written_step() -> None:
    x = torch.randn(4, 3)
    w = torch.randn(3, 5, requires_grad=True)

    def step() -> None:
        (x @ w).relu().sum().backward()

    assert count_ops(step) == {
        "aten::mm": 2,  # forward x @ w; backward x^T @ grad (x needs no gradient)
        "aten::t": 1,  # the x^T of the weight gradient
        "aten::relu": 1,
        "aten::threshold_backward": 1,  # relu's backward
        "aten::sum": 1,
        "aten::ones_like": 1,  # the seed gradient of the scalar loss
        "aten::expand": 1,  # sum's backward
        "aten::detach": 3,  # autograd bookkeeping (saved relu output, gradient accumulation)
    }


def test_training_step_of_a_registered_workload_is_identical_across_runs() -> None:
    load_model_file(MODELS)
    w = create("counting_matmul", mode="train", size="smoke")
    w.step()  # the metric runs after warm-up: SGD's momentum buffers exist by then
    config = RunConfig(model="counting_matmul", mode="train", size="smoke", metrics=("op_counts",))
    first = collect_op_counts(w, config, {})["op_counts"]
    second = collect_op_counts(w, config, {})["op_counts"]
    assert first == second
    by_op = first["by_op"]
    assert by_op["aten::mm"] == 2  # forward and the weight gradient
    assert by_op["aten::mse_loss"] == 1 and by_op["aten::mse_loss_backward"] == 1
    assert first["total"] == sum(by_op.values())
    assert list(by_op) == sorted(by_op)


def test_inference_mode_counts_the_composite_matmul() -> None:
    load_model_file(MODELS)
    w = create("counting_matmul", mode="eval", size="smoke")
    assert count_ops(w.step) == {"aten::matmul": 1}


def test_metric_is_registered() -> None:
    assert {"flops", "op_counts", "leak", "instructions"} <= set(list_metrics())
