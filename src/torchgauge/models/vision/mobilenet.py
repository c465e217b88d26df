"""MobileNetV2, MnasNet, MobileNetV3 and EfficientNet: one inverted-residual network, four tables.

- MobileNetV2: Sandler et al., "Inverted Residuals and Linear Bottlenecks", 2018.
- MnasNet: Tan et al., "Platform-Aware Neural Architecture Search for Mobile", 2019.
- MobileNetV3: Howard et al., "Searching for MobileNetV3", 2019.
- EfficientNet: Tan & Le, "Rethinking Model Scaling for Convolutional Neural Networks", 2019.

Layers and widths follow torchvision's ``mobilenetv2.py``, ``mnasnet.py``, ``mobilenetv3.py``
(BSD-3-Clause) and timm's ``efficientnet.py`` (``efficientnet_b0``, Apache-2.0), which also
builds all four from one block table. Each network is stem conv -> inverted-residual blocks ->
1x1 head conv -> global average pool -> classifier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.conv_blocks import ConvNormAct, InvertedResidual, SqueezeExcite, init_conv_weights, make_divisible
from ..common.torchbench_precision import TIMM_FACTORY, TORCHVISION_FACTORY
from .timm_step import timm_classification
from .torchvision_step import torchvision_classification

__all__ = ["MBlock", "MobileNet", "MobileNetConfig", "mobilenet_v2_config"]


@dataclass(frozen=True)
class MBlock:
    """One inverted-residual block, fully resolved."""

    in_ch: int
    out_ch: int
    kernel: int
    stride: int
    expanded_ch: int  # width of the depthwise conv (in_ch * expansion ratio)
    act: type[nn.Module]
    se_ch: int = 0  # squeeze-excite bottleneck width; 0 = no squeeze-excite


@dataclass(frozen=True)
class MobileNetConfig:
    blocks: tuple[MBlock, ...]
    stem_ch: int  # 3x3 stride-2 stem conv
    head_ch: int  # 1x1 conv after the last block
    act: type[nn.Module]  # activation of stem and head conv
    hidden_ch: int = 0  # MobileNetV3 only: Linear(head_ch, hidden_ch) + act before the classifier
    se_act: type[nn.Module] = nn.ReLU
    se_gate: type[nn.Module] = nn.Sigmoid  # MobileNetV3 uses the cheaper hard-sigmoid
    dropout: float = 0.2
    bn_momentum: float = 0.1  # MnasNet and MobileNetV3 train with slow BN statistics
    num_classes: int = 1000


def _blocks_by_ratio(
    in_ch: int,
    rows: tuple[tuple[int, int, int, int, int], ...],
    act: type[nn.Module],
    se_ratio: float = 0.0,
) -> tuple[MBlock, ...]:
    """Expand ``(expand_ratio, kernel, stride, repeats, out_ch)`` stage rows into blocks.

    Only a stage's first block strides; squeeze-excite width is ``se_ratio`` of the block's
    input (EfficientNet's rule).
    """
    blocks = []
    for ratio, kernel, stride, repeats, out_ch in rows:
        for i in range(repeats):
            se_ch = max(1, int(in_ch * se_ratio)) if se_ratio else 0
            blocks.append(MBlock(in_ch, out_ch, kernel, stride if i == 0 else 1, in_ch * ratio, act, se_ch))
            in_ch = out_ch
    return tuple(blocks)


class MobileNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; H and W divisible by 32."""

    def __init__(self, cfg: MobileNetConfig, block: Callable[..., nn.Module] = InvertedResidual) -> None:
        super().__init__()
        norm = partial(nn.BatchNorm2d, momentum=cfg.bn_momentum)
        se_layer = partial(SqueezeExcite, act_layer=cfg.se_act, gate_layer=cfg.se_gate)
        stem = ConvNormAct(3, cfg.stem_ch, 3, 2, act_layer=cfg.act, norm_layer=norm)  # (B, C, H/2, W/2)
        layers: list[nn.Module] = [stem]
        for b in cfg.blocks:
            layers.append(
                block(
                    b.in_ch,
                    b.out_ch,
                    kernel_size=b.kernel,
                    stride=b.stride,
                    expanded_ch=b.expanded_ch,
                    act_layer=b.act,
                    se_layer=partial(se_layer, reduced_ch=b.se_ch) if b.se_ch else None,
                    norm_layer=norm,
                )
            )
        last_ch = cfg.blocks[-1].out_ch
        head_conv = ConvNormAct(last_ch, cfg.head_ch, 1, act_layer=cfg.act, norm_layer=norm)  # (B, head_ch, H/32, W/32)
        layers.append(head_conv)
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        head: list[nn.Module] = []
        in_features = cfg.head_ch
        if cfg.hidden_ch:
            head += [nn.Linear(cfg.head_ch, cfg.hidden_ch), cfg.act(inplace=True)]
            in_features = cfg.hidden_ch
        head += [nn.Dropout(cfg.dropout), nn.Linear(in_features, cfg.num_classes)]
        self.classifier = nn.Sequential(*head)
        init_conv_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))  # (B, head_ch, 1, 1)
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2_config(act: type[nn.Module] = nn.ReLU6) -> MobileNetConfig:
    """MobileNetV2 1.0 (the quantisable variant swaps ReLU6 for fusable ReLU)."""
    # (expand_ratio, kernel, stride, repeats, out_ch): the paper's Table 2.
    rows = ((1, 3, 1, 1, 16), (6, 3, 2, 2, 24), (6, 3, 2, 3, 32), (6, 3, 2, 4, 64),
            (6, 3, 1, 3, 96), (6, 3, 2, 3, 160), (6, 3, 1, 1, 320))  # fmt: skip
    return MobileNetConfig(_blocks_by_ratio(32, rows, act), stem_ch=32, head_ch=1280, act=act)


def _mnasnet_config(alpha: float = 1.0) -> MobileNetConfig:
    # torchvision _get_depths: stem 32, then a depthwise-separable block to 16, then six stacks.
    c = [make_divisible(d * alpha, 8) for d in (32, 16, 24, 40, 80, 96, 192, 320)]
    rows = ((1, 3, 1, 1, c[1]), (3, 3, 2, 3, c[2]), (3, 5, 2, 3, c[3]), (6, 5, 2, 3, c[4]),
            (6, 3, 1, 2, c[5]), (6, 5, 2, 4, c[6]), (6, 3, 1, 1, c[7]))  # fmt: skip
    blocks = _blocks_by_ratio(c[0], rows, nn.ReLU)
    return MobileNetConfig(blocks, stem_ch=c[0], head_ch=1280, act=nn.ReLU, bn_momentum=1 - 0.9997)


def _mobilenet_v3_large_config() -> MobileNetConfig:
    re, hs = nn.ReLU, nn.Hardswish
    # (kernel, expanded, out, squeeze-excite, activation, stride), Table 1 of the paper.
    rows = (
        (3, 16, 16, False, re, 1), (3, 64, 24, False, re, 2), (3, 72, 24, False, re, 1),
        (5, 72, 40, True, re, 2), (5, 120, 40, True, re, 1), (5, 120, 40, True, re, 1),
        (3, 240, 80, False, hs, 2), (3, 200, 80, False, hs, 1), (3, 184, 80, False, hs, 1),
        (3, 184, 80, False, hs, 1), (3, 480, 112, True, hs, 1), (3, 672, 112, True, hs, 1),
        (5, 672, 160, True, hs, 2), (5, 960, 160, True, hs, 1), (5, 960, 160, True, hs, 1),
    )  # fmt: skip
    blocks, in_ch = [], 16
    for kernel, expanded, out, se, act, stride in rows:
        se_ch = make_divisible(expanded // 4, 8) if se else 0  # SE width from the expanded channels
        blocks.append(MBlock(in_ch, out, kernel, stride, expanded, act, se_ch))
        in_ch = out
    return MobileNetConfig(
        tuple(blocks), stem_ch=16, head_ch=960, act=hs, hidden_ch=1280, se_gate=nn.Hardsigmoid, bn_momentum=0.01
    )


def _efficientnet_b0_config(depth_multiplier: float = 1.0) -> MobileNetConfig:
    """EfficientNet-B0; ``depth_multiplier`` scales each stage's repeats, rounded up (B1: 1.1, as timm)."""
    rows = ((1, 3, 1, 1, 16), (6, 3, 2, 2, 24), (6, 5, 2, 2, 40), (6, 3, 2, 3, 80),
            (6, 5, 1, 3, 112), (6, 5, 2, 4, 192), (6, 3, 1, 1, 320))  # fmt: skip
    rows = tuple((e, k, s, math.ceil(r * depth_multiplier), c) for e, k, s, r, c in rows)
    blocks = _blocks_by_ratio(32, rows, nn.SiLU, se_ratio=0.25)
    return MobileNetConfig(blocks, stem_ch=32, head_ch=1280, act=nn.SiLU, se_act=nn.SiLU)


def _create_mobilenet(ctx: BuildContext, cfg: MobileNetConfig, **kwargs) -> Workload:
    cfg = replace(cfg, **kwargs)
    # Five stride-2 stages: at 32 px the last maps are 1x1, so batch-2 BatchNorms normalise two
    # values and MobileNetV2's weights overflow within 13 training steps; 64 px leaves 2x2.
    return torchvision_classification(ctx, MobileNet(cfg), image_size=ctx.pick(224, 64))


_SOURCE_V2 = "Sandler et al., MobileNetV2, 2018; torchvision mobilenet_v2"
_SOURCE_MNAS = "Tan et al., MnasNet, 2019; torchvision mnasnet1_0"
_SOURCE_V3 = "Howard et al., Searching for MobileNetV3, 2019; torchvision mobilenet_v3_large"
_SOURCE_EFF = "Tan & Le, EfficientNet, 2019; timm efficientnet_b0"


@register_model(
    domain="vision",
    task="classification",
    source=_SOURCE_V2,
    batch_size=(96, 16),
    param_count=3_504_872,
    torchbench_precision=TORCHVISION_FACTORY,
)
def mobilenet_v2(ctx: BuildContext, **kwargs) -> Workload:
    """MobileNetV2 1.0 at 224x224."""
    return _create_mobilenet(ctx, mobilenet_v2_config(), **kwargs)


@register_model(
    domain="vision",
    task="classification",
    source=_SOURCE_MNAS,
    batch_size=(32, 32),
    param_count=4_383_312,
    torchbench_precision=TORCHVISION_FACTORY,
)
def mnasnet1_0(ctx: BuildContext, **kwargs) -> Workload:
    """MnasNet-A1 with depth multiplier 1.0 at 224x224."""
    return _create_mobilenet(ctx, _mnasnet_config(1.0), **kwargs)


@register_model(
    domain="vision",
    task="classification",
    source=_SOURCE_V3,
    batch_size=(32, 32),
    param_count=5_483_032,
    torchbench_precision=TORCHVISION_FACTORY,
)
def mobilenet_v3_large(ctx: BuildContext, **kwargs) -> Workload:
    """MobileNetV3-Large 1.0 at 224x224."""
    return _create_mobilenet(ctx, _mobilenet_v3_large_config(), **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE_EFF, batch_size=(32, 64), param_count=5_288_548
)  # fmt: skip
def efficientnet_b0(ctx: BuildContext, **kwargs) -> Workload:
    """EfficientNet-B0 at 224x224."""
    return _create_mobilenet(ctx, _efficientnet_b0_config(), **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE_EFF + " via TorchBench's timm harness",
    batch_size=(32, 64), param_count=5_288_548,
    torchbench_precision=TIMM_FACTORY,
)  # fmt: skip
def timm_efficientnet(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's timm_efficientnet: EfficientNet-B0 (timm efficientnet_b0, no classifier dropout),
    timm's SGD step."""
    cfg = replace(_efficientnet_b0_config(), **{"dropout": 0.0, **kwargs})  # TorchBench passes drop_rate=0.0
    return timm_classification(ctx, MobileNet(cfg), image_size=ctx.pick(224, 64), num_classes=cfg.num_classes)
