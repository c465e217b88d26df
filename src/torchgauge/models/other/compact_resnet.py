"""Compact ResNet (He et al., "Deep Residual Learning for Image Recognition", 2015) for this package.

Same module tree, shapes and parameter counts as torchvision's ``resnet.py`` (BSD-3-Clause):
resnet18 has 11,689,512 and resnet50 25,557,032 parameters at 1000 classes. The norm layer
is pluggable because the differential-privacy models need GroupNorm (per-sample gradients
forbid BatchNorm's batch statistics). Registers nothing: the MoCo and DP families build on it.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

__all__ = ["BasicBlock", "Bottleneck", "ResNet", "group_norm", "resnet"]

NormLayer = Callable[[int], nn.Module]


def group_norm(channels: int) -> nn.Module:
    """GroupNorm with min(32, C) groups: Opacus' replacement for BatchNorm."""
    return nn.GroupNorm(min(32, channels), channels)


def _conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)


def _shortcut(in_ch: int, out_ch: int, stride: int, norm: NormLayer) -> nn.Module | None:
    # Projection when the shape changes, identity otherwise.
    if stride == 1 and in_ch == out_ch:
        return None
    return nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), norm(out_ch))


class BasicBlock(nn.Module):
    """Two 3x3 convs: ``(B, C_in, H, W) -> (B, width, H/stride, W/stride)``."""

    expansion = 1

    def __init__(self, in_ch: int, width: int, stride: int, norm: NormLayer) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv3x3(in_ch, width, stride), norm(width)
        self.conv2, self.bn2 = _conv3x3(width, width), norm(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_ch, width, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, as torchvision "v1.5"), 1x1 expand: ``-> (B, 4 width, H/s, W/s)``."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int, norm: NormLayer) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(in_ch, width, 1, bias=False), norm(width)
        self.conv2, self.bn2 = _conv3x3(width, width, stride), norm(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out_ch, 1, bias=False), norm(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_ch, out_ch, stride, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; ``self.fc`` is the replaceable head."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: tuple[int, ...],
        num_classes: int = 1000,
        norm: NormLayer = nn.BatchNorm2d,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)  # (B, 64, H/2, W/2)
        self.bn1 = norm(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)  # (B, 64, H/4, W/4)
        in_ch, stages = 64, []
        for i, (width, depth) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(depth):
                blocks.append(block(in_ch, width, 2 if (i > 0 and j == 0) else 1, norm))
                in_ch = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages  # strides 1, 2, 2, 2
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        self.feature_dim = in_ch  # 512 * expansion
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))  # (B, 512 * expansion, H/32, W/32)
        return self.fc(torch.flatten(self.avgpool(x), 1))


_LAYOUTS = {18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)), 50: (Bottleneck, (3, 4, 6, 3))}


def resnet(depth: int, num_classes: int = 1000, norm: NormLayer = nn.BatchNorm2d) -> ResNet:
    """ResNet-18/34/50 in torchvision's layout.

    Example:
        >>> sum(p.numel() for p in resnet(50).parameters())
        25557032
    """
    if depth not in _LAYOUTS:
        raise ValueError(f"unsupported ResNet depth {depth}; accepted: {', '.join(map(str, _LAYOUTS))}")
    block, layers = _LAYOUTS[depth]
    return ResNet(block, layers, num_classes, norm)
