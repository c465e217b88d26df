"""ResNeSt: Zhang et al., "ResNeSt: Split-Attention Networks", 2020.

Follows timm's ``resnest.py`` and ``layers/split_attn.py`` (Apache-2.0; ported from the
authors' MXNet/PyTorch code, Apache-2.0) for ``resnest14d``: a ResNet-D (deep 3x3 stem,
average-pool shortcuts) whose bottleneck 3x3 conv is a radix-2 split-attention conv and
whose stride moves to a 3x3 average pool after it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, image_classification

from ..common.conv_blocks import make_divisible
from ..common.resnet import Bottleneck, ResNet
from ..common.torchbench_precision import TIMM_FACTORY
from .timm_step import timm_classification

__all__ = ["ResNestBottleneck", "SplitAttention"]


class SplitAttention(nn.Module):
    """kxk conv into ``radix`` splits, fused by a softmax over splits (per group and channel)."""

    def __init__(self, in_ch: int, out_ch: int, *, stride: int = 1, groups: int = 1, radix: int = 2) -> None:
        super().__init__()
        self.radix = radix
        self.groups = groups
        attn_ch = make_divisible(in_ch * radix * 0.25, 8, min_value=32)  # reduction 4, at least 32
        self.conv = nn.Conv2d(in_ch, out_ch * radix, 3, stride, 1, groups=groups * radix, bias=False)
        self.bn0 = nn.BatchNorm2d(out_ch * radix)
        self.act0 = nn.ReLU(inplace=True)
        self.fc1 = nn.Conv2d(out_ch, attn_ch, 1, groups=groups)
        self.bn1 = nn.BatchNorm2d(attn_ch)
        self.act1 = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(attn_ch, out_ch * radix, 1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act0(self.bn0(self.conv(x)))  # (B, R*C, H, W)
        b, rc, h, w = x.shape
        splits = x.reshape(b, self.radix, rc // self.radix, h, w)  # (B, R, C, H, W)
        gap = splits.sum(1).mean((2, 3), keepdim=True)  # (B, C, 1, 1)
        attn = self.fc2(self.act1(self.bn1(self.fc1(gap))))  # (B, R*C, 1, 1), grouped as (G, R, C/G)
        attn = attn.view(b, self.groups, self.radix, -1).transpose(1, 2)  # (B, R, G, C/G)
        attn = F.softmax(attn, dim=1).reshape(b, self.radix, rc // self.radix, 1, 1)
        return (splits * attn).sum(1)  # (B, C, H, W)


class ResNestBottleneck(Bottleneck):
    """:class:`Bottleneck` whose 3x3 conv is a split-attention conv followed, when strided, by a 3x3 avg pool."""

    def __init__(
        self,
        in_ch: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        norm_layer: Callable[[int], nn.Module] = nn.BatchNorm2d,
        radix: int = 2,
    ) -> None:
        super().__init__(in_ch, planes, 1, downsample, groups, base_width, norm_layer=norm_layer)
        width = self.conv1.out_channels
        # "avd": the stride is taken by an average pool after the split-attention conv.
        avd = nn.AvgPool2d(3, stride, 1) if stride > 1 else nn.Identity()
        self.conv2 = nn.Sequential(SplitAttention(width, width, groups=groups, radix=radix), avd)
        self.bn2 = nn.Identity()  # split attention normalises and activates its splits itself
        self.act2 = nn.Identity()


def _resnest(layers: tuple[int, ...], **kwargs) -> ResNet:
    return ResNet(ResNestBottleneck, layers, **{"stem_width": 32, "avg_down": True, **kwargs})


def _create_resnest(ctx: BuildContext, layers: tuple[int, ...], **kwargs) -> Workload:
    model = _resnest(layers, **kwargs)
    return image_classification(ctx, model, image_size=ctx.pick(224, 32), num_classes=model.head.fc.out_features)


_SOURCE = "Zhang et al., ResNeSt, 2020; timm resnest14d"


@register_model(
    domain="vision", task="classification", source=_SOURCE, batch_size=(32, 32), param_count=10_611_688
)  # fmt: skip
def resnest14d(ctx: BuildContext, **kwargs) -> Workload:
    """ResNeSt-14d (one block per stage, radix 2) at 224x224."""
    return _create_resnest(ctx, (1, 1, 1, 1), **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE + " via TorchBench's timm harness",
    batch_size=(32, 32), param_count=10_611_688,
    torchbench_precision=TIMM_FACTORY,
)  # fmt: skip
def timm_resnest(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's timm_resnest: ResNeSt-14d (timm resnest14d) at 224x224, timm's SGD step."""
    model = _resnest((1, 1, 1, 1), **kwargs)
    return timm_classification(ctx, model, image_size=ctx.pick(224, 32), num_classes=model.head.fc.out_features)
