"""The CIFAR-10 ResNet of Phillip Lippe's UvA deep-learning tutorial 5 (``phlippe_resnet``).

Lippe, "Tutorial 5: Inception, ResNet and DenseNet", UvA DL course notebooks (MIT), in the
benchmarking version TorchBench runs (``phlippe/uvadlc_notebooks_benchmarking``): a 3x3 stem,
three stages of three basic blocks at 16/32/64 channels, 32x32 inputs, 10 classes. Unlike
torchvision's ResNet the strided shortcut is a bare 1x1 conv with bias (no BatchNorm), and
there is no max pool: the network follows He et al.'s CIFAR ResNets (2015, sec. 4.2).
"""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, image_classification

from ..common.conv_blocks import ClassifierHead

__all__ = ["CifarResNet"]


class CifarResBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus shortcut, then ReLU; ``subsample`` strides by 2."""

    def __init__(self, in_ch: int, out_ch: int, subsample: bool) -> None:
        super().__init__()
        stride = 2 if subsample else 1
        self.net = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False), nn.BatchNorm2d(out_ch),
        )  # fmt: skip
        self.downsample = nn.Conv2d(in_ch, out_ch, 1, 2) if subsample else None  # keeps the top-left pixel
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.act(self.net(x) + shortcut)


class CifarResNet(nn.Module):
    """Images ``(B, 3, 32, 32)`` -> logits ``(B, num_classes)``."""

    def __init__(
        self, num_classes: int = 10, num_blocks: tuple[int, ...] = (3, 3, 3), channels: tuple[int, ...] = (16, 32, 64)
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, channels[0], 3, padding=1, bias=False), nn.BatchNorm2d(channels[0]), nn.ReLU(inplace=True)
        )
        blocks, in_ch = [], channels[0]
        for stage, (count, out_ch) in enumerate(zip(num_blocks, channels)):
            for i in range(count):  # the first block of every stage but the first subsamples
                blocks.append(CifarResBlock(in_ch, out_ch, subsample=i == 0 and stage > 0))
                in_ch = out_ch
        self.blocks = nn.Sequential(*blocks)  # (B, 64, H/4, W/4)
        self.head = ClassifierHead(in_ch, num_classes)
        for m in self.modules():  # the tutorial's initialisation (He, fan-out for ReLU)
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


@register_model(
    domain="vision", task="classification", source="Lippe, UvA DL tutorial 5 (ResNet on CIFAR-10), 2022",
    batch_size=(128, 128), param_count=272_378,
)  # fmt: skip
def phlippe_resnet(ctx: BuildContext, **kwargs) -> Workload:
    """The tutorial's CIFAR-10 ResNet on 32x32 images, trained with SGD(0.1, momentum 0.9) (smoke: 16 px)."""
    model = CifarResNet(**kwargs)
    num_classes = model.head.fc.out_features
    return image_classification(ctx, model, image_size=ctx.pick(32, 16), num_classes=num_classes, lr=0.1)
