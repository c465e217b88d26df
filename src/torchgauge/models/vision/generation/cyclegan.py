"""CycleGAN (as TorchBench's ``pytorch_CycleGAN_and_pix2pix`` trains it) and pix2pix.

Zhu et al., "Unpaired Image-to-Image Translation using Cycle-Consistent Adversarial Networks",
2017, and Isola et al., "Image-to-Image Translation with Conditional Adversarial Networks",
2017; reference implementation junyanz/pytorch-CycleGAN-and-pix2pix (BSD license),
``models/networks.py``: ``resnet_9blocks`` generator (11.378 M parameters) and the
``basic`` 70x70 PatchGAN (``n_layers=3``), instance norm, ``normal`` init with gain 0.02.

``pytorch_CycleGAN_and_pix2pix`` is TorchBench's workload: its ``train()`` runs its training
loop, which breaks after the first batch of the first epoch (``train_cyclegan.py``:110-115),
so one call is one ``CycleGANModel.optimize_parameters`` on a (horse, zebra) pair of 256x256
crops: G_A and G_B (resnet_9blocks, no dropout) forward A->B->A and B->A->B, a joint G update
on LSGAN + 10 x cycle L1 + 5 x identity L1 (Adam 2e-4, betas (0.5, 0.999)), then D_A and D_B
(basic PatchGAN, 3 channels) on real vs pooled fakes. Its eval is the test model's generator
on one 256x256 image (``test_cyclegan.py``:42-70).

``pix2pix`` keeps this module's earlier workload, pix2pix's ``optimize_parameters``: a D update
on (A, G(A)) vs (A, B) pairs, then a G update with vanilla GAN loss + 100 x L1.
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


@dataclass(frozen=True)
class CycleGANConfig:
    gen_filters: int = 64  # ngf
    disc_filters: int = 64  # ndf
    image_size: int = 256  # crop_size (load_size 286 randomly cropped)
    lambda_a: float = 10.0  # cycle loss A -> B -> A
    lambda_b: float = 10.0  # cycle loss B -> A -> B
    lambda_identity: float = 0.5  # identity loss weight, relative to lambda_a / lambda_b
    pool_size: int = 50  # --pool_size: fakes the discriminators see are drawn from this history


class ImagePool:
    """pytorch-CycleGAN's ``ImagePool``: the first ``size`` fakes pass through and are stored;
    afterwards each fake is, with probability 1/2, swapped for a stored one (which it replaces)."""

    def __init__(self, size: int, generator: torch.Generator) -> None:
        self.size, self.generator, self.images = size, generator, []

    def query(self, images: torch.Tensor) -> torch.Tensor:
        out = []
        for image in images.detach().split(1):
            if len(self.images) < self.size:
                self.images.append(image)
                out.append(image)
            elif torch.rand((), generator=self.generator) > 0.5:
                slot = int(torch.randint(self.size, (), generator=self.generator))
                out.append(self.images[slot].clone())
                self.images[slot] = image
            else:
                out.append(image)
        return torch.cat(out)


class CycleGAN(nn.Module):
    """G_A: A -> B, G_B: B -> A (ResNet-9-block generators) and their PatchGAN critics D_A, D_B."""

    def __init__(self, cfg: CycleGANConfig) -> None:
        super().__init__()
        g_cfg = Pix2PixConfig(gen_filters=cfg.gen_filters)
        self.g_a, self.g_b = ResnetGenerator(g_cfg), ResnetGenerator(g_cfg)
        self.d_a = PatchDiscriminator(3, cfg.disc_filters, 3)  # judges B-domain images
        self.d_b = PatchDiscriminator(3, cfg.disc_filters, 3)
        normal_init_(self)

    def forward(self, real_a: torch.Tensor) -> torch.Tensor:
        return self.g_a(real_a)


class CycleGANWorkload(Workload):
    """Train: one ``CycleGANModel.optimize_parameters`` (G_A and G_B, then D_A and D_B)."""

    needs_optimizer = False

    def __init__(self, ctx: BuildContext, module: CycleGAN, inputs: tuple, cfg: CycleGANConfig) -> None:
        super().__init__(ctx, module, inputs)
        self.cfg = cfg
        gens = [*module.g_a.parameters(), *module.g_b.parameters()]
        discs = [*module.d_a.parameters(), *module.d_b.parameters()]
        self.optimizer_g = ctx.optimizer(gens, "adam", lr=2e-4, betas=(0.5, 0.999))
        self.optimizer_d = ctx.optimizer(discs, "adam", lr=2e-4, betas=(0.5, 0.999))
        self.fake_a_pool = ImagePool(cfg.pool_size, ctx.generator())
        self.fake_b_pool = ImagePool(cfg.pool_size, ctx.generator())

    def train_step(self) -> torch.Tensor:
        real_a, real_b = self.inputs
        cfg, net = self.cfg, self.module
        gan_loss = nn.functional.mse_loss  # --gan_mode lsgan: targets 1 (real) and 0 (fake)
        l1 = nn.functional.l1_loss
        with self.autocast():
            fake_b = net.g_a(real_a)
            rec_a = net.g_b(fake_b)
            fake_a = net.g_b(real_b)
            rec_b = net.g_a(fake_a)
        # Generators, with the discriminators frozen.
        net.d_a.requires_grad_(False)
        net.d_b.requires_grad_(False)
        try:
            with self.autocast():
                idt_weight = cfg.lambda_identity
                loss_idt = l1(net.g_a(real_b), real_b) * cfg.lambda_b * idt_weight
                loss_idt = loss_idt + l1(net.g_b(real_a), real_a) * cfg.lambda_a * idt_weight
                pred_b, pred_a = net.d_a(fake_b), net.d_b(fake_a)
                loss_g = gan_loss(pred_b, torch.ones_like(pred_b)) + gan_loss(pred_a, torch.ones_like(pred_a))
                loss_g = loss_g + l1(rec_a, real_a) * cfg.lambda_a + l1(rec_b, real_b) * cfg.lambda_b + loss_idt
            AdversarialWorkload.update(self.optimizer_g, loss_g)
        finally:
            net.d_a.requires_grad_(True)
            net.d_b.requires_grad_(True)
        # Discriminators: real images vs (pooled) fakes, each loss halved; one step for both.
        self.optimizer_d.zero_grad(set_to_none=True)
        loss_d = real_a.new_zeros(())
        for disc, real, fake in ((net.d_a, real_b, self.fake_b_pool.query(fake_b)),
                                 (net.d_b, real_a, self.fake_a_pool.query(fake_a))):  # fmt: skip
            with self.autocast():
                pred_real, pred_fake = disc(real), disc(fake)
                loss = 0.5 * (
                    gan_loss(pred_real, torch.ones_like(pred_real)) + gan_loss(pred_fake, torch.zeros_like(pred_fake))
                )
            loss.backward()
            loss_d = loss_d + loss.detach()
        self.optimizer_d.step()
        return loss_g.detach() + loss_d


def _create_cyclegan(ctx: BuildContext, **kwargs: Any) -> Workload:
    # Smoke: an eighth of the filters at 32x32 (the smallest size the PatchGAN maps to a 2x2 grid),
    # every block and loss kept.
    cfg = replace(ctx.pick(CycleGANConfig(), CycleGANConfig(gen_filters=8, disc_filters=8, image_size=32)), **kwargs)
    b, s = ctx.batch_size, cfg.image_size
    real_a = ctx.rand(b, 3, s, s) * 2 - 1  # images normalized to [-1, 1]
    if not ctx.train:  # TorchBench's eval: the test model's generator alone
        generator = ResnetGenerator(Pix2PixConfig(gen_filters=cfg.gen_filters))
        normal_init_(generator)
        return Workload(ctx, generator, (real_a,))
    real_b = ctx.rand(b, 3, s, s) * 2 - 1
    return CycleGANWorkload(ctx, CycleGAN(cfg), (real_a, real_b), cfg)


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
    source="Zhu et al., CycleGAN, 2017; junyanz/pytorch-CycleGAN-and-pix2pix as TorchBench runs it",
    batch_size=(1, 1),
    tags=("gan",),
    param_count=11_378_179,  # eval: one resnet_9blocks generator; train: 2 G + 2 D = 28,285,832
    notes="Train: one CycleGAN optimize_parameters (2 G + 2 D, LSGAN, cycle and identity losses, image pools); "
    "eval: one generator. Smoke is 32x32 at an eighth of the filters.",
)
def pytorch_CycleGAN_and_pix2pix(ctx: BuildContext, **kwargs: Any) -> Workload:  # noqa: N802 (TorchBench name)
    """CycleGAN on 256x256 horse/zebra-sized pairs; eval is the A->B generator."""
    return _create_cyclegan(ctx, **kwargs)


@register_model(
    domain="vision",
    task="image_to_image",
    source="Isola et al., pix2pix, 2017; junyanz/pytorch-CycleGAN-and-pix2pix",
    batch_size=(1, 1),
    tags=("gan",),
    param_count=14_145_988,  # resnet_9blocks G 11,378,179 + 6-channel PatchGAN D 2,767,809
    notes="pix2pix step (one G, one D) on CycleGAN's ResNet-9-block generator; eval is G alone (with D held).",
)
def pix2pix(ctx: BuildContext, **kwargs: Any) -> Workload:
    """ResNet-9-block generator + 70x70 PatchGAN, 256x256, pix2pix G and D updates."""
    return _create_pix2pix(ctx, **kwargs)
