"""Background Matting: Sengupta et al., "Background Matting: The World is Your Green Screen",
CVPR 2020.

Follows the authors' ``networks.py`` (senguptaumd/Background-Matting, CC BY-NC-SA 4.0 for the
research code; TorchBench vendors it as ``Background_Matting``): ``ResnetConditionHR`` with
``input_nc=(3, 3, 1, 4)``, ``output_nc=4``, 7 + 3 residual blocks, batch norm, 512x512 inputs.
Four encoders (image, captured background, soft segmentation, 4 grey motion frames) are
combined by "context switching" 1x1 convs; two decoders predict alpha and foreground. As in the
reference code (not the paper), the motion cue's combiner is fed the background features: the
motion encoder runs and its output is unused.

Training is TorchBench's ``train()`` (``models/Background_Matting/__init__.py``:177-424), the
self-supervised adversarial stage on real videos (``train_real_fixed.py``), one batch per call:
a frozen copy ``netB`` pseudo-labels alpha and foreground; ``netG`` learns them (normalized L1 +
0.5 x Sobel-gradient L1 on alpha, masked L1 on foreground, composition L1, each weighted 0.05)
plus an LSGAN term from ``netD`` (a pix2pixHD 3-layer PatchGAN) on the prediction composited,
shifted sideways, onto another background; then ``netD`` is updated on real vs composite
(iteration 0 of its every-5th-update schedule). Adam 1e-4 (G) and 1e-5 (D). The composite is
built detached (the reference wraps it in ``Variable``), so the GAN term reaches only netD's
gradients. TorchBench has no eval (``eval()`` raises NotImplementedError) and declares CPU train
not implemented (``metadata.yaml``); eval here is netG's forward, and both modes run on CPU.
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
    disc_filters: int = 64  # netD's ndf


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


def _conv_init(module: nn.Module) -> None:
    # The reference's conv_init: Xavier-uniform(gain sqrt 2) convs, N(1, 0.2) BN scales.
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.xavier_uniform_(m.weight, gain=2**0.5)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.2)
            nn.init.zeros_(m.bias)


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
        _conv_init(self)

    def forward(
        self, image: torch.Tensor, back: torch.Tensor, seg: torch.Tensor, motion: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        image_high = self.enc_image_high(image)  # (B, 2f, H/2, W/2)
        image_feat = self.enc_image_low(image_high)  # (B, 4f, H/4, W/4)
        back_feat = self.enc_back(back)
        self.enc_motion(motion)  # computed and left unused, as in the reference's forward
        # The reference feeds back_feat to comb_multi too (the paper: the motion features).
        context = torch.cat(
            [
                self.comb_back(torch.cat([image_feat, back_feat], 1)),
                self.comb_seg(torch.cat([image_feat, self.enc_seg(seg)], 1)),
                self.comb_motion(torch.cat([image_feat, back_feat], 1)),
            ],
            1,
        )  # (B, 3p, H/4, W/4)
        shared = self.res_shared(torch.cat([image_feat, context], 1))  # (B, 4f, H/4, W/4)
        alpha = self.alpha_out(self.res_alpha(shared))
        fg = self.fg_out(torch.cat([self.fg_up(self.res_fg(shared)), image_high], 1))
        return alpha, fg


class PatchDiscriminatorHD(nn.Sequential):
    """pix2pixHD's ``NLayerDiscriminator`` (3 layers, kernel 4, padding 2, instance norm without
    affine): ``(B, 3, H, W)`` -> real/fake map ``(B, 1, H/8 + 3, W/8 + 3)``."""

    def __init__(self, in_channels: int = 3, filters: int = 64, n_layers: int = 3) -> None:
        layers: list[nn.Module] = [nn.Conv2d(in_channels, filters, 4, 2, 2), nn.LeakyReLU(0.2, True)]
        f = filters
        for n in range(1, n_layers + 1):
            stride = 2 if n < n_layers else 1  # the last hidden layer keeps the resolution
            layers += [
                nn.Conv2d(f, min(f * 2, 512), 4, stride, 2),
                nn.InstanceNorm2d(min(f * 2, 512)),
                nn.LeakyReLU(0.2, True),
            ]
            f = min(f * 2, 512)
        layers.append(nn.Conv2d(f, 1, 4, 1, 2))
        super().__init__(*layers)


class MattingGAN(nn.Module):
    """netG (trained), netB (its frozen, randomly initialised copy: the pseudo-labeller) and netD."""

    def __init__(self, cfg: MattingConfig) -> None:
        super().__init__()
        self.net_g = ResnetConditionHR(cfg)
        self.net_b = ResnetConditionHR(cfg).requires_grad_(False)
        self.net_d = PatchDiscriminatorHD(cfg.image_channels, cfg.disc_filters)
        _conv_init(self.net_d)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.net_g(*inputs)

    def train(self, mode: bool = True) -> MattingGAN:
        super().train(mode)
        self.net_b.eval()  # the reference keeps netB in eval mode
        return self


def normalized_l1(target: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per image sum |target - pred| over the mask divided by the mask's area (0 for an empty mask),
    averaged over the batch: the reference's ``normalized_l1_loss``."""
    area = mask.flatten(1).sum(1)
    err = ((target * mask - pred * mask).abs().flatten(1).sum(1)) / (area + 1e-6)
    return torch.where(area > 0, err, torch.zeros_like(err)).mean()


def alpha_gradient_l1(alpha: torch.Tensor, alpha_pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """normalized L1 between the Sobel x and y gradients of two alpha mattes."""
    sobel_x = torch.tensor([[1.0, 0.0, -1.0], [2.0, 0.0, -2.0], [1.0, 0.0, -1.0]], device=alpha.device)
    loss = alpha.new_zeros(())
    for kernel in (sobel_x, sobel_x.t()):
        k = kernel.to(alpha.dtype).view(1, 1, 3, 3)
        loss = loss + normalized_l1(F.conv2d(alpha, k, padding=1), F.conv2d(alpha_pred, k, padding=1), mask)
    return loss


def composite(alpha: torch.Tensor, fg: torch.Tensor, back: torch.Tensor) -> torch.Tensor:
    """fg over back with alpha in [-1, 1]."""
    alpha = (alpha + 1) / 2
    return fg * alpha + (1 - alpha) * back


def _lsgan(pred: torch.Tensor, real: bool) -> torch.Tensor:
    return F.mse_loss(pred, torch.full_like(pred, float(real)))


class MattingGANWorkload(Workload):
    """Train: one step of the reference's adversarial stage (G, then D); eval: netG's forward."""

    needs_optimizer = False

    def __init__(self, ctx: BuildContext, module: MattingGAN, inputs: tuple, targets: tuple) -> None:
        super().__init__(ctx, module, inputs, targets)
        self.generator = ctx.generator()  # background choice and shifts, as the reference's numpy RNG
        if ctx.train:
            self.optimizer_g = ctx.optimizer(module.net_g.parameters(), "adam", lr=1e-4)
            self.optimizer_d = ctx.optimizer(module.net_d.parameters(), "adam", lr=1e-5)

    def shifted_composite(
        self, alpha: torch.Tensor, fg: torch.Tensor, back: torch.Tensor, seg: torch.Tensor
    ) -> torch.Tensor:
        """The reference's ``compose_image_withshift``: each prediction rolled sideways by a random
        offset that keeps the subject (seg > -0.8) at least 10 px inside, composited on ``back``;
        detached, as the reference returns it through ``Variable``."""
        width = seg.shape[-1]
        columns = (seg > -0.8).flatten(1, 2).any(1)  # (B, W): columns the subject covers
        first = columns.float().argmax(1)
        last = width - 1 - columns.flip(1).float().argmax(1)
        with torch.no_grad():
            out = []
            for t, (lo, hi) in enumerate(zip(first.tolist(), last.tolist())):  # the reference syncs here too
                shift = int(torch.randint(10 - lo, width - hi - 10, (), generator=self.generator))
                out.append(composite(alpha[t].roll(shift, -1), fg[t].roll(shift, -1), back[t]))
            return torch.stack(out)

    def train_step(self) -> torch.Tensor:
        image, back, seg, motion = self.inputs
        seg_gt, back_rnd = self.targets
        net = self.module
        with torch.no_grad(), self.autocast():
            alpha_sup, fg_sup = net.net_b(image, back, seg, motion)  # pseudo-supervision
        mask = (alpha_sup > -0.98).to(image.dtype)
        mask_gt = (seg_gt > 0.95).to(image.dtype)
        with self.autocast():
            alpha, fg = net.net_g(image, back, seg, motion)
            ones = torch.ones_like(seg)
            loss_alpha = normalized_l1(alpha_sup, alpha, ones) + 0.5 * alpha_gradient_l1(alpha_sup, alpha, ones)
            loss_fg = normalized_l1(fg_sup, fg, mask)
            loss_comp = normalized_l1(image, composite(alpha, fg, back), mask_gt)
        perm = torch.randperm(back.shape[0], generator=self.generator).to(back.device)
        back_other = back_rnd if float(torch.rand((), generator=self.generator)) > 0.5 else back[perm]
        solid = (alpha > 0.95).to(image.dtype)
        image_sh = self.shifted_composite(alpha, image * solid + fg * (1 - solid), back_other, seg)
        with self.autocast():
            loss_g = _lsgan(net.net_d(image_sh), True) + 0.05 * (loss_comp + loss_alpha + loss_fg)
        self.optimizer_g.zero_grad(set_to_none=True)
        loss_g.backward()
        self.optimizer_g.step()
        with self.autocast():
            loss_d = 0.5 * (_lsgan(net.net_d(image), True) + _lsgan(net.net_d(image_sh), False))
        self.optimizer_d.zero_grad(set_to_none=True)  # also drops the D gradients loss_g left
        loss_d.backward()
        self.optimizer_d.step()
        return (loss_g + loss_d).detach()


def _create_matting(ctx: BuildContext, **kwargs: Any) -> Workload:
    # Smoke: a quarter of the filters (the weights, updated by Adam, set the step's cost) with
    # every encoder, branch, residual block and the discriminator kept, at 32x32 (room for the
    # sideways shift's 10-pixel margins).
    small = MattingConfig(filters=16, part_filters=16, disc_filters=16, image_size=32)
    cfg = replace(ctx.pick(MattingConfig(), small), **kwargs)
    b, s = ctx.batch_size, cfg.image_size
    module = MattingGAN(cfg)

    def frames(channels: int) -> torch.Tensor:
        return ctx.rand(b, channels, s, s) * 2 - 1  # the loader's [-1, 1] images

    image, back, motion = frames(cfg.image_channels), frames(cfg.back_channels), frames(cfg.motion_channels)
    # Soft segmentation: the subject inside the middle half of the rows and third of the columns.
    rows = torch.arange(s, device=ctx.device).view(s, 1)
    cols = torch.arange(s, device=ctx.device).view(1, s)
    subject = (rows >= s // 4) & (rows < 3 * s // 4) & (cols >= s // 3) & (cols < 2 * s // 3)
    seg = torch.where(subject, frames(cfg.seg_channels).abs(), -torch.ones((), device=ctx.device))
    targets = (
        (torch.where(subject, frames(cfg.seg_channels).abs(), -1.0), frames(cfg.back_channels)) if ctx.train else None
    )  # seg-gt, back-rnd
    return MattingGANWorkload(ctx, module, (image, back, seg, motion), targets)


@register_model(
    domain="vision",
    task="matting",
    source="Sengupta et al., Background Matting, CVPR 2020; senguptaumd/Background-Matting",
    batch_size=(4, 1),
    param_count=38_581_577,  # netG 17,908,420 + frozen netB 17,908,420 + netD 2,764,737
    notes="Train: TorchBench's adversarial step (netB pseudo-labels, netG then netD updates); "
    "eval (not in TorchBench): netG's forward.",
)
def Background_Matting(ctx: BuildContext, **kwargs: Any) -> Workload:  # noqa: N802 (TorchBench name)
    """ResnetConditionHR (7 + 3 residual blocks) trained against a PatchGAN on 512x512 video frames."""
    return _create_matting(ctx, **kwargs)
