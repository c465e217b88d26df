"""RegNetY: Radosavovic et al., "Designing Network Design Spaces", 2020.

Follows timm's ``regnet.py`` (Apache-2.0; after the authors' pycls, MIT) for ``regnety_016``
(RegNetY-1.6GF) and ``regnety_120`` (RegNetY-12GF, TorchBench's ``timm_regnet``): stage widths
come from the quantised linear rule ``w_j = w0 + wa * j`` snapped to powers of ``wm``; every
block is a grouped bottleneck with squeeze-excite (the "Y"), every stage strides by 2.
RegNetY-1.6GF is the same architecture as torchvision's ``regnet_y_1_6gf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, image_classification

from ..common.conv_blocks import ClassifierHead, ConvNormAct, SqueezeExcite, init_conv_weights
from ..common.torchbench_precision import TIMM_FACTORY
from .timm_step import timm_classification

__all__ = ["RegNet", "RegNetConfig", "regnet_stages"]


@dataclass(frozen=True)
class RegNetConfig:
    depth: int  # total number of blocks
    w0: int  # initial width
    wa: float  # slope of the linear width rule
    wm: float  # width multiplier between stages (log-space quantisation step)
    group_size: int  # channels per group of the 3x3 conv
    se_ratio: float = 0.25  # squeeze-excite width relative to the block's input width
    stem_ch: int = 32
    num_classes: int = 1000


def regnet_stages(cfg: RegNetConfig, quant: int = 8) -> list[tuple[int, int, int]]:
    """``(width, depth, group_size)`` per stage from the RegNet width rule.

    Example:
        >>> regnet_stages(RegNetConfig(depth=27, w0=48, wa=20.71, wm=2.65, group_size=24))
        [(48, 2, 24), (120, 6, 24), (336, 17, 24), (888, 2, 24)]
    """
    widths = []
    for j in range(cfg.depth):
        exponent = round(math.log((cfg.w0 + cfg.wa * j) / cfg.w0) / math.log(cfg.wm))
        widths.append(int(round(cfg.w0 * cfg.wm**exponent / quant) * quant))
    stages = []
    for width in sorted(set(widths)):
        depth = widths.count(width)
        group = min(cfg.group_size, width)
        stages.append((int(round(width / group) * group), depth, group))  # width: a multiple of the group
    return stages


class RegNetBlock(nn.Module):
    """1x1 -> grouped 3x3 (strided) -> squeeze-excite -> 1x1, plus a projected shortcut."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, group_size: int, se_ratio: float) -> None:
        super().__init__()
        self.conv1 = ConvNormAct(in_ch, out_ch, 1)
        self.conv2 = ConvNormAct(out_ch, out_ch, 3, stride, groups=out_ch // group_size)
        self.se = SqueezeExcite(out_ch, int(round(in_ch * se_ratio))) if se_ratio else nn.Identity()
        self.conv3 = ConvNormAct(out_ch, out_ch, 1, act_layer=None)
        projected = in_ch != out_ch or stride != 1
        self.shortcut = ConvNormAct(in_ch, out_ch, 1, stride, act_layer=None) if projected else nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv3(self.se(self.conv2(self.conv1(x))))
        return self.act(out + self.shortcut(x))


class RegNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; output stride 32."""

    def __init__(self, cfg: RegNetConfig) -> None:
        super().__init__()
        self.stem = ConvNormAct(3, cfg.stem_ch, 3, 2)  # (B, 32, H/2, W/2)
        stages, in_ch = [], cfg.stem_ch
        for width, depth, group in regnet_stages(cfg):  # each stage halves H and W
            blocks = [RegNetBlock(in_ch, width, 2, group, cfg.se_ratio)]
            blocks += [RegNetBlock(width, width, 1, group, cfg.se_ratio) for _ in range(depth - 1)]
            stages.append(nn.Sequential(*blocks))
            in_ch = width
        self.stages = nn.Sequential(*stages)  # (B, 888, H/32, W/32)
        self.head = ClassifierHead(in_ch, cfg.num_classes)
        init_conv_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


REGNETY_016 = RegNetConfig(depth=27, w0=48, wa=20.71, wm=2.65, group_size=24)
REGNETY_120 = RegNetConfig(depth=19, w0=168, wa=73.36, wm=2.37, group_size=112)  # timm's model_cfgs["regnety_120"]


def _create_regnet(ctx: BuildContext, cfg: RegNetConfig, **kwargs) -> Workload:
    cfg = replace(cfg, **kwargs)
    return image_classification(ctx, RegNet(cfg), image_size=ctx.pick(224, 32), num_classes=cfg.num_classes)


_SOURCE = "Radosavovic et al., RegNet, 2020; timm "


@register_model(
    domain="vision", task="classification", source=_SOURCE + "regnety_016", batch_size=(32, 32), param_count=11_202_430
)  # fmt: skip
def regnety_016(ctx: BuildContext, **kwargs) -> Workload:
    """RegNetY-1.6GF at 224x224."""
    return _create_regnet(ctx, REGNETY_016, **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE + "regnety_120 via TorchBench's timm harness",
    batch_size=(32, 32), param_count=51_822_544,
    torchbench_precision=TIMM_FACTORY,
)  # fmt: skip
def timm_regnet(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's timm_regnet: RegNetY-12GF (timm regnety_120) at 224x224, timm's SGD step."""
    # Smoke: the same stage depths (2, 5, 11, 1) at a quarter of the width and 32 px (3.5M weights).
    smoke = replace(REGNETY_120, w0=REGNETY_120.w0 // 4, wa=REGNETY_120.wa / 4, group_size=REGNETY_120.group_size // 4)
    cfg = replace(ctx.pick(REGNETY_120, smoke), **kwargs)
    return timm_classification(ctx, RegNet(cfg), image_size=ctx.pick(224, 32), num_classes=cfg.num_classes)
