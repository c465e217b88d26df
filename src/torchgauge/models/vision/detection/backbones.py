"""ResNet backbones for detection (C4 / dilated C5 / FPN) and the feature pyramid neck.

One ResNet serves every detector here: Detectron2's MSRA ResNet (stride in the 1x1 conv,
``FrozenBatchNorm``; Apache-2.0, https://github.com/facebookresearch/detectron2), torchvision's
(stride in the 3x3 conv; BSD-3-Clause) and, with trainable BatchNorm, docTR's DBNet backbone.
Architectures: He et al., "Deep Residual Learning" (2015); Lin et al., "Feature Pyramid
Networks" (2017); the P6/P7 levels of Lin et al., "Focal Loss" (2017).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "FPN",
    "SMOKE_BACKBONE_WIDTH",
    "SMOKE_FPN_CHANNELS",
    "FrozenBatchNorm2d",
    "ResNet",
    "frozen_residual_scale",
    "make_stage",
]

# Smoke widths of the detectors built on this backbone: a quarter of the ResNet's stem/res2
# width (64) and of the FPN's 256 channels. Convolution FLOPs of backbone, FPN and towers,
# not the 96x128 smoke images' post-processing, set the smoke step's cost; every stage, block,
# pyramid level and tower conv is kept.
SMOKE_BACKBONE_WIDTH = 16
SMOKE_FPN_CHANNELS = 64

# Bottleneck blocks per stage (res2..res5) by depth.
STAGE_BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3)}
STAGE_NAMES = ("res2", "res3", "res4", "res5")


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm with fixed statistics and affine terms, held as buffers (not parameters).

    Detection fine-tuning freezes BN: per-GPU batches of 1-2 images are too small for batch
    statistics. Buffers keep it out of ``parameters()``, as in Detectron2 and torchvision.
    """

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: Tensor) -> Tensor:
        scale = self.weight * (self.running_var + self.eps).rsqrt()
        shift = self.bias - self.running_mean * scale
        return x * scale.view(1, -1, 1, 1).to(x.dtype) + shift.view(1, -1, 1, 1).to(x.dtype)


def frozen_residual_scale(depth: int) -> float:
    """Scale of each residual branch's last frozen BN: ``1 / sqrt(#blocks)``.

    Frozen BN normally holds a pretrained network's statistics. With random weights and
    identity statistics, every block roughly doubles the activation variance (ResNet-101's res4
    ends ~1e4x too large), so each branch is scaled down as in SkipInit/Fixup, which keeps
    activations O(1) at any depth. Compute is unchanged; pretrained statistics would replace it.
    """
    return 1.0 / math.sqrt(sum(STAGE_BLOCKS[depth]))


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "frozen_bn":
        return FrozenBatchNorm2d(channels)
    if kind == "bn":
        return nn.BatchNorm2d(channels)
    raise ValueError(f"unknown norm {kind!r}; accepted: frozen_bn, bn")


class Bottleneck(nn.Module):
    """1x1 -> 3x3 -> 1x1 residual block; the stride sits in the first 1x1 (MSRA) or the 3x3."""

    def __init__(
        self,
        in_ch: int,
        mid_ch: int,
        out_ch: int,
        stride: int,
        dilation: int,
        stride_in_1x1: bool,
        norm: str,
        residual_scale: float = 1.0,
    ):
        super().__init__()
        stride_1x1, stride_3x3 = (stride, 1) if stride_in_1x1 else (1, stride)
        self.conv1 = nn.Conv2d(in_ch, mid_ch, 1, stride=stride_1x1, bias=False)
        self.bn1 = _norm(norm, mid_ch)
        self.conv2 = nn.Conv2d(mid_ch, mid_ch, 3, stride=stride_3x3, padding=dilation, dilation=dilation, bias=False)
        self.bn2 = _norm(norm, mid_ch)
        self.conv3 = nn.Conv2d(mid_ch, out_ch, 1, bias=False)
        self.bn3 = _norm(norm, out_ch)
        if isinstance(self.bn3, FrozenBatchNorm2d):
            self.bn3.weight.fill_(residual_scale)
        self.shortcut = None
        if in_ch != out_ch or stride != 1:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), _norm(norm, out_ch))

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + identity)


def make_stage(
    num_blocks: int,
    in_ch: int,
    mid_ch: int,
    out_ch: int,
    stride: int,
    dilation: int = 1,
    stride_in_1x1: bool = True,
    norm: str = "frozen_bn",
    residual_scale: float = 1.0,
) -> nn.Sequential:
    """A ResNet stage: the first block changes width and resolution, the rest keep them."""
    args = (dilation, stride_in_1x1, norm, residual_scale)
    blocks = [Bottleneck(in_ch, mid_ch, out_ch, stride, *args)]
    blocks += [Bottleneck(out_ch, mid_ch, out_ch, 1, *args) for _ in range(num_blocks - 1)]
    stage = nn.Sequential(*blocks)
    for module in stage.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return stage


class ResNet(nn.Module):
    """ResNet-50/101 feature extractor returning the requested stages (``res2`` .. ``res5``).

    Args:
        depth: 50 or 101.
        out_features: stage names to return; stages after the last one are not built (the C4
            detector puts ``res5`` in its RoI head instead).
        res5_dilation: 2 makes ``res5`` dilated with stride 1 (the "DC5" backbone, stride 16).
        stride_in_1x1: MSRA/Detectron2 layout (True) or torchvision's (False).
        norm: ``"frozen_bn"`` or ``"bn"``.
        freeze_at: stages frozen from the start (Detectron2's FREEZE_AT: 2 freezes stem + res2).
        width: channels of the stem and of res2's bottleneck (64; halved/doubled per stage).
    """

    def __init__(
        self,
        depth: int = 50,
        out_features: Sequence[str] = STAGE_NAMES,
        res5_dilation: int = 1,
        stride_in_1x1: bool = True,
        norm: str = "frozen_bn",
        freeze_at: int = 2,
        width: int = 64,
    ):
        super().__init__()
        if depth not in STAGE_BLOCKS:
            raise ValueError(f"unsupported ResNet depth {depth}; accepted: {sorted(STAGE_BLOCKS)}")
        self.out_features = tuple(out_features)
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False), _norm(norm, width), nn.ReLU(inplace=True)
        )
        self.out_channels: dict[str, int] = {}
        self.strides: dict[str, int] = {}
        in_ch, stride = width, 4
        last = max(STAGE_NAMES.index(name) for name in self.out_features)
        for index, (name, blocks) in enumerate(zip(STAGE_NAMES[: last + 1], STAGE_BLOCKS[depth])):
            dilation = res5_dilation if name == "res5" else 1
            first_stride = 1 if index == 0 or dilation > 1 else 2
            stride *= first_stride
            mid_ch, out_ch = width * 2**index, width * 4 * 2**index
            scale = frozen_residual_scale(depth)
            self.add_module(
                name, make_stage(blocks, in_ch, mid_ch, out_ch, first_stride, dilation, stride_in_1x1, norm, scale)
            )
            self.out_channels[name], self.strides[name] = out_ch, stride
            in_ch = out_ch
        self.stage_names = STAGE_NAMES[: last + 1]
        nn.init.kaiming_normal_(self.stem[0].weight, mode="fan_out", nonlinearity="relu")
        for module in ([self.stem] + [getattr(self, name) for name in self.stage_names])[:freeze_at]:
            module.requires_grad_(False)

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        x = F.max_pool2d(self.stem(x), kernel_size=3, stride=2, padding=1)  # (B, w, H/4, W/4)
        outputs = {}
        for name in self.stage_names:
            x = getattr(self, name)(x)
            if name in self.out_features:
                outputs[name] = x
        return outputs


class FPN(nn.Module):
    """Feature pyramid: lateral 1x1 + top-down nearest upsampling + 3x3 output convs.

    Args:
        in_channels: channels of the inputs, finest first (e.g. res2..res5).
        out_channels: pyramid width (256).
        top_block: extra coarser levels: ``"maxpool"`` adds P6 = subsample(P5) (R-CNN);
            ``"p6p7"`` adds P6 = conv(P5), P7 = conv(relu(P6)) (RetinaNet/FCOS); ``None``.
    """

    def __init__(self, in_channels: Sequence[int], out_channels: int = 256, top_block: str | None = "maxpool"):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, out_channels, 1) for c in in_channels)
        self.output = nn.ModuleList(nn.Conv2d(out_channels, out_channels, 3, padding=1) for _ in in_channels)
        if top_block not in (None, "maxpool", "p6p7"):
            raise ValueError(f"unknown FPN top block {top_block!r}; accepted: maxpool, p6p7, None")
        self.top_block = top_block
        if top_block == "p6p7":
            self.p6 = nn.Conv2d(out_channels, out_channels, 3, stride=2, padding=1)
            self.p7 = nn.Conv2d(out_channels, out_channels, 3, stride=2, padding=1)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):  # Caffe2's "Xavier" fill, as Detectron2 and torchvision
                nn.init.kaiming_uniform_(module.weight, a=1)
                nn.init.zeros_(module.bias)

    def forward(self, features: Sequence[Tensor]) -> list[Tensor]:
        merged = self.lateral[-1](features[-1])
        outputs = [self.output[-1](merged)]
        for feature, lateral, output in zip(features[-2::-1], self.lateral[-2::-1], self.output[-2::-1]):
            lateral_out = lateral(feature)
            merged = lateral_out + F.interpolate(merged, size=lateral_out.shape[-2:], mode="nearest")
            outputs.insert(0, output(merged))
        if self.top_block == "maxpool":
            outputs.append(F.max_pool2d(outputs[-1], kernel_size=1, stride=2))
        elif self.top_block == "p6p7":
            p6 = self.p6(outputs[-1])
            outputs += [p6, self.p7(F.relu(p6))]
        return outputs
