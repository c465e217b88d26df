"""3D U-Net of the MLPerf Training image-segmentation benchmark (KiTS19 kidney tumours).

Architecture after Çiçek et al., "3D U-Net: Learning Dense Volumetric Segmentation from Sparse
Annotation", MICCAI 2016, as implemented by mlcommons/training ``image_segmentation/pytorch``
(Apache-2.0), ``model/unet3d.py``, ``model/layers.py`` and ``model/losses.py``: filters
32-64-128-256-320, each block conv3x3x3 (no bias) -> InstanceNorm3d(affine) -> LeakyReLU(0.01),
stride-2 convs down, 2x2x2 transposed convs up, 1 input channel, 3 classes, 128^3 patches,
loss (Dice without background + cross-entropy) / 2, SGD with momentum 0.9.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .dice import soft_dice

__all__ = ["dice_ce_loss"]

_FILTERS = (32, 64, 128, 256, 320)


def _conv_block(in_ch: int, out_ch: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv3d(in_ch, out_ch, 3, stride, 1, bias=False),
        nn.InstanceNorm3d(out_ch, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
    )


class _Up(nn.Module):
    """Transposed conv x2 (with bias, no norm), concatenate the skip, two conv blocks."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.upsample = nn.ConvTranspose3d(in_ch, out_ch, 2, stride=2)
        self.convs = nn.Sequential(_conv_block(2 * out_ch, out_ch), _conv_block(out_ch, out_ch))

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.convs(torch.cat([self.upsample(x), skip], dim=1))


class UNet3D(nn.Module):
    """Volume ``(B, in, D, H, W)`` -> logits ``(B, n_classes, D, H, W)``; sides divisible by 32."""

    def __init__(self, in_channels: int = 1, n_classes: int = 3, filters: Sequence[int] = _FILTERS) -> None:
        super().__init__()
        f = list(filters)
        self.input_block = nn.Sequential(_conv_block(in_channels, f[0]), _conv_block(f[0], f[0]))
        # Each level halves D, H, W: 128^3 -> 64^3 -> ... -> 8^3, and the bottleneck 4^3 at 320 ch.
        self.downsample = nn.ModuleList(
            nn.Sequential(_conv_block(i, o, stride=2), _conv_block(o, o)) for i, o in zip(f[:-1], f[1:])
        )
        self.bottleneck = nn.Sequential(_conv_block(f[-1], f[-1], stride=2), _conv_block(f[-1], f[-1]))
        self.upsample = nn.ModuleList([_Up(f[-1], f[-1])] + [_Up(i, o) for i, o in zip(f[:0:-1], f[-2::-1])])
        self.output = nn.Conv3d(f[0], n_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.input_block(x)]  # (B, 32, D, H, W)
        for down in self.downsample:
            skips.append(down(skips[-1]))
        x = self.bottleneck(skips[-1])
        for up in self.upsample:
            x = up(x, skips.pop())
        return self.output(x)


def dice_ce_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """MLPerf DiceCELoss: (mean over images and foreground classes of 1 - Dice + CE) / 2.

    ``logits`` is ``(B, C, D, H, W)``, ``labels`` ``(B, 1, D, H, W)`` integer classes.
    """
    labels = labels.squeeze(1).long()
    probs = F.softmax(logits.float(), dim=1)
    one_hot = F.one_hot(labels, logits.size(1)).movedim(-1, 1).float()
    dice = soft_dice(probs[:, 1:], one_hot[:, 1:], dims=(2, 3, 4))  # (B, C - 1): background excluded
    return ((1 - dice).mean() + F.cross_entropy(logits, labels)) / 2


def _create_unet3d(ctx: BuildContext, *, patch_size: int = 128, **kwargs: Any) -> Workload:
    # Smoke: 32x32x64 is the smallest patch whose bottleneck (1/32 per side) keeps > 1 voxel
    # for instance norm; an eighth of the width makes that volumetric step fit a CPU smoke budget.
    patch = ctx.pick((patch_size,) * 3, (32, 32, 64))
    if ctx.smoke:
        kwargs.setdefault("filters", tuple(c // 8 for c in _FILTERS))
    module = UNet3D(**kwargs)
    b, n_classes = ctx.batch_size, module.output.out_channels
    image = ctx.randn(b, module.input_block[0][0].in_channels, *patch)  # z-scored CT intensities
    labels = ctx.randint(0, n_classes, (b, 1, *patch))
    # MLPerf warms the learning rate up from 1e-4; the benchmark stays at that first value.
    opt = ctx.optimizer(module.parameters(), "sgd", lr=1e-4, momentum=0.9) if ctx.train else None
    return Workload(ctx, module, (image,), labels, loss_fn=dice_ce_loss, optimizer=opt)


@register_model(
    domain="vision",
    task="segmentation",
    source="Çiçek et al., 3D U-Net, 2016; mlcommons/training image_segmentation (KiTS19)",
    batch_size=(2, 1),
    tags=("mlperf", "medical", "3d"),
    param_count=31_190_243,
    notes="Smoke size also cuts the width to 1/8: full width on the smallest legal patch is ~30 GFLOP a step.",
)
def unet3d(ctx: BuildContext, **kwargs: Any) -> Workload:
    """MLPerf 3D U-Net (32-64-128-256-320 filters) on 128^3 KiTS19 patches, Dice + CE."""
    return _create_unet3d(ctx, **kwargs)
