"""SegNet: Badrinarayanan, Kendall and Cipolla, "SegNet: A Deep Convolutional Encoder-Decoder
Architecture for Image Segmentation", TPAMI 2017.

The reference is the authors' Caffe model (alexgkendall/SegNet-Tutorial ``segnet_train.prototxt``,
non-commercial licence) for CamVid: the thirteen 3x3 conv + BN + ReLU layers of VGG-16 as the
encoder, each of its five stages ending in a 2x2 max pool that *remembers where the maxima were*
(``return_indices=True``); a mirrored decoder whose stages start by placing their input back at
those positions (``nn.MaxUnpool2d``, zeros elsewhere; Caffe's ``Upsample`` layer with the pool's
``mask`` top) followed by 3x3 conv + BN + ReLU layers; a final 3x3 conv to the 11 classes. The
decoder has no skip connections other than the indices, so the whole network has 29.45M
parameters (the paper: 29.5M, the encoder 14.7M). Training as the paper sec. 4:
SGD with learning rate 0.1 and momentum 0.9, mini-batches of 12 images of 360 x 480, the
cross-entropy weighted by median-frequency class balancing (the tutorial's CamVid weights) and
the "void" label ignored.

Differences: PyTorch's default initialisation instead of a VGG-16 ImageNet start (weights are
random throughout torchgauge); the unpooling is given the pre-pool size explicitly
(``output_size``), which is how the odd 45 -> 22 step of a 360-pixel side is undone (Caffe's
``upsample_h``/``upsample_w``). Written from the paper and the prototxt's layer list; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["SegNet", "SegNetConfig", "CAMVID_CLASS_WEIGHTS", "CAMVID_VOID"]

# Median-frequency balancing weights of CamVid's 11 classes (sky, building, pole, road, pavement,
# tree, sign, fence, car, pedestrian, cyclist): SegNet-Tutorial's segnet_train.prototxt.
CAMVID_CLASS_WEIGHTS = (0.2595, 0.1826, 4.5640, 0.1417, 0.9051, 0.3826, 9.6446, 1.8418, 0.6823, 6.2478, 7.3614)
CAMVID_VOID = 11  # the "unlabelled" label, ignored by the loss


@dataclass(frozen=True)
class SegNetConfig:
    widths: tuple[int, ...] = (64, 128, 256, 512, 512)  # VGG-16's channels per stage
    convs: tuple[int, ...] = (2, 2, 3, 3, 3)  # VGG-16's 3x3 convs per stage (13 in all)
    num_classes: int = 11  # CamVid
    image_size: tuple[int, int] = (360, 480)  # CamVid frames, as the paper trains


def _conv_bn_relu(in_ch: int, out_ch: int) -> list[nn.Module]:
    # The prototxt's convs keep their bias in front of BN.
    return [nn.Conv2d(in_ch, out_ch, 3, padding=1), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True)]


class SegNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> per-pixel logits ``(B, num_classes, H, W)``, any H, W >= 32."""

    def __init__(self, cfg: SegNetConfig) -> None:
        super().__init__()
        self.encoders = nn.ModuleList()
        in_ch = 3
        for width, n in zip(cfg.widths, cfg.convs):
            layers = _conv_bn_relu(in_ch, width)
            for _ in range(n - 1):
                layers += _conv_bn_relu(width, width)
            self.encoders.append(nn.Sequential(*layers))
            in_ch = width
        self.pool = nn.MaxPool2d(2, 2, return_indices=True)
        self.unpool = nn.MaxUnpool2d(2, 2)
        # Decoder stage i mirrors encoder stage i: n convs at the stage's width, the last one
        # narrowing to the next-shallower stage's width (conv5_1_D 512 -> 512, conv4_1_D 512 -> 256, ...).
        # Stage 0 ends in the classifier conv instead, with neither BN nor ReLU.
        self.decoders = nn.ModuleList()
        for i, (width, n) in enumerate(zip(cfg.widths, cfg.convs)):
            layers = []
            for _ in range(n - 1):
                layers += _conv_bn_relu(width, width)
            if i == 0:
                layers.append(nn.Conv2d(width, cfg.num_classes, 3, padding=1))
            else:
                layers += _conv_bn_relu(width, cfg.widths[i - 1])
            self.decoders.append(nn.Sequential(*layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled: list[tuple[torch.Tensor, torch.Size]] = []
        for encoder in self.encoders:  # stage i: (B, C_i, H / 2^i, W / 2^i) -> half size
            x = encoder(x)
            size = x.shape
            x, indices = self.pool(x)
            pooled.append((indices, size))
        for decoder, (indices, size) in zip(reversed(self.decoders), reversed(pooled)):
            x = self.unpool(x, indices, output_size=size)  # sparse: the maxima back where they were
            x = decoder(x)
        return x  # (B, num_classes, H, W)


class SegNetWorkload(Workload):
    """Train: class-balanced cross-entropy over labelled pixels; eval: per-pixel class scores."""

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        labels, weights = self.targets
        return F.cross_entropy(outputs, labels, weight=weights.to(outputs.dtype), ignore_index=CAMVID_VOID)


def _create_segnet(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(widths=(8, 16, 16, 32, 32), image_size=(40, 56)) if ctx.smoke else {}
    cfg = replace(SegNetConfig(), **{**smoke, **kwargs})
    h, w = cfg.image_size
    images = ctx.randn(ctx.batch_size, 3, h, w)
    # labels 0..11: the 11 classes plus void, which the loss skips
    labels = ctx.randint(0, cfg.num_classes + 1, (ctx.batch_size, h, w))
    weights = torch.tensor(CAMVID_CLASS_WEIGHTS, device=ctx.device)[: cfg.num_classes]
    model = SegNet(cfg)
    opt = ctx.optimizer(model.parameters(), "sgd", lr=0.1, momentum=0.9) if ctx.train else None
    return SegNetWorkload(ctx, model, (images,), (labels, weights), optimizer=opt)


@register_model(
    domain="vision", task="segmentation", batch_size=(12, 4), param_count=29_449_355,
    source="Badrinarayanan et al., SegNet, TPAMI 2017; alexgkendall/SegNet-Tutorial segnet_train.prototxt",
    notes="The paper gives 29.5M parameters; 29,449,355 is the prototxt's layer list counted (convs with "
          "bias, BN affine). Smoke: 40x56 images and widths 8-32.",
)  # fmt: skip
def segnet(ctx: BuildContext, **kwargs) -> Workload:
    """SegNet (VGG-16 encoder, max-unpooling decoder) on 360x480 CamVid, 11 classes."""
    return _create_segnet(ctx, **kwargs)
