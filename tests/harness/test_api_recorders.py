"""Coverage recorders on tiny hand-written functions with known API and op sets."""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.harness.api_recorders import api_name, api_universe, module_classes, op_name, record_coverage


def test_universe_is_the_overridable_api() -> None:
    universe = api_universe()
    assert 1300 < len(universe) < 1600  # 1,381 on torch 2.13
    assert {"torch.add", "torch.Tensor.add", "torch.nn.functional.relu", "torch.Tensor.shape.__get__"} <= universe
    assert api_name(torch.add) == "torch.add"


def test_python_apis_including_a_tensor_method_and_property() -> None:
    x = torch.randn(4, 3)
    w = torch.randn(5, 3)

    def fn():
        y = torch.nn.functional.linear(x, w)
        return torch.relu(y).sum(dim=1).shape

    apis, ops = record_coverage(fn)
    assert set(apis) == {"torch.nn.functional.linear", "torch.relu", "torch.Tensor.sum", "torch.Tensor.shape.__get__"}
    assert {"aten::linear", "aten::relu", "aten::sum"} & set(ops) or {"aten::addmm", "aten::relu", "aten::sum"} <= set(
        ops
    )


def test_backward_ops_are_recorded_and_overloads_folded() -> None:
    x = torch.randn(6, requires_grad=True)

    def fn():
        y = (x * 2.0 + x * x).sum()
        y.backward()

    apis, ops = record_coverage(fn)
    assert set(apis) == {"torch.Tensor.mul", "torch.Tensor.add", "torch.Tensor.sum", "torch.Tensor.backward"}
    assert "aten::mul" in ops and "aten::add" in ops
    assert ops["aten::mul"] >= 3  # two forward products plus at least one in backward
    assert any(name in ops for name in ("aten::expand", "aten::ones_like", "aten::fill"))  # backward of sum
    assert all("." not in name.split("::")[1] for name in ops)  # overload names folded


def test_op_name_folds_overloads() -> None:
    assert op_name(torch.ops.aten.add.Tensor) == "aten::add"
    assert op_name(torch.ops.aten.add.Scalar) == "aten::add"


def test_module_classes_only_torch_nn() -> None:
    class Mine(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())

    assert module_classes(Mine()) == [
        "torch.nn.modules.activation.ReLU",
        "torch.nn.modules.container.Sequential",
        "torch.nn.modules.conv.Conv2d",
    ]
