"""Diffusion U-Net denoiser: Ho et al., "Denoising Diffusion Probabilistic Models", NeurIPS 2020.

Follows the DDPM reference (hojonathanho/diffusion, ``diffusion_tf/models/unet.py``, Apache-2.0)
in its CIFAR-10 configuration, 35.7 M parameters: 32x32 images, ch=128, ch_mult=(1, 2, 2, 2),
2 residual blocks per level, self-attention at 16x16 and in the middle, dropout 0.1,
sinusoidal timestep embedding through a 2-layer MLP added in every residual block, T=1000
linear betas 1e-4..0.02. Train = the simple noise-prediction MSE at random timesteps with
Adam(2e-4); eval = one reverse (denoising) step x_t -> x_{t-1}. This is the paper's class of
"public image generator" models (TorchBench's ``pig2``); Stable Diffusion's U-Net adds text
cross-attention to the same blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["timestep_embedding", "DiffusionUNet"]


@dataclass(frozen=True)
class DiffusionUNetConfig:
    image_size: int = 32  # CIFAR-10
    channels: int = 3
    ch: int = 128  # base width
    ch_mult: tuple[int, ...] = (1, 2, 2, 2)  # width multiplier per resolution: 32, 16, 8, 4
    num_res_blocks: int = 2
    attn_levels: tuple[int, ...] = (1,)  # level 1 = 16x16 at 32x32 input (given by level so smoke keeps it)
    dropout: float = 0.1
    num_timesteps: int = 1000
    beta_start: float = 1e-4
    beta_end: float = 0.02


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Transformer sinusoidal embedding of integer timesteps ``(B,)`` -> ``(B, dim)`` as [sin, cos]."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device, dtype=torch.float32) * (-math.log(10000.0) / (half - 1)))
    args = t.float()[:, None] * freqs[None]  # (B, half)
    emb = torch.cat([torch.sin(args), torch.cos(args)], dim=1)
    return F.pad(emb, (0, 1)) if dim % 2 else emb


class ResBlock(nn.Module):
    """GN-swish-conv, + Dense(temb), GN-swish-dropout-conv, with a 1x1 shortcut when widths differ."""

    def __init__(self, in_ch: int, out_ch: int, temb_ch: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, in_ch), nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.temb_proj = nn.Linear(temb_ch, out_ch)
        self.norm2, self.dropout = nn.GroupNorm(32, out_ch), nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1)
        self.shortcut = nn.Conv2d(in_ch, out_ch, 1) if in_ch != out_ch else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb_proj(F.silu(temb))[:, :, None, None]  # time conditioning, (B, out, 1, 1)
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.shortcut(x) + h


class AttnBlock(nn.Module):
    """Single-head self-attention over the H*W positions, residual."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(32, ch)
        self.qkv = nn.Conv2d(ch, 3 * ch, 1)  # the reference's three NIN (1x1) projections, fused
        self.proj_out = nn.Conv2d(ch, ch, 1)

    def forward(self, x: torch.Tensor, temb: torch.Tensor | None = None) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).transpose(2, 3).unbind(1)  # (B, HW, C) each
        out = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(C)) v
        return x + self.proj_out(out.transpose(1, 2).reshape(b, c, h, w))


class _ResAttn(nn.Module):
    """A residual block followed by self-attention (levels in ``attn_levels``)."""

    def __init__(self, res: ResBlock, attn: AttnBlock) -> None:
        super().__init__()
        self.res, self.attn = res, attn

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        return self.attn(self.res(x, temb))


class DiffusionUNet(nn.Module):
    """Noisy image ``(B, 3, H, W)`` and timesteps ``(B,)`` -> predicted noise ``(B, 3, H, W)``."""

    def __init__(self, cfg: DiffusionUNetConfig) -> None:
        super().__init__()
        ch, temb_ch = cfg.ch, 4 * cfg.ch
        widths = [ch * m for m in cfg.ch_mult]  # per level: 128, 256, 256, 256

        def block(in_ch: int, out_ch: int, level: int) -> nn.Module:
            res = ResBlock(in_ch, out_ch, temb_ch, cfg.dropout)
            return _ResAttn(res, AttnBlock(out_ch)) if level in cfg.attn_levels else res

        self.ch = ch
        self.temb = nn.Sequential(nn.Linear(ch, temb_ch), nn.SiLU(), nn.Linear(temb_ch, temb_ch))
        self.conv_in = nn.Conv2d(cfg.channels, ch, 3, padding=1)
        # Down path: blocks per level, a stride-2 conv between levels; every output is a skip.
        self.down_blocks, self.downsamples = nn.ModuleList(), nn.ModuleList()
        skip_chs, cur = [ch], ch
        for level, width in enumerate(widths):
            blocks = nn.ModuleList()
            for _ in range(cfg.num_res_blocks):
                blocks.append(block(cur, width, level))
                cur = width
                skip_chs.append(cur)
            self.down_blocks.append(blocks)
            if level < len(widths) - 1:
                self.downsamples.append(nn.Conv2d(cur, cur, 3, stride=2, padding=1))
                skip_chs.append(cur)
        self.mid = nn.ModuleList(
            [ResBlock(cur, cur, temb_ch, cfg.dropout), AttnBlock(cur), ResBlock(cur, cur, temb_ch, cfg.dropout)]
        )
        # Up path (stored in level order): one more block per level, each eating one skip.
        self.up_blocks, self.upsamples = nn.ModuleList(), nn.ModuleList()
        for level in reversed(range(len(widths))):
            blocks = nn.ModuleList()
            for _ in range(cfg.num_res_blocks + 1):
                blocks.append(block(cur + skip_chs.pop(), widths[level], level))
                cur = widths[level]
            self.up_blocks.insert(0, blocks)
            if level > 0:  # nearest x2 + conv3x3 back to level - 1's resolution
                upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(cur, cur, 3, padding=1))
                self.upsamples.insert(0, upsample)
        self.norm_out = nn.GroupNorm(32, cur)
        self.conv_out = nn.Conv2d(cur, cfg.channels, 3, padding=1)
        self._init_weights()

    def _init_weights(self) -> None:
        # The reference: fan-avg uniform (Xavier) weights, zero biases, and zero weights on the
        # last conv of each residual branch and on the output, so every block starts as identity.
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        for m in self.modules():
            if isinstance(m, ResBlock):
                nn.init.zeros_(m.conv2.weight)
            elif isinstance(m, AttnBlock):
                nn.init.zeros_(m.proj_out.weight)
        nn.init.zeros_(self.conv_out.weight)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        # The sinusoids are computed in fp32 (large arguments), then take the weights' dtype.
        temb = self.temb(timestep_embedding(t, self.ch).to(x.dtype))  # (B, 4ch)
        hs = [self.conv_in(x)]  # skips, (B, ch, H, W) first
        for level, blocks in enumerate(self.down_blocks):
            for blk in blocks:
                hs.append(blk(hs[-1], temb))
            if level < len(self.downsamples):
                hs.append(self.downsamples[level](hs[-1]))  # (B, C, H / 2^(level+1), ...)
        h = hs[-1]
        for layer in self.mid:
            h = layer(h, temb)
        for level in reversed(range(len(self.up_blocks))):
            for blk in self.up_blocks[level]:
                h = blk(torch.cat([h, hs.pop()], 1), temb)
            if level > 0:
                h = self.upsamples[level - 1](h)
        return self.conv_out(F.silu(self.norm_out(h)))


class DDPM(nn.Module):
    """The denoiser plus its fixed noise schedule (buffers, so they follow the device)."""

    def __init__(self, cfg: DiffusionUNetConfig) -> None:
        super().__init__()
        self.unet = DiffusionUNet(cfg)
        betas = torch.linspace(cfg.beta_start, cfg.beta_end, cfg.num_timesteps, dtype=torch.float64)
        alphas_cumprod = torch.cumprod(1 - betas, 0)
        self.register_buffer("betas", betas.float(), persistent=False)
        self.register_buffer("alphas_cumprod", alphas_cumprod.float(), persistent=False)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.unet(x_t, t)

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps (the forward process in closed form)."""
        abar = self.alphas_cumprod[t].view(-1, 1, 1, 1).to(x0.dtype)
        return abar.sqrt() * x0 + (1 - abar).sqrt() * noise

    def p_sample(self, x_t: torch.Tensor, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """One reverse step with sigma_t^2 = beta_t (Algorithm 2); no noise added at t = 0."""
        beta = self.betas[t].view(-1, 1, 1, 1).to(x_t.dtype)
        abar = self.alphas_cumprod[t].view(-1, 1, 1, 1).to(x_t.dtype)
        mean = (x_t - beta / (1 - abar).sqrt() * self.unet(x_t, t)) / (1 - beta).sqrt()
        return mean + (t > 0).view(-1, 1, 1, 1).to(x_t.dtype) * beta.sqrt() * z


class DDPMWorkload(Workload):
    """Train: MSE(eps_theta(x_t, t), eps) with x_t from q_sample; eval: x_{t-1} = p_sample(x_t, t)."""

    def forward(self) -> torch.Tensor:
        x, t, noise = self.inputs  # x is x_0 in train and x_t in eval
        if self.ctx.train:
            return self.module(self.module.q_sample(x, t, noise), t)
        return self.module.p_sample(x, t, noise)


def _create_ddpm(ctx: BuildContext, **kwargs: Any) -> Workload:
    cfg = replace(DiffusionUNetConfig(), **kwargs)
    # Smoke: 8x8 images (levels 8, 4, 2, 1) and a quarter of the width (GroupNorm(32) still fits):
    # the Adam update of 35.7 M weights alone would otherwise take most of a CPU smoke budget.
    cfg = ctx.pick(cfg, replace(cfg, image_size=cfg.image_size // 4, ch=cfg.ch // 4))
    b, s = ctx.batch_size, cfg.image_size
    x = ctx.rand(b, cfg.channels, s, s) * 2 - 1  # images scaled to [-1, 1]
    t = ctx.randint(0, cfg.num_timesteps, (b,))
    noise = ctx.randn(b, cfg.channels, s, s)
    module = DDPM(cfg)
    opt = ctx.optimizer(module.parameters(), "adam", lr=2e-4) if ctx.train else None
    return DDPMWorkload(ctx, module, (x, t, noise), noise, loss_fn=F.mse_loss, optimizer=opt)


@register_model(
    domain="vision",
    task="image_generation",
    source="Ho et al., Denoising Diffusion Probabilistic Models, 2020; hojonathanho/diffusion (CIFAR-10 U-Net)",
    batch_size=(128, 128),
    tags=("diffusion",),
    param_count=35_746_307,
    notes="A diffusion denoiser step in the class of TorchBench's pig2 (public image generator); "
    "smoke is 8x8 at 1/4 width.",
    torchbench_name="pig2",
)
def diffusion_unet(ctx: BuildContext, **kwargs: Any) -> Workload:
    """DDPM CIFAR-10 U-Net (ch 128, mults 1-2-2-2, attention at 16x16), one denoiser step."""
    return _create_ddpm(ctx, **kwargs)
