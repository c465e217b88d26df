"""ResNet generator and PatchGAN discriminator of pytorch-CycleGAN-and-pix2pix, trained pix2pix-style.

Zhu et al., "Unpaired Image-to-Image Translation using Cycle-Consistent Adversarial Networks",
2017, and Isola et al., "Image-to-Image Translation with Conditional Adversarial Networks",
2017; reference implementation junyanz/pytorch-CycleGAN-and-pix2pix (BSD license),
``models/networks.py``: ``resnet_9blocks`` generator (11.378 M parameters) and the
``basic`` 70x70 PatchGAN (``n_layers=3``), instance norm, ``normal`` init with gain 0.02.
One iteration is pix2pix's ``optimize_parameters``: a D update on (A, G(A)) vs (A, B) pairs,
then a G update with vanilla GAN loss + 100 x L1.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ...common.adversarial import AdversarialWorkload, normal_init_

__all__ = ["ResnetBlock"]

# Instance norm without affine parameters or running statistics, as `--norm instance`.
_instance_norm = functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)


class ResnetBlock(nn.Module):
    """x + [reflect-pad, conv3x3, norm, ReLU, reflect-pad, conv3x3, norm](x); shape-preserving."""

    def __init__(self, dim: int, norm_layer: Callable[[int], nn.Module], use_dropout: bool, use_bias: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.ReflectionPad2d(1),
            nn.Conv2d(dim, dim, 3, bias=use_bias),
            norm_layer(dim),
            nn.ReLU(True),
        ]
        if use_dropout:
            layers.append(nn.Dropout(0.5))
        layers += [nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, 3, bias=use_bias), norm_layer(dim)]
        self.conv_block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv_block(x)


@dataclass(frozen=True)
class Pix2PixConfig:
    in_channels: int = 3  # input_nc (domain A)
    out_channels: int = 3  # output_nc (domain B)
    gen_filters: int = 64  # ngf
    disc_filters: int = 64  # ndf
    n_blocks: int = 9  # resnet_9blocks: the 256x256 generator
    disc_layers: int = 3  # n_layers=3 gives the 70x70 receptive field
    use_dropout: bool = False  # CycleGAN runs with --no_dropout
    image_size: int = 256  # load_size 286 randomly cropped to crop_size 256
    lambda_l1: float = 100.0  # pix2pix --lambda_L1


class ResnetGenerator(nn.Sequential):
    """``(B, in, H, W)`` -> ``(B, out, H, W)``: c7s1-64, d128, d256, 9 x R256, u128, u64, c7s1-out, tanh."""

    def __init__(self, cfg: Pix2PixConfig) -> None:
        f, norm = cfg.gen_filters, _instance_norm
        layers: list[nn.Module] = [nn.ReflectionPad2d(3), nn.Conv2d(cfg.in_channels, f, 7), norm(f), nn.ReLU(True)]
        for mult in (1, 2):  # downsample: (B, 2f, H/2, W/2), (B, 4f, H/4, W/4)
            layers += [nn.Conv2d(f * mult, f * mult * 2, 3, stride=2, padding=1), norm(f * mult * 2), nn.ReLU(True)]
        layers += [ResnetBlock(f * 4, norm, cfg.use_dropout, use_bias=True) for _ in range(cfg.n_blocks)]
        for mult in (4, 2):  # upsample back to (B, f, H, W)
            layers += [
                nn.ConvTranspose2d(f * mult, f * mult // 2, 3, stride=2, padding=1, output_padding=1),
                norm(f * mult // 2),
                nn.ReLU(True),
            ]
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(f, cfg.out_channels, 7), nn.Tanh()]
        super().__init__(*layers)


class PatchDiscriminator(nn.Sequential):
    """PatchGAN: ``(B, C, 256, 256)`` -> real/fake logits per 70x70 patch ``(B, 1, 30, 30)``."""

    def __init__(self, in_channels: int, filters: int, n_layers: int) -> None:
        norm = _instance_norm
        layers: list[nn.Module] = [nn.Conv2d(in_channels, filters, 4, 2, 1), nn.LeakyReLU(0.2, True)]
        mult = 1
        for n in range(1, n_layers + 1):
            prev, mult = mult, min(2**n, 8)
            stride = 2 if n < n_layers else 1  # the last hidden layer keeps the resolution
            layers += [
                nn.Conv2d(filters * prev, filters * mult, 4, stride, 1),
                norm(filters * mult),
                nn.LeakyReLU(0.2, True),
            ]
        layers.append(nn.Conv2d(filters * mult, 1, 4, 1, 1))
        super().__init__(*layers)


class Pix2PixWorkload(AdversarialWorkload):
    """Train: D on (A, G(A)) vs (A, B), then G with GAN + lambda x L1; eval: G(A)."""

    def train_step(self) -> torch.Tensor:
        (real_a,) = self.inputs
        real_b = self.targets
        gan_loss = nn.functional.binary_cross_entropy_with_logits  # --gan_mode vanilla
        with self.autocast():
            fake_b = self.generator(real_a)
            pred_fake = self.discriminator(torch.cat([real_a, fake_b.detach()], 1))
            pred_real = self.discriminator(torch.cat([real_a, real_b], 1))
            loss_d = 0.5 * (
                gan_loss(pred_fake, torch.zeros_like(pred_fake)) + gan_loss(pred_real, torch.ones_like(pred_real))
            )
        self.update(self.optimizer_d, loss_d)
        self.discriminator.requires_grad_(False)  # D needs no gradients while G is optimized
        try:
            with self.autocast():
                pred_fake = self.discriminator(torch.cat([real_a, fake_b], 1))
                loss_g = gan_loss(pred_fake, torch.ones_like(pred_fake))
                loss_g = loss_g + self.cfg.lambda_l1 * nn.functional.l1_loss(fake_b, real_b)
            self.update(self.optimizer_g, loss_g)
        finally:
            self.discriminator.requires_grad_(True)
        return (loss_d + loss_g).detach()


def _create_pix2pix(ctx: BuildContext, **kwargs: Any) -> Workload:
    # Smoke: a quarter of the generator and discriminator filters (their 14.1M weights, updated by
    # Adam, set the step's cost), all nine residual blocks and three PatchGAN layers kept.
    cfg = replace(ctx.pick(Pix2PixConfig(), Pix2PixConfig(gen_filters=16, disc_filters=16)), **kwargs)
    size = ctx.pick(cfg.image_size, 32)  # smallest size the PatchGAN still maps to a 2x2 patch grid
    generator = ResnetGenerator(cfg)
    # The conditional D sees the input and output images stacked: in + out channels.
    discriminator = PatchDiscriminator(cfg.in_channels + cfg.out_channels, cfg.disc_filters, cfg.disc_layers)
    normal_init_(generator)
    normal_init_(discriminator)
    real_a = ctx.rand(ctx.batch_size, cfg.in_channels, size, size) * 2 - 1  # images normalized to [-1, 1]
    real_b = ctx.rand(ctx.batch_size, cfg.out_channels, size, size) * 2 - 1 if ctx.train else None
    return Pix2PixWorkload(ctx, generator, discriminator, (real_a,), real_b, cfg=cfg, lr=2e-4, betas=(0.5, 0.999))


@register_model(
    domain="vision",
    task="image_to_image",
    source="Zhu et al., CycleGAN, 2017; Isola et al., pix2pix, 2017; junyanz/pytorch-CycleGAN-and-pix2pix",
    batch_size=(1, 1),
    tags=("gan",),
    param_count=14_145_988,  # resnet_9blocks G 11,378,179 + 6-channel PatchGAN D 2,767,809
    notes="pix2pix-style step (one G, one D) on CycleGAN's ResNet-9-block generator; eval is G alone.",
)
def pytorch_CycleGAN_and_pix2pix(ctx: BuildContext, **kwargs: Any) -> Workload:  # noqa: N802 (TorchBench name)
    """ResNet-9-block generator + 70x70 PatchGAN, 256x256, pix2pix G and D updates."""
    return _create_pix2pix(ctx, **kwargs)
