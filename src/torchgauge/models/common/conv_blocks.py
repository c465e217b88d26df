"""Convolutional building blocks shared by the vision families and the ResNet of ``common.resnet``.

Shapes follow torchvision's ``ops/misc.py`` (``Conv2dNormActivation``, ``SqueezeExcitation``,
BSD-3-Clause) and timm's ``layers/helpers.py`` (``make_divisible``, Apache-2.0). Only blocks
used by two or more families live here; a family's own blocks stay in its file.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = [
    "ClassifierHead",
    "ConvNormAct",
    "InvertedResidual",
    "SqueezeExcite",
    "init_conv_weights",
    "make_divisible",
]

ActLayer = Callable[..., nn.Module]


def make_divisible(value: float, divisor: int = 8, min_value: int | None = None, round_limit: float = 0.9) -> int:
    """Round ``value`` to a multiple of ``divisor`` without going below ``round_limit * value``.

    Channel widths of the MobileNet/EfficientNet/RegNet families are kept divisible by 8
    so that grouped and depthwise convolutions map well onto hardware.

    Example:
        >>> make_divisible(32 * 0.75)
        24
    """
    min_value = min_value or divisor
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < round_limit * value:  # never round down by more than 10%
        rounded += divisor
    return rounded


class ConvNormAct(nn.Sequential):
    """Conv2d (no bias) -> BatchNorm2d -> activation, with "same" padding for odd kernels.

    Children are named ``0, 1, 2`` so quantisation can fuse them with
    ``fuse_modules_qat(block, ["0", "1", "2"])``.
    """

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        kernel_size: int = 3,
        stride: int = 1,
        *,
        groups: int = 1,
        act_layer: ActLayer | None = nn.ReLU,
        norm_layer: Callable[[int], nn.Module] = nn.BatchNorm2d,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(in_ch, out_ch, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
            norm_layer(out_ch),
        ]
        if act_layer is not None:
            layers.append(act_layer(inplace=True))
        super().__init__(*layers)


class SqueezeExcite(nn.Module):
    """Channel attention of Hu et al. 2018: x * gate(fc2(act(fc1(mean_hw(x)))))."""

    def __init__(
        self,
        channels: int,
        reduced_ch: int,
        *,
        act_layer: ActLayer = nn.ReLU,
        gate_layer: Callable[[], nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, reduced_ch, 1)  # 1x1 convs with bias, as in both references
        self.act = act_layer(inplace=True)
        self.fc2 = nn.Conv2d(reduced_ch, channels, 1)
        self.gate = gate_layer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.mean((2, 3), keepdim=True)  # (B, C, 1, 1)
        scale = self.fc2(self.act(self.fc1(scale)))
        return x * self.gate(scale)


class InvertedResidual(nn.Module):
    """MobileNetV2 inverted bottleneck, also MnasNet's, MobileNetV3's and EfficientNet's MBConv.

    1x1 expand (skipped when ``expanded_ch == in_ch``) -> kxk depthwise -> optional
    squeeze-excite -> 1x1 linear projection; identity shortcut when shapes allow.
    """

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        *,
        kernel_size: int = 3,
        stride: int = 1,
        expanded_ch: int,
        act_layer: ActLayer = nn.ReLU6,
        se_layer: Callable[[int], nn.Module] | None = None,
        norm_layer: Callable[[int], nn.Module] = nn.BatchNorm2d,
    ) -> None:
        super().__init__()
        self.use_residual = stride == 1 and in_ch == out_ch
        norm_act = {"act_layer": act_layer, "norm_layer": norm_layer}
        layers: list[nn.Module] = []
        if expanded_ch != in_ch:
            layers.append(ConvNormAct(in_ch, expanded_ch, 1, **norm_act))
        depthwise = ConvNormAct(expanded_ch, expanded_ch, kernel_size, stride, groups=expanded_ch, **norm_act)
        layers.append(depthwise)
        if se_layer is not None:
            layers.append(se_layer(expanded_ch))
        layers.append(ConvNormAct(expanded_ch, out_ch, 1, act_layer=None, norm_layer=norm_layer))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.use_residual else out


class ClassifierHead(nn.Module):
    """Global average pool -> flatten -> dropout -> linear: ``(B, C, H, W) -> (B, num_classes)``."""

    def __init__(self, in_ch: int, num_classes: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(torch.flatten(self.pool(x), 1)))


def init_conv_weights(module: nn.Module) -> None:
    """torchvision's ConvNet initialisation: He (fan-out) convs, unit norms, N(0, 0.01) linears."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
