"""DCGAN: Radford et al., "Unsupervised Representation Learning with Deep Convolutional
Generative Adversarial Networks", 2015.

Follows the PyTorch DCGAN example (pytorch/examples ``dcgan/main.py``, BSD-3-Clause), which
TorchBench's ``dcgan`` ports: 64x64 RGB images, a 100-d latent, 64 base filters, BCE loss,
Adam(2e-4, betas=(0.5, 0.999)) for both networks.

The timed step is TorchBench's: eval runs the discriminator on a batch of images
``(B, 3, 64, 64)`` (TorchBench's ``inference_just_descriminator``); one training step is
TorchBench's ``num_epochs = 5`` GAN iterations on the same real batch, each a discriminator
update (real and fresh-noise fake) then a generator update, reading the three ``D(x)`` /
``D(G(z))`` means back to the host as the reference does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ...common.adversarial import AdversarialWorkload, normal_init_

__all__: list[str] = []


@dataclass(frozen=True)
class DCGANConfig:
    latent_dim: int = 100  # nz: size of the noise vector z
    gen_filters: int = 64  # ngf: generator feature maps at the last hidden layer
    disc_filters: int = 64  # ndf: discriminator feature maps at the first layer
    channels: int = 3  # nc: RGB
    # The architecture fixes the image size at 64x64: 4 -> 8 -> 16 -> 32 -> 64.


def _up(in_ch: int, out_ch: int) -> list[nn.Module]:
    # Fractionally-strided conv doubling H and W, then BN + ReLU.
    return [nn.ConvTranspose2d(in_ch, out_ch, 4, 2, 1, bias=False), nn.BatchNorm2d(out_ch), nn.ReLU(True)]


def _down(in_ch: int, out_ch: int) -> list[nn.Module]:
    # Strided conv halving H and W, then BN + LeakyReLU(0.2).
    return [nn.Conv2d(in_ch, out_ch, 4, 2, 1, bias=False), nn.BatchNorm2d(out_ch), nn.LeakyReLU(0.2, True)]


class DCGANGenerator(nn.Sequential):
    """z ``(B, nz, 1, 1)`` -> image ``(B, nc, 64, 64)`` in [-1, 1]."""

    def __init__(self, cfg: DCGANConfig) -> None:
        f = cfg.gen_filters
        super().__init__(
            nn.ConvTranspose2d(cfg.latent_dim, f * 8, 4, 1, 0, bias=False),  # (B, 8f, 4, 4)
            nn.BatchNorm2d(f * 8),
            nn.ReLU(True),
            *_up(f * 8, f * 4),  # (B, 4f, 8, 8)
            *_up(f * 4, f * 2),  # (B, 2f, 16, 16)
            *_up(f * 2, f),  # (B, f, 32, 32)
            nn.ConvTranspose2d(f, cfg.channels, 4, 2, 1, bias=False),  # (B, nc, 64, 64)
            nn.Tanh(),
        )


class DCGANDiscriminator(nn.Sequential):
    """image ``(B, nc, 64, 64)`` -> probability of being real ``(B, 1, 1, 1)``."""

    def __init__(self, cfg: DCGANConfig) -> None:
        f = cfg.disc_filters
        super().__init__(
            nn.Conv2d(cfg.channels, f, 4, 2, 1, bias=False),  # (B, f, 32, 32), no BN on the input layer
            nn.LeakyReLU(0.2, True),
            *_down(f, f * 2),  # (B, 2f, 16, 16)
            *_down(f * 2, f * 4),  # (B, 4f, 8, 8)
            *_down(f * 4, f * 8),  # (B, 8f, 4, 4)
            nn.Conv2d(f * 8, 1, 4, 1, 0, bias=False),  # (B, 1, 1, 1)
            nn.Sigmoid(),
        )


# GAN iterations in one TorchBench training step (its ``num_epochs`` of one batch each).
ITERATIONS_PER_TRAIN_STEP = 5


class DCGANWorkload(AdversarialWorkload):
    """Train: 5 x (D update on real + fake, then G update); eval: D(images)."""

    def forward(self) -> torch.Tensor:
        (images,) = self.inputs
        return self.discriminator(images).view(-1)

    def train_step(self) -> torch.Tensor:
        (real,) = self.inputs
        # BCE on probabilities is autocast-unsafe (CUDA AMP refuses it): computed in fp32 outside.
        bce = nn.functional.binary_cross_entropy
        ones = torch.ones(real.size(0), device=real.device)
        zeros = torch.zeros_like(ones)
        for _ in range(ITERATIONS_PER_TRAIN_STEP):
            noise = torch.randn(real.size(0), self.cfg.latent_dim, 1, 1, device=real.device, dtype=real.dtype)
            # (1) D: maximize log D(x) + log(1 - D(G(z))).
            with self.autocast():
                fake = self.generator(noise)
                p_real = self.discriminator(real).view(-1)
                p_fake = self.discriminator(fake.detach()).view(-1)
            loss_d = bce(p_real.float(), ones) + bce(p_fake.float(), zeros)
            self.update(self.optimizer_d, loss_d)
            p_real.mean().item(), p_fake.mean().item()  # the reference's D(x), D(G(z)) read-outs
            # (2) G: maximize log D(G(z)) against the just-updated D.
            with self.autocast():
                p_fake = self.discriminator(fake).view(-1)
            loss_g = bce(p_fake.float(), ones)
            self.update(self.optimizer_g, loss_g)
            p_fake.mean().item()
        return (loss_d + loss_g).detach()


def _create_dcgan(ctx: BuildContext, **kwargs: Any) -> Workload:
    # Smoke: a quarter of the filters (16), every layer and the 64x64 images kept (the
    # architecture fixes the size); the five GAN iterations per step stay.
    cfg = replace(ctx.pick(DCGANConfig(), DCGANConfig(gen_filters=16, disc_filters=16)), **kwargs)
    generator, discriminator = DCGANGenerator(cfg), DCGANDiscriminator(cfg)
    normal_init_(generator)
    normal_init_(discriminator)
    images = ctx.randn(ctx.batch_size, cfg.channels, 64, 64)  # TorchBench's example images, N(0, 1)
    return DCGANWorkload(ctx, generator, discriminator, (images,), cfg=cfg, lr=2e-4, betas=(0.5, 0.999))


@register_model(
    domain="vision",
    task="image_generation",
    source="Radford et al., DCGAN, 2015; pytorch/examples dcgan",
    batch_size=(32, 256),
    tags=("gan",),
    param_count=6_342_272,  # G 3,576,704 + D 2,765,568
)
def dcgan(ctx: BuildContext, **kwargs: Any) -> Workload:
    """DCGAN at 64x64 (nz=100, ngf=ndf=64; smoke: 16): train 5 GAN iterations, eval the discriminator."""
    return _create_dcgan(ctx, **kwargs)
