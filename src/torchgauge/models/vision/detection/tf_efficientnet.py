"""timm's TensorFlow-ported EfficientNet pieces (``tf_`` models) that EfficientDet's backbone and BiFPN use.

TensorFlow's "SAME" padding for strided convs and max pools (timm's ``Conv2dSame`` and
``create_pool2d(padding="same")``, Apache-2.0), TensorFlow's BatchNorm defaults and
stochastic depth (timm's ``drop_path``). Written from timm's description; no code copied.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from ...common.conv_blocks import InvertedResidual

__all__ = [
    "TF_BN_EPS",
    "TF_BN_MOMENTUM",
    "Conv2dSame",
    "StochasticDepthMBConv",
    "downsample",
    "pad_same",
    "tf_backbone",
]

# TensorFlow's BatchNorm defaults, kept by timm's tf_ backbones.
TF_BN_EPS, TF_BN_MOMENTUM = 1e-3, 0.01


def pad_same(x: Tensor, kernel: tuple[int, int], stride: tuple[int, int], value: float = 0.0) -> Tensor:
    """TensorFlow "SAME" padding: ``ceil(size / stride)`` outputs, an odd total's extra row/column bottom/right."""
    pads = []
    for size, k, s in zip(reversed(x.shape[-2:]), reversed(kernel), reversed(stride)):  # width first, as F.pad
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value) if any(pads) else x


class Conv2dSame(nn.Conv2d):
    """Conv2d with TensorFlow's "SAME" padding computed from the input size (timm's ``Conv2dSame``)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(pad_same(x, self.kernel_size, self.stride), self.weight, self.bias, self.stride, 0,
                        self.dilation, self.groups)  # fmt: skip


def downsample(x: Tensor, tf_padding: bool) -> Tensor:
    """3x3 stride-2 max pool: "same" (TF: padded with -inf at the bottom/right) or symmetric padding."""
    if tf_padding:
        return F.max_pool2d(pad_same(x, (3, 3), (2, 2), float("-inf")), kernel_size=3, stride=2)
    return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


class StochasticDepthMBConv(InvertedResidual):
    """EfficientNet's MBConv whose residual branch is dropped per sample with ``drop_prob`` in training."""

    drop_prob: float = 0.0

    def forward(self, x: Tensor) -> Tensor:
        out = self.block(x)
        if not self.use_residual:
            return out
        if self.training and self.drop_prob > 0.0:  # timm's drop_path: keep with 1 - p, rescale by 1 / (1 - p)
            keep = 1.0 - self.drop_prob
            out = out * x.new_empty(x.shape[0], 1, 1, 1).bernoulli_(keep).div_(keep)
        return out + x


def tf_backbone(backbone: nn.Module) -> None:
    """timm's tf_ EfficientNet: strided convs pad "same" from the input size; TensorFlow's BatchNorm."""
    for parent in list(backbone.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.BatchNorm2d):
                child.eps, child.momentum = TF_BN_EPS, TF_BN_MOMENTUM
            elif isinstance(child, nn.Conv2d) and child.stride != (1, 1):
                same = Conv2dSame(child.in_channels, child.out_channels, child.kernel_size, child.stride,
                                  groups=child.groups, bias=child.bias is not None)  # fmt: skip
                same.weight = child.weight
                setattr(parent, name, same)
