"""ShuffleNetV2: Ma et al., "ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture
Design", 2018.

Follows torchvision's ``models/shufflenetv2.py`` (BSD-3-Clause) for the 1.0x model: a block
splits the channels in half, transforms one half (1x1 -> 3x3 depthwise -> 1x1), concatenates
and shuffles the channels; strided blocks transform both halves of an unsplit input.
"""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.conv_blocks import ClassifierHead, ConvNormAct, init_conv_weights
from ..common.torchbench_precision import TORCHVISION_FACTORY
from .torchvision_step import torchvision_classification

__all__ = ["ShuffleNetV2", "channel_shuffle"]


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave channels across ``groups``: (B, g*c, H, W) -> view (B, g, c) -> transpose -> (B, c*g, H, W).

    Example:
        >>> channel_shuffle(torch.arange(4.0).view(1, 4, 1, 1), 2).flatten().tolist()
        [0.0, 2.0, 1.0, 3.0]
    """
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleBlock(nn.Module):
    """ShuffleNetV2 unit; stride 2 doubles the channels and halves H and W."""

    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = out_ch // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                ConvNormAct(in_ch, in_ch, 3, stride, groups=in_ch, act_layer=None), ConvNormAct(in_ch, half, 1)
            )
        self.branch2 = nn.Sequential(
            ConvNormAct(in_ch if stride > 1 else half, half, 1),
            ConvNormAct(half, half, 3, stride, groups=half, act_layer=None),
            ConvNormAct(half, half, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            kept, transformed = x.chunk(2, dim=1)
            out = torch.cat([kept, self.branch2(transformed)], 1)
        else:
            out = torch.cat([self.branch1(x), self.branch2(x)], 1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; output stride 32."""

    def __init__(
        self,
        stage_repeats: tuple[int, ...] = (4, 8, 4),
        stage_channels: tuple[int, ...] = (24, 116, 232, 464, 1024),  # 1.0x: stem, 3 stages, head
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(ConvNormAct(3, stage_channels[0], 3, 2), nn.MaxPool2d(3, 2, 1))  # (B, 24, H/4, W/4)
        stages, in_ch = [], stage_channels[0]
        for repeats, out_ch in zip(stage_repeats, stage_channels[1:-1]):
            blocks = [ShuffleBlock(in_ch, out_ch, 2)] + [ShuffleBlock(out_ch, out_ch, 1) for _ in range(repeats - 1)]
            stages.append(nn.Sequential(*blocks))
            in_ch = out_ch
        self.stages = nn.Sequential(*stages)  # (B, 464, H/32, W/32)
        self.head_conv = ConvNormAct(in_ch, stage_channels[-1], 1)  # (B, 1024, H/32, W/32)
        self.head = ClassifierHead(stage_channels[-1], num_classes)
        init_conv_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.head_conv(self.stages(self.stem(x))))


@register_model(
    domain="vision", task="classification", source="Ma et al., ShuffleNet V2, 2018; torchvision shufflenet_v2_x1_0",
    batch_size=(128, 64), param_count=2_278_604,
    torchbench_precision=TORCHVISION_FACTORY,
)  # fmt: skip
def shufflenet_v2_x1_0(ctx: BuildContext, **kwargs) -> Workload:
    """ShuffleNetV2 1.0x at 224x224."""
    model = ShuffleNetV2(**kwargs)
    return torchvision_classification(ctx, model, image_size=ctx.pick(224, 32))
