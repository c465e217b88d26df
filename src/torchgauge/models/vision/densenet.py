"""DenseNet: Huang et al., "Densely Connected Convolutional Networks", 2017.

``densenet121`` follows torchvision's ``models/densenet.py`` (BSD-3-Clause): growth rate 32,
blocks of 6-12-24-16 layers, 4x bottlenecks, transitions halving the channels.
``phlippe_densenet`` is the CIFAR-10 DenseNet of Phillip Lippe's UvA deep-learning tutorial 5
(``uvadlc_notebooks``, MIT; the version TorchBench runs): a single 3x3 stem conv with bias,
four blocks of 6 layers, growth rate 16, 2x bottlenecks, 32x32 inputs, 10 classes. The
tutorial concatenates ``[new, old]`` rather than ``[old, new]``: a channel permutation that
changes neither shapes, parameter counts nor cost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, image_classification

from ..common.conv_blocks import ClassifierHead, init_conv_weights
from ..common.torchbench_precision import TORCHVISION_FACTORY
from .torchvision_step import torchvision_classification

__all__ = ["DenseNet", "DenseNetConfig"]


@dataclass(frozen=True)
class DenseNetConfig:
    block_layers: tuple[int, ...] = (6, 12, 24, 16)  # DenseNet-121
    growth_rate: int = 32  # channels each dense layer adds
    bn_size: int = 4  # bottleneck width = bn_size * growth_rate
    stem_ch: int = 64
    imagenet_stem: bool = True  # 7x7/2 conv + BN + ReLU + 3x3/2 max pool; else one 3x3 conv with bias
    num_classes: int = 1000


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv (bottleneck) -> BN-ReLU-3x3 conv; returns only the new ``growth_rate`` maps."""

    def __init__(self, in_ch: int, growth_rate: int, bn_size: int) -> None:
        super().__init__()
        mid_ch = bn_size * growth_rate
        self.net = nn.Sequential(
            nn.BatchNorm2d(in_ch), nn.ReLU(inplace=True), nn.Conv2d(in_ch, mid_ch, 1, bias=False),
            nn.BatchNorm2d(mid_ch), nn.ReLU(inplace=True), nn.Conv2d(mid_ch, growth_rate, 3, padding=1, bias=False),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class DenseBlock(nn.ModuleList):
    """Each layer sees the concatenation of the block input and every earlier layer's output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self:
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)  # (B, C_in + L * growth_rate, H, W)


class DenseNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``."""

    def __init__(self, cfg: DenseNetConfig) -> None:
        super().__init__()
        ch = cfg.stem_ch
        if cfg.imagenet_stem:  # (B, 64, H/4, W/4)
            stem = [nn.Conv2d(3, ch, 7, 2, 3, bias=False), nn.BatchNorm2d(ch), nn.ReLU(inplace=True)]
            stem.append(nn.MaxPool2d(3, 2, 1))
        else:  # (B, 32, H, W): no norm or activation, the dense layers start with them
            stem = [nn.Conv2d(3, ch, 3, padding=1)]
        layers: list[nn.Module] = stem
        for i, num_layers in enumerate(cfg.block_layers):
            block = (DenseLayer(ch + j * cfg.growth_rate, cfg.growth_rate, cfg.bn_size) for j in range(num_layers))
            layers.append(DenseBlock(block))
            ch += num_layers * cfg.growth_rate
            if i < len(cfg.block_layers) - 1:  # transition: halve channels and resolution
                layers += [nn.BatchNorm2d(ch), nn.ReLU(inplace=True), nn.Conv2d(ch, ch // 2, 1, bias=False)]
                layers.append(nn.AvgPool2d(2, 2))
                ch //= 2
        layers += [nn.BatchNorm2d(ch), nn.ReLU(inplace=True)]  # the last block's output is still pre-activation
        self.features = nn.Sequential(*layers)
        self.head = ClassifierHead(ch, cfg.num_classes)
        init_conv_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _create_densenet(
    ctx: BuildContext, cfg: DenseNetConfig, *, image_size: int, optimizer: str = "sgd", lr: float = 1e-3, **kwargs
) -> Workload:
    cfg = replace(cfg, **kwargs)
    model = DenseNet(cfg)
    return image_classification(
        ctx, model, image_size=image_size, num_classes=cfg.num_classes, optimizer=optimizer, lr=lr
    )


@register_model(
    domain="vision", task="classification", source="Huang et al., DenseNet, 2017; torchvision densenet121",
    batch_size=(256, 64), param_count=7_978_856,
    torchbench_precision=TORCHVISION_FACTORY,
)  # fmt: skip
def densenet121(ctx: BuildContext, **kwargs) -> Workload:
    """DenseNet-121 at 224x224 with TorchBench's torchvision step.

    Smoke: 32 px (1x1 after the last transition) and a quarter of the width (growth rate 8,
    16-channel stem), keeping all 58 dense layers and the 1000 classes.
    """
    cfg = ctx.pick(DenseNetConfig(), DenseNetConfig(growth_rate=8, stem_ch=16))
    return torchvision_classification(ctx, DenseNet(replace(cfg, **kwargs)), image_size=ctx.pick(224, 32))


@register_model(
    domain="vision", task="classification", source="Lippe, UvA DL tutorial 5 (DenseNet on CIFAR-10), 2022",
    batch_size=(128, 128), param_count=239_146,
)  # fmt: skip
def phlippe_densenet(ctx: BuildContext, **kwargs) -> Workload:
    """The tutorial's CIFAR-10 DenseNet on 32x32 images, trained with AdamW(1e-3) (smoke: 16 px)."""
    cfg = DenseNetConfig((6, 6, 6, 6), growth_rate=16, bn_size=2, stem_ch=32, imagenet_stem=False, num_classes=10)
    return _create_densenet(ctx, cfg, image_size=ctx.pick(32, 16), optimizer="adamw", lr=1e-3, **kwargs)
