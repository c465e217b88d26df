"""SqueezeNet: Iandola et al., "SqueezeNet: AlexNet-level accuracy with 50x fewer parameters", 2016.

Follows torchvision's ``models/squeezenet.py`` (BSD-3-Clause) for version 1.1 (the authors'
cheaper revision: 3x3 stem with 64 filters, pooling moved earlier). Fire modules squeeze
with 1x1 convs, then expand with parallel 1x1 and 3x3 convs whose outputs are concatenated.
"""

from __future__ import annotations

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.torchbench_precision import TORCHVISION_FACTORY
from .torchvision_step import torchvision_classification

__all__ = ["Fire", "SqueezeNet"]


class Fire(nn.Module):
    """1x1 squeeze -> ReLU -> cat(1x1 expand, 3x3 expand) -> ReLU."""

    def __init__(self, in_ch: int, squeeze_ch: int, expand1x1_ch: int, expand3x3_ch: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(in_ch, squeeze_ch, 1)
        self.expand1x1 = nn.Conv2d(squeeze_ch, expand1x1_ch, 1)
        self.expand3x3 = nn.Conv2d(squeeze_ch, expand3x3_ch, 3, padding=1)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.squeeze(x))
        return self.act(torch.cat([self.expand1x1(x), self.expand3x3(x)], 1))


class SqueezeNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; a 1x1 conv is the classifier."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), pool(),  # (B, 64, 55, 55) at 224
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),  # (B, 128, 27, 27)
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(),  # (B, 256, 13, 13)
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),  # (B, 512, 13, 13)
        )  # fmt: skip
        self.final_conv = nn.Conv2d(512, num_classes, 1)
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), self.final_conv, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1)
        )  # (B, num_classes, 1, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is self.final_conv:
                    nn.init.normal_(m.weight, 0.0, 0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


@register_model(
    domain="vision", task="classification", source="Iandola et al., SqueezeNet, 2016; torchvision squeezenet1_1",
    batch_size=(32, 16), param_count=1_235_496,
    torchbench_precision=TORCHVISION_FACTORY,
)  # fmt: skip
def squeezenet1_1(ctx: BuildContext, **kwargs) -> Workload:
    """SqueezeNet 1.1 at 224x224 (smoke: 32 px, 1x1 after the third pool)."""
    model = SqueezeNet(**kwargs)
    return torchvision_classification(ctx, model, image_size=ctx.pick(224, 32))
