"""AlexNet: Krizhevsky et al., "ImageNet Classification with Deep Convolutional Neural Networks", 2012.

Follows torchvision's ``models/alexnet.py`` (BSD-3-Clause), the single-GPU variant of
Krizhevsky's "One weird trick" paper (2014): 64-192-384-256-256 conv filters, no local
response normalisation, two 4096-wide dropout layers.
"""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.torchbench_precision import TORCHVISION_FACTORY
from .torchvision_step import torchvision_classification

__all__ = ["AlexNet"]


class AlexNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; H, W >= 63.

    ``hidden_dim`` is the width of the two hidden FC layers and ``width_mult`` scales the conv
    channels (4096 and 1.0: the published network; smoke sizes take less).
    """

    def __init__(
        self, num_classes: int = 1000, dropout: float = 0.5, hidden_dim: int = 4096, width_mult: float = 1.0
    ) -> None:
        super().__init__()
        c1, c2, c3, c4 = (max(1, round(c * width_mult)) for c in (64, 192, 384, 256))
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, 11, 4, 2), nn.ReLU(inplace=True),  # (B, 64, 55, 55) at 224
            nn.MaxPool2d(3, 2),  # (B, 64, 27, 27)
            nn.Conv2d(c1, c2, 5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),  # (B, 192, 13, 13)
            nn.Conv2d(c2, c3, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c3, c4, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(c4, c4, 3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2),  # (B, 256, 6, 6)
        )  # fmt: skip
        self.avgpool = nn.AdaptiveAvgPool2d(6)  # fixes the classifier input for any image size
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(c4 * 6 * 6, hidden_dim), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(hidden_dim, hidden_dim), nn.ReLU(inplace=True),
            nn.Linear(hidden_dim, num_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


@register_model(
    domain="vision", task="classification", source="Krizhevsky et al., AlexNet, 2012; torchvision alexnet",
    batch_size=(128, 128), param_count=61_100_840,
    torchbench_precision=TORCHVISION_FACTORY,
)  # fmt: skip
def alexnet(ctx: BuildContext, **kwargs) -> Workload:
    """AlexNet at 224x224 (smoke: 64 px, the smallest size that survives its three pools).

    Smoke also narrows the two hidden FC layers to 256 and the convs to half their channels:
    at full width they hold 58.6M and 2.5M of the 61.1M weights, whose Adam update dominated
    the smoke step; every layer is kept.
    """
    model = AlexNet(**{"hidden_dim": ctx.pick(4096, 256), "width_mult": ctx.pick(1.0, 0.5), **kwargs})
    return torchvision_classification(ctx, model, image_size=ctx.pick(224, 64))
