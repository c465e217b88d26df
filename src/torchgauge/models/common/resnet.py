"""ResNet and ResNeXt: He et al., "Deep Residual Learning for Image Recognition", 2015;
Xie et al., "Aggregated Residual Transformations for Deep Neural Networks", 2017.

Layers, names and initialisation follow torchvision's ``models/resnet.py`` (BSD-3-Clause):
stride on the 3x3 conv of the bottleneck (ResNet v1.5), no zero-init of the last BN. The
class also takes timm's ``deep`` stem and average-pool shortcut (ResNet-D, Apache-2.0) so
that ResNeSt (``vision.resnest``) can reuse it with its own block. The norm layer is pluggable
(torchvision's ``norm_layer``): the differential-privacy models use GroupNorm, because
per-sample gradients forbid BatchNorm's batch statistics.

Shared by the vision families (``vision.resnet`` registers the classifiers; ResNeSt, the
quantized ResNet-50, DBNet's backbone) and by ``other`` models that use a ResNet encoder
(MoCo, DP-SGD on CIFAR-10).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .conv_blocks import ClassifierHead, init_conv_weights

__all__ = ["SMOKE_WIDTH_MULT", "BasicBlock", "Bottleneck", "ResNet", "group_norm", "resnet"]

NormLayer = Callable[[int], nn.Module]

# Smoke width of the ResNet family: a quarter of every stage's planes. The weights (60M for
# ResNet-152), not the 32 px smoke images, set the cost of a smoke step; a quarter of the width
# is a sixteenth of the weights, with every block, norm and activation kept.
SMOKE_WIDTH_MULT = 0.25


def group_norm(channels: int) -> nn.Module:
    """GroupNorm with min(32, C) groups: Opacus' replacement for BatchNorm."""
    return nn.GroupNorm(min(32, channels), channels)


class BasicBlock(nn.Module):
    """Two 3x3 convs (ResNet-18/34); ``groups`` and ``base_width`` must keep their defaults."""

    expansion = 1

    def __init__(
        self,
        in_ch: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        norm_layer: NormLayer = nn.BatchNorm2d,
    ) -> None:
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock supports only groups=1 and base_width=64")
        self.conv1 = nn.Conv2d(in_ch, planes, 3, stride, 1, bias=False)
        self.bn1 = norm_layer(planes)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.act2 = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.act2(out + shortcut)


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (strided, grouped for ResNeXt) -> 1x1 expand by 4."""

    expansion = 4

    def __init__(
        self,
        in_ch: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        norm_layer: NormLayer = nn.BatchNorm2d,
    ) -> None:
        super().__init__()
        width = int(planes * base_width / 64) * groups  # ResNeXt-50 32x4d: 128 at planes=64
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = norm_layer(width)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = norm_layer(width)
        self.act2 = nn.ReLU(inplace=True)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, 1, bias=False)
        self.bn3 = norm_layer(planes * self.expansion)
        self.downsample = downsample
        self.act3 = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.act2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.act3(out + shortcut)


class ResNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; output stride 32.

    Args:
        block: residual block class with ``expansion`` and the signature of :class:`Bottleneck`.
        layers: blocks per stage (4 stages of 64, 128, 256, 512 planes).
        groups, width_per_group: ResNeXt cardinality and bottleneck width.
        stem_width: 0 for the 7x7 stem; otherwise three 3x3 convs (stem_width, stem_width, 64).
        avg_down: shortcut downsamples with 2x2 average pooling before its 1x1 conv.
        norm_layer: ``channels -> module`` for every norm (BatchNorm2d; GroupNorm for DP).
        width_mult: scales the stem and every stage's planes; 1.0 is the published network,
            smoke sizes take a fraction to shrink the weights while keeping every layer.
    """

    def __init__(
        self,
        block: Callable[..., nn.Module],
        layers: tuple[int, ...],
        *,
        num_classes: int = 1000,
        groups: int = 1,
        width_per_group: int = 64,
        stem_width: int = 0,
        avg_down: bool = False,
        norm_layer: NormLayer = nn.BatchNorm2d,
        width_mult: float = 1.0,
    ) -> None:
        super().__init__()
        planes = [max(1, round(p * width_mult)) for p in (64, 128, 256, 512)]
        self.in_ch = planes[0]
        self.groups, self.base_width, self.avg_down = groups, width_per_group, avg_down
        self.norm_layer = norm_layer
        if stem_width:
            self.conv1 = nn.Sequential(
                nn.Conv2d(3, stem_width, 3, 2, 1, bias=False),
                norm_layer(stem_width),
                nn.ReLU(inplace=True),
                nn.Conv2d(stem_width, stem_width, 3, 1, 1, bias=False),
                norm_layer(stem_width),
                nn.ReLU(inplace=True),
                nn.Conv2d(stem_width, self.in_ch, 3, 1, 1, bias=False),
            )
        else:
            self.conv1 = nn.Conv2d(3, self.in_ch, 7, 2, 3, bias=False)
        self.bn1 = norm_layer(self.in_ch)
        self.act1 = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)  # (B, 64, H/4, W/4)
        self.layer1 = self._make_layer(block, planes[0], layers[0], stride=1)  # (B, 64e, H/4, W/4)
        self.layer2 = self._make_layer(block, planes[1], layers[1], stride=2)  # (B, 128e, H/8, W/8)
        self.layer3 = self._make_layer(block, planes[2], layers[2], stride=2)  # (B, 256e, H/16, W/16)
        self.layer4 = self._make_layer(block, planes[3], layers[3], stride=2)  # (B, 512e, H/32, W/32)
        self.head = ClassifierHead(planes[3] * block.expansion, num_classes)
        init_conv_weights(self)

    def _make_layer(self, block: Callable[..., nn.Module], planes: int, blocks: int, stride: int) -> nn.Sequential:
        out_ch = planes * block.expansion
        downsample = None
        if stride != 1 or self.in_ch != out_ch:
            shortcut: list[nn.Module] = []
            if self.avg_down and stride != 1:
                shortcut.append(nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False))
            conv_stride = 1 if self.avg_down else stride
            shortcut += [nn.Conv2d(self.in_ch, out_ch, 1, conv_stride, bias=False), self.norm_layer(out_ch)]
            downsample = nn.Sequential(*shortcut)
        norm = self.norm_layer
        layers = [block(self.in_ch, planes, stride, downsample, self.groups, self.base_width, norm_layer=norm)]
        self.in_ch = out_ch
        layers += [
            block(out_ch, planes, 1, None, self.groups, self.base_width, norm_layer=norm) for _ in range(1, blocks)
        ]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.act1(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.head(x)  # (B, num_classes)


# depth -> (block, blocks per stage), torchvision's layouts
RESNET_LAYOUTS: dict[int, tuple[type[nn.Module], tuple[int, ...]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


def resnet(depth: int, **kwargs) -> ResNet:
    """ResNet-``depth`` in torchvision's layout; ``kwargs`` go to :class:`ResNet`.

    Example:
        >>> sum(p.numel() for p in resnet(50).parameters())
        25557032
    """
    if depth not in RESNET_LAYOUTS:
        raise ValueError(f"unsupported ResNet depth {depth}; accepted: {', '.join(map(str, RESNET_LAYOUTS))}")
    block, layers = RESNET_LAYOUTS[depth]
    return ResNet(block, layers, **kwargs)
