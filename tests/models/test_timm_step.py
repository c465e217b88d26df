"""TorchBench's timm models (timm_*): timm's variants, TorchBench's inputs and timm's optimizer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchgauge
from torchgauge import capacity
from torchgauge.models.vision.regnet import REGNETY_120, regnet_stages
from torchgauge.models.vision.timm_step import timm_sgd
from torchgauge.registry import get_builder, get_spec
from torchgauge.workload import BuildContext, UnsupportedError


def _meta(name: str, mode: str):
    """The full-size workload built on the meta device: shapes and wiring without the memory."""
    spec = get_spec(name)
    ctx = BuildContext(name, mode, torch.device("meta"), spec.batch_size(mode), "full")
    with torch.device("meta"):
        return get_builder(name)(ctx)


class _Embedded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, 3, 4))  # 3-d, but listed by no_weight_decay()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.frozen = nn.Parameter(torch.zeros(4, 4), requires_grad=False)

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"}


def test_timm_sgd_is_nesterov_without_decay_on_biases_norms_and_listed_names() -> None:
    model = _Embedded()
    opt = timm_sgd(model)
    no_decay, decay = opt.param_groups
    assert {id(p) for p in no_decay["params"]} == {
        id(model.pos_embed),
        id(model.fc.bias),
        id(model.norm.weight),
        id(model.norm.bias),
    }
    assert [id(p) for p in decay["params"]] == [id(model.fc.weight)]  # the frozen weight is left out
    assert (no_decay["weight_decay"], decay["weight_decay"]) == (0.0, 1e-4)
    assert all(g["lr"] == 1e-4 and g["momentum"] == 0.9 and g["nesterov"] for g in opt.param_groups)


def test_timm_regnet_is_regnety_120() -> None:
    # RegNetY-12GF's stages (timm regnety_120, pycls RegNetY-12GF): depths 2/5/11/1, widths 224/448/896/2240.
    assert regnet_stages(REGNETY_120) == [(224, 2, 112), (448, 5, 112), (896, 11, 112), (2240, 1, 112)]


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_timm_nfnet_feeds_the_192_px_train_resolution_in_both_modes(mode: str) -> None:
    w = _meta("timm_nfnet", mode)
    assert w.inputs[0].shape == (128, 3, 192, 192)
    assert isinstance(w.module.head.dropout, nn.Identity)  # TorchBench creates it with drop_rate=0.0


def test_timm_targets_are_class_indices() -> None:
    w = torchgauge.create("timm_vision_transformer", mode="train", size="smoke")
    assert w.targets.dtype == torch.long and w.targets.shape == (2,) and int(w.targets.max()) < 1000
    no_decay = {id(p) for p in w.optimizer.param_groups[0]["params"]}
    assert id(w.module.pos_embed) in no_decay and id(w.module.cls_token) in no_decay
    before = w.module.head.weight.detach().clone()
    assert torch.isfinite(w.step())
    assert not torch.equal(before, w.module.head.weight)


def test_vit_giant_declares_its_full_size_memory(monkeypatch) -> None:
    spec = get_spec("timm_vision_transformer_large")
    assert (capacity.memory_need_gib(spec.extra, "train"), capacity.memory_need_gib(spec.extra, "eval")) == (44.0, 5.0)
    monkeypatch.setattr(capacity, "device_memory_gib", lambda device: 23.5)
    with pytest.raises(UnsupportedError, match="timm_vision_transformer_large train needs about 44 GiB"):
        torchgauge.create("timm_vision_transformer_large", mode="train", size="full")
    w = torchgauge.create("timm_vision_transformer_large", mode="train", size="smoke")  # smoke runs anywhere
    assert sum(p.numel() for p in w.module.parameters()) < 2_000_000
    assert w.inputs[0].shape == (2, 3, 32, 32)
