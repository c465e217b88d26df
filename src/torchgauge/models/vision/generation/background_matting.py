"""Background Matting: Sengupta et al., "Background Matting: The World is Your Green Screen",
CVPR 2020.

Follows the authors' ``networks.py`` (senguptaumd/Background-Matting, CC BY-NC-SA 4.0 for the
research code; TorchBench vendors it as ``Background_Matting``): ``ResnetConditionHR`` with
``input_nc=(3, 3, 1, 4)``, ``output_nc=4``, 7 + 3 residual blocks, batch norm, 512x512 inputs.
Four encoders (image, captured background, soft segmentation, 4 grey motion frames) are
combined by "context switching" 1x1 convs; two decoders predict alpha and foreground.
Training is the supervised (Adobe) stage with L1 on alpha and 2 x L1 on foreground.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .cyclegan import ResnetBlock

__all__: list[str] = []


@dataclass(frozen=True)
class MattingConfig:
    image_channels: int = 3  # input_nc[0]: the RGB frame with the subject
    back_channels: int = 3  # input_nc[1]: the captured background
    seg_channels: int = 1  # input_nc[2]: soft segmentation of the subject
    motion_channels: int = 4  # input_nc[3]: 4 neighbouring frames in grey
    filters: int = 64  # ngf
    part_filters: int = 64  # nf_part: width of each context-switching branch
    shared_blocks: int = 7  # n_blocks1: residual blocks before the alpha/fg split
    head_blocks: int = 3  # n_blocks2: residual blocks per head
    image_size: int = 512  # opt.resolution


def _conv_bn_relu(
    in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0, bias: bool = True
) -> list[nn.Module]:
    return [nn.Conv2d(in_ch, out_ch, kernel, stride, padding, bias=bias), nn.BatchNorm2d(out_ch), nn.ReLU(True)]


def _encoder(in_ch: int, f: int) -> nn.Sequential:
    # c7s1-f, d2f, d4f: (B, in, H, W) -> (B, 4f, H/4, W/4)
    return nn.Sequential(
        nn.ReflectionPad2d(3),
        *_conv_bn_relu(in_ch, f, 7),
        *_conv_bn_relu(f, 2 * f, 3, 2, 1),
        *_conv_bn_relu(2 * f, 4 * f, 3, 2, 1),
    )


def _upsample_conv(in_ch: int, out_ch: int) -> list[nn.Module]:
    # Bilinear x2 then conv3x3 (the reference replaced transposed convs to avoid checkerboards).
    return [nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), *_conv_bn_relu(in_ch, out_ch, 3, 1, 1)]


def _res_blocks(dim: int, n: int) -> list[nn.Module]:
    return [ResnetBlock(dim, nn.BatchNorm2d, use_dropout=False, use_bias=True) for _ in range(n)]


class ResnetConditionHR(nn.Module):
    """(image, back, seg, motion) at ``(B, *, H, W)`` -> (alpha ``(B, 1, H, W)`` in [-1, 1], fg ``(B, 3, H, W)``)."""

    def __init__(self, cfg: MattingConfig) -> None:
        super().__init__()
        f, p = cfg.filters, cfg.part_filters
        enc_image = _encoder(cfg.image_channels, f)
        self.enc_image_high = enc_image[:7]  # (B, 2f, H/2, W/2), reused by the fg decoder as a skip
        self.enc_image_low = enc_image[7:]  # (B, 4f, H/4, W/4)
        self.enc_back = _encoder(cfg.back_channels, f)
        self.enc_seg = _encoder(cfg.seg_channels, f)
        self.enc_motion = _encoder(cfg.motion_channels, f)
        # Context switching: each cue is judged jointly with the image features.
        self.comb_back = nn.Sequential(*_conv_bn_relu(8 * f, p, 1, bias=False))
        self.comb_seg = nn.Sequential(*_conv_bn_relu(8 * f, p, 1, bias=False))
        self.comb_motion = nn.Sequential(*_conv_bn_relu(8 * f, p, 1, bias=False))
        self.res_shared = nn.Sequential(
            *_conv_bn_relu(4 * f + 3 * p, 4 * f, 1, bias=False), *_res_blocks(4 * f, cfg.shared_blocks)
        )
        self.res_alpha = nn.Sequential(*_res_blocks(4 * f, cfg.head_blocks))
        self.res_fg = nn.Sequential(*_res_blocks(4 * f, cfg.head_blocks))
        self.alpha_out = nn.Sequential(
            *_upsample_conv(4 * f, 2 * f),
            *_upsample_conv(2 * f, f),
            nn.ReflectionPad2d(3),
            nn.Conv2d(f, 1, 7),
            nn.Tanh(),
        )
        self.fg_up = nn.Sequential(*_upsample_conv(4 * f, 2 * f))  # (B, 2f, H/2, W/2)
        self.fg_out = nn.Sequential(*_upsample_conv(4 * f, f), nn.ReflectionPad2d(3), nn.Conv2d(f, 3, 7))
        self._init_weights()

    def _init_weights(self) -> None:
        # The reference's conv_init: Xavier-uniform(gain sqrt 2) convs, N(1, 0.2) BN scales.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.xavier_uniform_(m.weight, gain=2**0.5)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.2)
                nn.init.zeros_(m.bias)

    def forward(
        self, image: torch.Tensor, back: torch.Tensor, seg: torch.Tensor, motion: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        image_high = self.enc_image_high(image)  # (B, 2f, H/2, W/2)
        image_feat = self.enc_image_low(image_high)  # (B, 4f, H/4, W/4)
        # The reference feeds back_feat to comb_multi too (leaving the motion encoder unused);
        # we follow the paper and feed the motion features.
        context = torch.cat(
            [
                self.comb_back(torch.cat([image_feat, self.enc_back(back)], 1)),
                self.comb_seg(torch.cat([image_feat, self.enc_seg(seg)], 1)),
                self.comb_motion(torch.cat([image_feat, self.enc_motion(motion)], 1)),
            ],
            1,
        )  # (B, 3p, H/4, W/4)
        shared = self.res_shared(torch.cat([image_feat, context], 1))  # (B, 4f, H/4, W/4)
        alpha = self.alpha_out(self.res_alpha(shared))
        fg = self.fg_out(torch.cat([self.fg_up(self.res_fg(shared)), image_high], 1))
        return alpha, fg


def matting_loss(
    outputs: tuple[torch.Tensor, torch.Tensor], targets: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """L1 on alpha + 2 x L1 on foreground (train_adobe.py weights)."""
    (alpha, fg), (alpha_gt, fg_gt) = outputs, targets
    return F.l1_loss(alpha, alpha_gt) + 2 * F.l1_loss(fg, fg_gt)


def _create_matting(ctx: BuildContext, **kwargs: Any) -> Workload:
    # Smoke: a quarter of the filters (the 17.9M weights, updated by Adam, set the step's cost)
    # with every encoder, branch and residual block kept.
    cfg = replace(ctx.pick(MattingConfig(), MattingConfig(filters=16, part_filters=16)), **kwargs)
    b, s = ctx.batch_size, ctx.pick(cfg.image_size, 16)  # smoke: 4x4 features in the residual blocks
    module = ResnetConditionHR(cfg)
    inputs = tuple(
        ctx.rand(b, ch, s, s) * 2 - 1  # inputs normalized to [-1, 1] like the reference loader
        for ch in (cfg.image_channels, cfg.back_channels, cfg.seg_channels, cfg.motion_channels)
    )
    targets = (ctx.rand(b, 1, s, s) * 2 - 1, ctx.rand(b, 3, s, s) * 2 - 1) if ctx.train else None
    opt = ctx.optimizer(module.parameters(), "adam", lr=1e-4) if ctx.train else None
    return Workload(ctx, module, inputs, targets, loss_fn=matting_loss, optimizer=opt)


@register_model(
    domain="vision",
    task="matting",
    source="Sengupta et al., Background Matting, CVPR 2020; senguptaumd/Background-Matting",
    batch_size=(4, 1),
    param_count=17_908_420,
    notes="Supervised stage only (alpha/fg L1); the adversarial fine-tuning on real videos is not modelled.",
)
def Background_Matting(ctx: BuildContext, **kwargs: Any) -> Workload:  # noqa: N802 (TorchBench name)
    """ResnetConditionHR (7 + 3 residual blocks) on 512x512 image, background, seg and motion frames."""
    return _create_matting(ctx, **kwargs)
