"""Smoke sizes narrow widths, never layers: the same modules, fewer weights (issue 20).

The models whose smoke size shrinks widths (channel multipliers, filters, hidden sizes) must
build, at smoke, exactly the module types and counts of the full-size network. The full
network is built on the meta device, so its weights are never allocated.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import torchgauge
from torchgauge.registry import get_builder, get_spec
from torchgauge.workload import BuildContext

# Models whose smoke size narrows widths and keeps depth.
WIDTH_ONLY_SMOKE = [
    "alexnet",
    "vgg16",
    "densenet121",
    "resnet18",
    "resnet152",
    "resnext50_32x4d",
    "dcgan",
    "pytorch_stargan",
    "pytorch_CycleGAN_and_pix2pix",
    "Background_Matting",
    "pytorch_unet",
    "retinanet_r_50_fpn",
    "detectron2_fcos_r_50_fpn",
    "yolov3",
    "yolov3_416",
    "doctr_det_predictor",
    "doctr_reco_predictor",
    "LearningToPaint",
    "tts_angular",
]


# Their builders draw synthetic targets or episodes from real tensor values (``tolist``, ``item``),
# which the meta device cannot give: their full networks are allocated on the CPU.
FULL_ON_CPU = {"retinanet_r_50_fpn", "detectron2_fcos_r_50_fpn", "yolov3_416", "doctr_det_predictor", "LearningToPaint"}


def _full_module(name: str) -> torch.nn.Module:
    if name in FULL_ON_CPU:
        return torchgauge.create(name, mode="eval", size="full", batch_size=1).module
    spec = get_spec(name)
    ctx = BuildContext(name, "eval", torch.device("meta"), spec.batch_size("eval"), "full")
    with torch.device("meta"):
        return get_builder(name)(ctx).module


def _module_census(module: torch.nn.Module) -> Counter:
    return Counter(type(m).__name__ for m in module.modules())


@pytest.mark.parametrize("name", WIDTH_ONLY_SMOKE)
def test_smoke_keeps_every_layer_and_has_fewer_weights(name: str) -> None:
    full = _full_module(name)
    smoke = torchgauge.create(name, mode="eval", size="smoke").module
    assert _module_census(smoke) == _module_census(full), f"{name}: smoke changed the layers"
    full_weights = sum(p.numel() for p in full.parameters())
    smoke_weights = sum(p.numel() for p in smoke.parameters())
    assert smoke_weights * 4 <= full_weights, f"{name}: smoke keeps {smoke_weights:,} of {full_weights:,} weights"
