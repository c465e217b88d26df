"""NFNet: Brock et al., "High-Performance Large-Scale Image Recognition Without Normalization", 2021.

Follows timm's ``nfnet.py`` (Apache-2.0; a port of DeepMind's JAX NFNets, Apache-2.0) for
``dm_nfnet_f0``: no BatchNorm anywhere. Every conv uses scaled weight standardisation
(Brock et al., "Characterizing signal propagation...", 2021) with a learnable per-channel
gain; residual blocks scale their input by ``beta = 1/sqrt(expected variance)`` and their
branch by ``alpha = 0.2``, with a zero-initialised "skipinit" gain on the branch. Convs pad
like TensorFlow's "SAME". timm trains F0 at 192 px and evaluates at 256 px.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, image_classification

from ..common.conv_blocks import ClassifierHead, SqueezeExcite
from ..common.torchbench_precision import TIMM_FACTORY
from .timm_step import timm_classification

__all__ = ["NFNet", "NFNetConfig", "ScaledStdConv2d"]

# Makes GELU variance-preserving for unit-Gaussian inputs (nfnets' _nonlin_gamma["gelu"]).
GELU_GAMMA = 1.7015043497085571


@dataclass(frozen=True)
class NFNetConfig:
    depths: tuple[int, ...] = (1, 2, 6, 3)  # F0; F1..F7 double and triple these
    channels: tuple[int, ...] = (256, 512, 1536, 1536)
    stem_ch: int = 128
    group_size: int = 128  # channels per group of the 3x3 convs
    bottle_ratio: float = 0.5  # bottleneck width relative to the block's output width
    alpha: float = 0.2  # residual branch scale
    se_ratio: float = 0.5
    attn_gain: float = 2.0  # squeeze-excite output is doubled to keep the branch's variance
    head_ratio: float = 2.0  # final 1x1 conv widens to head_ratio * channels[-1]
    dropout: float = 0.2
    num_classes: int = 1000


class ScaledStdConv2d(nn.Conv2d):
    """Conv2d whose weight is standardised per output channel, scaled by 1/sqrt(fan_in) and a gain.

    Padding is TensorFlow's "SAME": symmetric for stride 1, and for stride 2 computed from the
    input size (extra pixel on the bottom/right), as the reference checkpoints expect.
    """

    def __init__(
        self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, groups: int = 1, eps: float = 1e-5
    ) -> None:
        padding = (kernel_size - 1) // 2 if stride == 1 else 0  # strided convs pad in forward
        super().__init__(in_ch, out_ch, kernel_size, stride, padding, groups=groups)
        self.gain = nn.Parameter(torch.ones(out_ch, 1, 1, 1))
        self.eps = eps  # 1e-5: timm NfCfg.std_conv_eps, which dm_nfnet_f0 uses

    def standardized_weight(self) -> torch.Tensor:
        fan_in = self.weight[0].numel()
        var, mean = torch.var_mean(self.weight, dim=(1, 2, 3), correction=0, keepdim=True)
        return self.gain * (self.weight - mean) * torch.rsqrt((var + self.eps) * fan_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride[0] > 1:
            x = F.pad(x, _same_padding(x.shape[-2:], self.kernel_size[0], self.stride[0]))
        return F.conv2d(x, self.standardized_weight(), self.bias, self.stride, self.padding, groups=self.groups)


def _same_padding(size: torch.Size, kernel: int, stride: int) -> tuple[int, int, int, int]:
    # (left, right, top, bottom) so that out = ceil(in / stride), as in TF "SAME".
    pads = []
    for dim in (size[1], size[0]):
        total = max((math.ceil(dim / stride) - 1) * stride + kernel - dim, 0)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


class GammaGELU(nn.Module):
    """GELU rescaled by :data:`GELU_GAMMA` to keep activations at unit variance."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x) * GELU_GAMMA


class NFBlock(nn.Module):
    """Pre-activation bottleneck: act -> 1x1 -> 3x3 (strided) -> 3x3 -> 1x1 -> SE, all grouped 3x3s."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, beta: float, cfg: NFNetConfig) -> None:
        super().__init__()
        mid_ch = int(out_ch * cfg.bottle_ratio)
        groups = mid_ch // cfg.group_size
        self.alpha, self.beta, self.attn_gain = cfg.alpha, beta, cfg.attn_gain
        self.downsample = None
        if in_ch != out_ch or stride != 1:
            pool = nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False) if stride > 1 else nn.Identity()
            self.downsample = nn.Sequential(pool, ScaledStdConv2d(in_ch, out_ch, 1))
        self.act = GammaGELU()
        self.conv1 = ScaledStdConv2d(in_ch, mid_ch, 1)
        self.conv2 = ScaledStdConv2d(mid_ch, mid_ch, 3, stride, groups=groups)
        self.conv2b = ScaledStdConv2d(mid_ch, mid_ch, 3, groups=groups)  # the F-series' extra 3x3
        self.conv3 = ScaledStdConv2d(mid_ch, out_ch, 1)
        self.se = SqueezeExcite(out_ch, int(out_ch * cfg.se_ratio))
        self.skipinit_gain = nn.Parameter(torch.zeros(()))  # branch starts switched off

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(x) * self.beta  # (B, C_in, H, W), unit variance again
        shortcut = x if self.downsample is None else self.downsample(out)
        branch = self.conv2(self.act(self.conv1(out)))
        branch = self.conv2b(self.act(branch))
        branch = self.attn_gain * self.se(self.conv3(self.act(branch)))
        return branch * self.skipinit_gain * self.alpha + shortcut


class NFNet(nn.Module):
    """Images ``(B, 3, H, W)`` -> logits ``(B, num_classes)``; output stride 32."""

    def __init__(self, cfg: NFNetConfig) -> None:
        super().__init__()
        s = cfg.stem_ch
        act = GammaGELU
        self.stem = nn.Sequential(  # four 3x3 convs, stride 4 in all: (B, 128, H/4, W/4)
            ScaledStdConv2d(3, s // 8, 3, 2), act(),
            ScaledStdConv2d(s // 8, s // 4, 3), act(),
            ScaledStdConv2d(s // 4, s // 2, 3), act(),
            ScaledStdConv2d(s // 2, s, 3, 2),
        )  # fmt: skip
        stages, in_ch, expected_var = [], s, 1.0
        for i, (depth, out_ch) in enumerate(zip(cfg.depths, cfg.channels)):
            blocks = []
            for j in range(depth):
                stride = (1 if i == 0 else 2) if j == 0 else 1  # the stem already reduced by 4
                blocks.append(NFBlock(in_ch, out_ch, stride, expected_var**-0.5, cfg))
                # Variance grows by alpha^2 per block and is reset by each stage's projected shortcut.
                expected_var = (1.0 if j == 0 else expected_var) + cfg.alpha**2
                in_ch = out_ch
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)  # (B, 1536, H/32, W/32)
        num_features = int(cfg.channels[-1] * cfg.head_ratio)
        self.final_conv = ScaledStdConv2d(in_ch, num_features, 1)
        self.final_act = act()
        self.head = ClassifierHead(num_features, cfg.num_classes, cfg.dropout)
        self._init_weights()

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):  # standardisation makes the scale irrelevant; fan-in as timm
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="linear")
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.head.fc.weight, 0.0, 0.01)
        nn.init.zeros_(self.head.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.final_act(self.final_conv(self.stages(self.stem(x)))))


def _nfnet_config(ctx: BuildContext, cfg: NFNetConfig, **kwargs) -> NFNetConfig:
    if ctx.smoke:  # same blocks at a quarter of the width: 71M standardised weights take seconds per CPU step
        narrow = {"channels": tuple(c // 4 for c in cfg.channels), "stem_ch": cfg.stem_ch // 4}
        cfg = replace(cfg, group_size=cfg.group_size // 4, **narrow)
    return replace(cfg, **kwargs)


def _create_nfnet(ctx: BuildContext, cfg: NFNetConfig, **kwargs) -> Workload:
    cfg = _nfnet_config(ctx, cfg, **kwargs)
    image_size = ctx.pick(192 if ctx.train else 256, 32)  # timm's train / test resolutions
    return image_classification(ctx, NFNet(cfg), image_size=image_size, num_classes=cfg.num_classes)


@register_model(
    domain="vision", task="classification", source="Brock et al., NFNets, 2021; timm dm_nfnet_f0",
    batch_size=(128, 128), param_count=71_489_284,
)  # fmt: skip
def dm_nfnet_f0(ctx: BuildContext, **kwargs) -> Workload:
    """NFNet-F0 (DeepMind weights layout), train 192 px / eval 256 px."""
    return _create_nfnet(ctx, NFNetConfig(), **kwargs)


@register_model(
    domain="vision", task="classification",
    source="Brock et al., NFNets, 2021; timm dm_nfnet_f0 via TorchBench's timm harness",
    batch_size=(128, 128), param_count=71_489_284,
    torchbench_precision=TIMM_FACTORY,
)  # fmt: skip
def timm_nfnet(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's timm_nfnet: NFNet-F0 (timm dm_nfnet_f0, no classifier dropout) at 192 px in both modes,
    timm's SGD step."""
    # TorchBench feeds default_cfg["input_size"] (the 192 px train resolution) to eval as well.
    cfg = _nfnet_config(ctx, NFNetConfig(), **{"dropout": 0.0, **kwargs})  # TorchBench passes drop_rate=0.0
    return timm_classification(ctx, NFNet(cfg), image_size=ctx.pick(192, 32), num_classes=cfg.num_classes)
