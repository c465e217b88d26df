"""VGG: Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image Recognition", 2014.

Follows torchvision's ``models/vgg.py`` (BSD-3-Clause), configuration "D" (VGG-16) without
batch norm: thirteen 3x3 convs in five max-pooled stages, then three fully connected layers.
"""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.conv_blocks import init_conv_weights
from ..common.torchbench_precision import TORCHVISION_FACTORY
from .torchvision_step import torchvision_classification

__all__ = ["VGG"]

# Output channels of each 3x3 conv; "M" is a 2x2 max pool (the paper's Table 1, column D).
VGG16_LAYERS = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


class VGG(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; H, W >= 32.

    ``width_mult`` scales every conv's channels (1.0: the paper's; smoke sizes take a fraction).
    """

    def __init__(
        self,
        layers: tuple[int | str, ...] = VGG16_LAYERS,
        num_classes: int = 1000,
        hidden_dim: int = 4096,
        dropout: float = 0.5,
        width_mult: float = 1.0,
    ) -> None:
        super().__init__()
        features: list[nn.Module] = []
        in_ch = 3
        for layer in layers:
            if layer == "M":
                features.append(nn.MaxPool2d(2, 2))
            else:
                out_ch = max(1, round(layer * width_mult))
                features += [nn.Conv2d(in_ch, out_ch, 3, padding=1), nn.ReLU(inplace=True)]
                in_ch = out_ch
        self.features = nn.Sequential(*features)  # (B, 512, H/32, W/32)
        self.avgpool = nn.AdaptiveAvgPool2d(7)  # (B, 512, 7, 7) for any input size
        self.classifier = nn.Sequential(
            nn.Linear(in_ch * 7 * 7, hidden_dim), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(hidden_dim, hidden_dim), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(hidden_dim, num_classes),
        )  # fmt: skip
        init_conv_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


@register_model(
    domain="vision", task="classification", source="Simonyan & Zisserman, VGG, 2014; torchvision vgg16",
    batch_size=(64, 4), param_count=138_357_544,
    torchbench_precision=TORCHVISION_FACTORY,
)  # fmt: skip
def vgg16(ctx: BuildContext, **kwargs) -> Workload:
    """VGG-16 at 224x224 (smoke: 32 px, a quarter of the conv channels and 256-wide FC layers).

    The weights set the cost of a smoke step: 124M in the 4096-wide FC layers, 14.7M in the
    convs; the smoke network keeps all thirteen convs and three FC layers with 2.5M weights.
    """
    model = VGG(**{"hidden_dim": ctx.pick(4096, 256), "width_mult": ctx.pick(1.0, 0.25), **kwargs})
    return torchvision_classification(ctx, model, image_size=ctx.pick(224, 32))
