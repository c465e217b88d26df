"""SAGAN: a spectrally normalised GAN with self-attention, at 64x64.

Zhang, Goodfellow, Metaxas and Odena, "Self-Attention Generative Adversarial Networks", ICML 2019.
Architecture and training as the PyTorch reference heykeetae/Self-Attention-GAN (``sagan_models.py``,
``trainer.py``; MIT), run as its README does (``--imsize 64 --adv_loss hinge``):

- generator: ``z (128) -> ConvT 4x4 (512, 4x4) -> ConvT (256, 8x8) -> ConvT (128, 16x16) -> attention
  -> ConvT (64, 32x32) -> attention -> ConvT (3, 64x64) -> tanh``, BatchNorm + ReLU after each
  hidden transposed convolution;
- discriminator: ``Conv 4x4/2`` to 64, 128, 256 channels (32, 16, 8 px) -> attention -> 512 (4 px) ->
  attention -> ``Conv 4x4`` to one score, LeakyReLU(0.1) after each hidden convolution;
- self-attention (the paper's eq. 1-3): 1x1 convs to queries and keys of ``C / 8`` channels and
  values of ``C``, ``softmax(q^T k)`` over the ``N = H W`` positions, ``x + gamma (v A^T)`` with a
  learned ``gamma`` initialised at 0;
- spectral normalisation (one power iteration per training forward) on every convolution of both
  networks, as the paper (sec. 4: "spectral normalization for both generator and discriminator")
  and the TF reference brain-research/self-attention-gan; heykeetae leaves the attention 1x1 convs
  and the two output convolutions unnormalised;
- hinge loss ``D: E relu(1 - D(x)) + E relu(1 + D(G(z)))``, ``G: -E D(G(z))``; one D update then one
  G update per iteration; TTUR Adam, lr 1e-4 (G) / 4e-4 (D), betas (0, 0.9); batch 64.

Differences: the D update sees ``G(z).detach()`` (heykeetae back-propagates the D loss into G and
then discards those gradients), and the two noise batches are inputs drawn once, not per step.
Images are synthetic, uniform in [-1, 1]. Eval is generation ``G(z)``. Written from the paper and
the reference's description; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.parametrizations import spectral_norm

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ...common.adversarial import AdversarialWorkload

__all__ = ["SAGANConfig", "SAGANDiscriminator", "SAGANGenerator", "SelfAttention"]


@dataclass(frozen=True)
class SAGANConfig:
    z_dim: int = 128  # the reference's default noise size
    g_conv_dim: int = 64  # generator width at 32x32 (8x that at 4x4)
    d_conv_dim: int = 64  # discriminator width at 32x32
    g_lr: float = 1e-4  # TTUR: the discriminator learns 4x faster
    d_lr: float = 4e-4
    betas: tuple[float, float] = (0.0, 0.9)
    # The architecture fixes the image size at 64x64: 4 -> 8 -> 16 -> 32 -> 64.


class SelfAttention(nn.Module):
    """``(B, C, H, W) -> (B, C, H, W)``: ``x + gamma * attention(x)`` over the ``N = H W`` positions."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.query = spectral_norm(nn.Conv2d(channels, channels // 8, 1))
        self.key = spectral_norm(nn.Conv2d(channels, channels // 8, 1))
        self.value = spectral_norm(nn.Conv2d(channels, channels, 1))
        self.gamma = nn.Parameter(torch.zeros(1))  # starts as the identity: local features first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q = self.query(x).flatten(2).transpose(1, 2)  # (B, N, C/8)
        k = self.key(x).flatten(2)  # (B, C/8, N)
        attention = torch.softmax(torch.bmm(q, k), dim=-1)  # (B, N, N): row i attends over positions j
        v = self.value(x).flatten(2)  # (B, C, N)
        out = torch.bmm(v, attention.transpose(1, 2)).view(b, c, h, w)  # o_i = sum_j A_ij v_j
        return x + self.gamma * out


def _up(in_ch: int, out_ch: int, kernel: int = 4, stride: int = 2, padding: int = 1) -> nn.Sequential:
    return nn.Sequential(
        spectral_norm(nn.ConvTranspose2d(in_ch, out_ch, kernel, stride, padding)), nn.BatchNorm2d(out_ch), nn.ReLU()
    )


def _down(in_ch: int, out_ch: int) -> nn.Sequential:
    return nn.Sequential(spectral_norm(nn.Conv2d(in_ch, out_ch, 4, 2, 1)), nn.LeakyReLU(0.1))


class SAGANGenerator(nn.Sequential):
    """Noise ``(B, z)`` -> image ``(B, 3, 64, 64)`` in [-1, 1]."""

    def __init__(self, cfg: SAGANConfig) -> None:
        f = cfg.g_conv_dim
        super().__init__(
            nn.Unflatten(1, (cfg.z_dim, 1, 1)),  # (B, z, 1, 1)
            _up(cfg.z_dim, 8 * f, 4, 1, 0),  # (B, 8f, 4, 4)
            _up(8 * f, 4 * f),  # (B, 4f, 8, 8)
            _up(4 * f, 2 * f),  # (B, 2f, 16, 16)
            SelfAttention(2 * f),
            _up(2 * f, f),  # (B, f, 32, 32)
            SelfAttention(f),
            spectral_norm(nn.ConvTranspose2d(f, 3, 4, 2, 1)),  # (B, 3, 64, 64)
            nn.Tanh(),
        )


class SAGANDiscriminator(nn.Sequential):
    """Image ``(B, 3, 64, 64)`` -> unbounded realness score ``(B,)``."""

    def __init__(self, cfg: SAGANConfig) -> None:
        f = cfg.d_conv_dim
        super().__init__(
            _down(3, f),  # (B, f, 32, 32)
            _down(f, 2 * f),  # (B, 2f, 16, 16)
            _down(2 * f, 4 * f),  # (B, 4f, 8, 8)
            SelfAttention(4 * f),
            _down(4 * f, 8 * f),  # (B, 8f, 4, 4)
            SelfAttention(8 * f),
            spectral_norm(nn.Conv2d(8 * f, 1, 4)),  # (B, 1, 1, 1)
            nn.Flatten(0),  # (B,)
        )


class SAGANWorkload(AdversarialWorkload):
    """Train: one hinge-loss D update, then one G update (TTUR); eval: ``G(z)``."""

    def __init__(
        self,
        ctx: BuildContext,
        generator: nn.Module,
        discriminator: nn.Module,
        inputs: tuple,
        targets: Any,
        *,
        cfg: SAGANConfig,
    ) -> None:
        super().__init__(ctx, generator, discriminator, inputs, targets, cfg=cfg, lr=cfg.g_lr, betas=cfg.betas)
        if ctx.train:  # the base class gives both networks one learning rate; TTUR gives D its own
            self.optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=cfg.d_lr, betas=cfg.betas)

    def forward(self) -> torch.Tensor:
        return self.generator(self.inputs[0])

    def train_step(self) -> torch.Tensor:
        z_d, z_g = self.inputs
        real = self.targets
        # (1) D: hinge loss on a real and a fake batch
        with self.autocast():
            fake = self.generator(z_d).detach()
            loss_d = F.relu(1.0 - self.discriminator(real)).mean() + F.relu(1.0 + self.discriminator(fake)).mean()
        self.update(self.optimizer_d, loss_d)
        # (2) G: raise the just-updated D's score of fresh fakes
        with self.autocast():
            loss_g = -self.discriminator(self.generator(z_g)).mean()
        self.update(self.optimizer_g, loss_g)
        return (loss_d + loss_g).detach()


def _create_sagan(ctx: BuildContext, **kwargs: Any) -> Workload:
    smoke = dict(z_dim=16, g_conv_dim=8, d_conv_dim=8) if ctx.smoke else {}
    cfg = replace(SAGANConfig(), **{**smoke, **kwargs})
    generator, discriminator = SAGANGenerator(cfg), SAGANDiscriminator(cfg)
    z_d = ctx.randn(ctx.batch_size, cfg.z_dim)
    inputs = (z_d, ctx.randn(ctx.batch_size, cfg.z_dim)) if ctx.train else (z_d,)
    real = ctx.rand(ctx.batch_size, 3, 64, 64) * 2 - 1 if ctx.train else None  # tanh range
    return SAGANWorkload(ctx, generator, discriminator, inputs, real, cfg=cfg)


@register_model(
    domain="vision",
    task="image_generation",
    source="Zhang et al., Self-Attention GANs, ICML 2019; heykeetae/Self-Attention-GAN",
    batch_size=(64, 64),
    tags=("gan", "attention"),
    param_count=7_008_184,  # G 3,832,885 + D 3,175,299, from the reference layer sizes (z_dim 128)
    unsupported_precisions=("fp16",),
    notes="Spectral norm (torch.nn.utils.parametrizations) on every convolution; TTUR Adam. Synthetic 64x64 "
    "images in [-1, 1]. fp16 unsupported: pure-fp16 training turns the parameters NaN within a few "
    "steps (Adam in fp16, no loss scaling); fp16 eval, bf16 and amp run finite.",
)
def sagan(ctx: BuildContext, **kwargs: Any) -> Workload:
    """SAGAN at 64x64 (z 128, 64 base filters), hinge loss, one D and one G update per step."""
    return _create_sagan(ctx, **kwargs)
