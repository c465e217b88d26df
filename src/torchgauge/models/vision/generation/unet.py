"""U-Net for semantic segmentation: Ronneberger et al., "U-Net: Convolutional Networks for
Biomedical Image Segmentation", MICCAI 2015.

Follows milesial/Pytorch-UNet (GPL-3.0), ``unet/unet_model.py`` and ``unet_parts.py``, as
TorchBench's ``pytorch_unet`` runs it: Carvana car masks at half resolution (1280x1918 ->
640x959), 3 input channels, 2 classes, cross-entropy + multiclass Dice loss, RMSprop(1e-5,
weight_decay=1e-8, momentum=0.9). ``bilinear=True`` (bilinear upsampling, 17.3 M parameters) is
TorchBench's choice and the default here; ``bilinear=False`` gives the 31.0 M transposed-conv variant.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .dice import soft_dice

__all__: list[str] = []


class DoubleConv(nn.Sequential):
    """(conv3x3 -> BN -> ReLU) x 2, shape-preserving in H and W."""

    def __init__(self, in_ch: int, out_ch: int, mid_ch: int | None = None) -> None:
        mid_ch = mid_ch or out_ch
        super().__init__(
            nn.Conv2d(in_ch, mid_ch, 3, padding=1, bias=False),
            nn.BatchNorm2d(mid_ch),
            nn.ReLU(True),
            nn.Conv2d(mid_ch, out_ch, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(True),
        )


class Down(nn.Sequential):
    """Max-pool by 2, then DoubleConv: ``(B, in, H, W)`` -> ``(B, out, H/2, W/2)`` (floor)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__(nn.MaxPool2d(2), DoubleConv(in_ch, out_ch))


class Up(nn.Module):
    """Upsample by 2, pad to the skip's size (odd inputs), concatenate the skip, DoubleConv."""

    def __init__(self, in_ch: int, out_ch: int, bilinear: bool) -> None:
        super().__init__()
        if bilinear:
            self.up: nn.Module = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(in_ch, out_ch, in_ch // 2)
        else:
            self.up = nn.ConvTranspose2d(in_ch, in_ch // 2, 2, stride=2)
            self.conv = DoubleConv(in_ch, out_ch)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = self.up(x)
        dy, dx = skip.size(2) - x.size(2), skip.size(3) - x.size(3)  # 959 -> 479 -> ... leaves 1-pixel gaps
        x = F.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([skip, x], dim=1))


class UNet(nn.Module):
    """``(B, n_channels, H, W)`` -> per-pixel class logits ``(B, n_classes, H, W)``."""

    def __init__(self, n_channels: int = 3, n_classes: int = 2, bilinear: bool = False, width: int = 64) -> None:
        super().__init__()
        factor = 2 if bilinear else 1  # bilinear upsampling keeps channels, so the bottom is halved
        self.n_classes = n_classes
        w = width  # 64: the published widths written in the comments
        self.inc = DoubleConv(n_channels, w)  # (B, 64, H, W)
        self.down1 = Down(w, 2 * w)  # (B, 128, H/2, W/2)
        self.down2 = Down(2 * w, 4 * w)  # (B, 256, H/4, W/4)
        self.down3 = Down(4 * w, 8 * w)  # (B, 512, H/8, W/8)
        self.down4 = Down(8 * w, 16 * w // factor)  # (B, 1024, H/16, W/16)
        self.up1 = Up(16 * w, 8 * w // factor, bilinear)
        self.up2 = Up(8 * w, 4 * w // factor, bilinear)
        self.up3 = Up(4 * w, 2 * w // factor, bilinear)
        self.up4 = Up(2 * w, w, bilinear)
        self.outc = nn.Conv2d(w, n_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x = self.down4(x4)
        x = self.up1(x, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        return self.outc(x)


def ce_dice_loss(logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Cross-entropy + (1 - Dice) as Pytorch-UNet's train.py; Dice sums over batch, classes and pixels."""
    probs = F.softmax(logits, dim=1).float()
    one_hot = F.one_hot(masks, logits.size(1)).permute(0, 3, 1, 2).float()  # (B, C, H, W)
    return F.cross_entropy(logits, masks) + 1 - soft_dice(probs, one_hot, dims=(0, 1, 2, 3))


class SegmentationWorkload(Workload):
    """Eval returns the predicted mask one-hot ``(B, C, H, W)``, as TorchBench's ``pytorch_unet``."""

    def forward(self) -> torch.Tensor:
        logits = super().forward()
        if self.ctx.train:
            return logits
        return F.one_hot(logits.argmax(dim=1), logits.size(1)).permute(0, 3, 1, 2).float()


def _create_unet(ctx: BuildContext, *, image_size: tuple[int, int], **kwargs: Any) -> Workload:
    # Smoke: a quarter of the width (17.3M -> 1.1M weights, which RMSprop updates every step).
    module = UNet(**{**({"width": 16} if ctx.smoke else {}), **kwargs})
    # Smoke: 32 high keeps 2x2 at the bottom for BatchNorm at batch 1; the odd width keeps Up padding.
    h, w = ctx.pick(image_size, (32, 33))
    images = ctx.rand(ctx.batch_size, module.inc[0].in_channels, h, w)
    masks = ctx.randint(0, module.n_classes, (ctx.batch_size, h, w))
    opt = None
    if ctx.train:
        opt = torch.optim.RMSprop(module.parameters(), lr=1e-5, weight_decay=1e-8, momentum=0.9)
    return SegmentationWorkload(ctx, module, (images,), masks, loss_fn=ce_dice_loss, optimizer=opt)


@register_model(
    domain="vision",
    task="segmentation",
    source="Ronneberger et al., U-Net, 2015; milesial/Pytorch-UNet",
    batch_size=(1, 1),
    param_count=17_263_042,
    torchbench_precision={"cuda": {"train": "amp", "eval": "amp"}},  # TorchBench models/pytorch_unet/__init__.py:22-23
)
def pytorch_unet(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Pytorch-UNet (bilinear=True as TorchBench, 2 classes) on 640x959 Carvana-sized images."""
    return _create_unet(ctx, **{"image_size": (640, 959), "n_channels": 3, "n_classes": 2, "bilinear": True, **kwargs})
