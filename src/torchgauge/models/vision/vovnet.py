"""VoVNet: Lee et al., "An Energy and GPU-Computation Efficient Backbone Network for Real-Time
Object Detection", 2019.

Follows timm's ``vovnet.py`` (Apache-2.0, after the authors' VoVNet-Detectron2, Apache-2.0)
for ``vovnet39a``: one-shot aggregation (OSA) blocks run five 3x3 convs in a chain and
concatenate the block input with every intermediate output once, then a 1x1 conv fuses them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, image_classification

from ..common.conv_blocks import ClassifierHead, ConvNormAct, init_conv_weights
from ..common.torchbench_precision import TIMM_FACTORY
from .timm_step import timm_classification

__all__ = ["OSABlock", "VoVNet", "VoVNetConfig"]


@dataclass(frozen=True)
class VoVNetConfig:
    stem_ch: tuple[int, int, int] = (64, 64, 128)
    conv_ch: tuple[int, ...] = (128, 160, 192, 224)  # width of the chained 3x3 convs per stage
    out_ch: tuple[int, ...] = (256, 512, 768, 1024)  # width after the 1x1 aggregation conv
    blocks_per_stage: tuple[int, ...] = (1, 1, 2, 2)  # VoVNet-39
    layers_per_block: int = 5
    num_classes: int = 1000


class OSABlock(nn.Module):
    """x -> conv_1 -> ... -> conv_n; 1x1 conv over cat(x, conv_1, ..., conv_n)."""

    def __init__(self, in_ch: int, mid_ch: int, out_ch: int, num_layers: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(ConvNormAct(in_ch if i == 0 else mid_ch, mid_ch, 3) for i in range(num_layers))
        self.concat_conv = ConvNormAct(in_ch + num_layers * mid_ch, out_ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for conv in self.convs:
            features.append(conv(features[-1]))
        return self.concat_conv(torch.cat(features, dim=1))  # (B, out_ch, H, W)


class VoVNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; output stride 32."""

    def __init__(self, cfg: VoVNetConfig) -> None:
        super().__init__()
        s = cfg.stem_ch
        self.stem = nn.Sequential(
            ConvNormAct(3, s[0], 3, 2), ConvNormAct(s[0], s[1], 3), ConvNormAct(s[1], s[2], 3, 2)
        )  # (B, 128, H/4, W/4)
        stages, in_ch = [], s[2]
        for i, (mid_ch, out_ch, num_blocks) in enumerate(zip(cfg.conv_ch, cfg.out_ch, cfg.blocks_per_stage)):
            # The stem already reduced by 4; later stages open with a 3x3/2 max pool.
            layers: list[nn.Module] = [nn.MaxPool2d(3, 2, ceil_mode=True)] if i > 0 else []
            for j in range(num_blocks):
                layers.append(OSABlock(in_ch if j == 0 else out_ch, mid_ch, out_ch, cfg.layers_per_block))
            stages.append(nn.Sequential(*layers))
            in_ch = out_ch
        self.stages = nn.Sequential(*stages)  # (B, 1024, H/32, W/32)
        self.head = ClassifierHead(in_ch, cfg.num_classes)
        init_conv_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def _create_vovnet(ctx: BuildContext, cfg: VoVNetConfig, **kwargs) -> Workload:
    cfg = replace(cfg, **kwargs)
    return image_classification(ctx, VoVNet(cfg), image_size=ctx.pick(224, 32), num_classes=cfg.num_classes)


_SOURCE = "Lee et al., VoVNet, 2019; timm vovnet39a"


@register_model(
    domain="vision", task="classification", source=_SOURCE, batch_size=(32, 32), param_count=22_600_296
)  # fmt: skip
def vovnet39(ctx: BuildContext, **kwargs) -> Workload:
    """VoVNet-39 (timm vovnet39a) at 224x224."""
    return _create_vovnet(ctx, VoVNetConfig(), **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE + " via TorchBench's timm harness",
    batch_size=(32, 32), param_count=22_600_296,
    torchbench_precision=TIMM_FACTORY,
)  # fmt: skip
def timm_vovnet(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's timm_vovnet: VoVNet-39 (timm vovnet39a) at 224x224, timm's SGD step."""
    full = VoVNetConfig()
    # Smoke: the same stages and OSA blocks at a quarter of the width (1.6M weights instead of 22.6M).
    smoke = replace(full, **{f: tuple(c // 4 for c in getattr(full, f)) for f in ("stem_ch", "conv_ch", "out_ch")})
    cfg = replace(ctx.pick(full, smoke), **kwargs)
    return timm_classification(ctx, VoVNet(cfg), image_size=ctx.pick(224, 32), num_classes=cfg.num_classes)
