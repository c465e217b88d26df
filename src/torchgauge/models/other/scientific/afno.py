"""FourCastNet: an Adaptive Fourier Neural Operator (AFNO) backbone for global weather forecasting.

Pathak, Subramanian, Harrington et al., "FourCastNet: A Global Data-driven High-resolution Weather
Model using Adaptive Fourier Neural Operators", 2022, with the token mixer of Guibas, Mardani, Li,
Tao, Anandkumar and Catanzaro, "Adaptive Fourier Neural Operators: Efficient Token Mixers for
Transformers", ICLR 2022. Reference: ``networks/afnonet.py`` and ``train.py`` of
github.com/NVlabs/FourCastNet (BSD-3-Clause, copyright NVIDIA); written from it, no code copied.

Architecture as the reference ``AFNONet`` with the ``afno_backbone`` config: 20 ERA5 channels on a
720 x 1440 grid, Conv2d patch embedding (8 x 8 patches -> a 90 x 180 token grid, width 768) plus a
learned position embedding, 12 blocks of ``x + AFNO2D(LN(x))`` then ``x + MLP(LN(x))`` (double skip,
LayerNorm eps 1e-6, MLP ratio 4, GELU), and a bias-free linear head from each token back to its
8 x 8 x 20 pixels. ``AFNO2D``: rfft2 over the token grid (norm "ortho"), a two-layer complex MLP
shared by all modes, block-diagonal over 8 channel blocks, written on real and imaginary parts with
einsum, ReLU after the first layer, softshrink (sparsity threshold 0.01) on the output, irfft2, and
a residual. Like the reference, the MLP runs only on ``kept_modes = int((H // 2 + 1) * fraction)``
rfft columns (fraction 1: 46 of the 91 at full size) and the remaining modes are zeroed.

Training as the reference's pre-training: next-step (6 h) prediction, Adam lr 5e-4, its ``LpLoss``
(FNO's relative L2 error per sample, averaged over the batch, rather than MSE: here
``relative_l2_loss(reduction="mean")``). Batch: the reference's 64 is global over 64 GPUs, 1 per device; we use 1. Eval:
the reference's autoregressive inference, each prediction fed back as the next input, for 4 steps (one
day). Data are synthetic z-scored fields: smooth random fields advected eastward by one patch per
step, so the timed step does not depend on real ERA5 data. Differences: the reference defines a
final LayerNorm (``self.norm``) its forward never calls; it is left out (1,536 parameters); dropout
and drop-path rates are 0 there, so those modules are left out as well.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ...common.weight_init import transformer_init_weights
from .fourier_neural_operator import relative_l2_loss

__all__ = ["AFNO2D", "AFNOConfig", "AFNONet"]


@dataclass(frozen=True)
class AFNOConfig:
    img_size: tuple[int, int] = (720, 1440)  # ERA5 at 0.25 degrees, the 721st latitude cropped
    patch_size: int = 8  # afno_backbone: 8 x 8 patches
    channels: int = 20  # in_channels = out_channels: the 20 ERA5 variables
    embed_dim: int = 768
    depth: int = 12
    mlp_ratio: float = 4.0
    num_blocks: int = 8  # block-diagonal blocks of the spectral MLP
    sparsity_threshold: float = 0.01  # softshrink lambda
    hard_thresholding_fraction: float = 1.0
    rollout_steps: int = 4  # autoregressive 6 h steps in eval (the reference runs 41)


class AFNO2D(nn.Module):
    """Fourier token mixer on a token grid ``(B, H, W, C) -> (B, H, W, C)``, residual included."""

    def __init__(
        self,
        hidden_size: int,
        num_blocks: int = 8,
        sparsity_threshold: float = 0.01,
        hard_thresholding_fraction: float = 1.0,
        hidden_size_factor: int = 1,
    ) -> None:
        super().__init__()
        if hidden_size % num_blocks:
            raise ValueError(f"hidden_size {hidden_size} is not divisible by num_blocks {num_blocks}")
        self.num_blocks, self.block_size = num_blocks, hidden_size // num_blocks
        self.sparsity_threshold = sparsity_threshold
        self.hard_thresholding_fraction = hard_thresholding_fraction
        hidden = self.block_size * hidden_size_factor
        scale = 0.02  # the reference's init
        # leading 2: (real, imaginary) parts of the complex weights and biases
        self.w1 = nn.Parameter(scale * torch.randn(2, num_blocks, self.block_size, hidden))
        self.b1 = nn.Parameter(scale * torch.randn(2, num_blocks, hidden))
        self.w2 = nn.Parameter(scale * torch.randn(2, num_blocks, hidden, self.block_size))
        self.b2 = nn.Parameter(scale * torch.randn(2, num_blocks, self.block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias, dtype = x, x.dtype
        x = x.float()  # the FFT and the spectral MLP run in fp32, as the reference
        b, h, w, c = x.shape
        x = torch.fft.rfft2(x, dim=(1, 2), norm="ortho")  # (B, H, W // 2 + 1, C) complex
        x = x.reshape(b, h, w // 2 + 1, self.num_blocks, self.block_size)
        w1, b1, w2, b2 = (p.float() for p in (self.w1, self.b1, self.w2, self.b2))

        o1_shape = (b, h, w // 2 + 1, self.num_blocks, w1.shape[-1])
        o1_real = torch.zeros(o1_shape, device=x.device)
        o1_imag = torch.zeros(o1_shape, device=x.device)
        o2_real = torch.zeros(x.shape, device=x.device)
        o2_imag = torch.zeros(x.shape, device=x.device)

        total_modes = h // 2 + 1
        kept_modes = int(total_modes * self.hard_thresholding_fraction)
        # rows around total_modes (all rows at fraction 1), the first kept_modes rfft columns
        keep = (slice(None), slice(total_modes - kept_modes, total_modes + kept_modes), slice(None, kept_modes))
        xk = x[keep]  # (B, h', w', nb, bs)
        # (a + ib)(W_r + iW_i) + (c_r + ic_i), block by block: '...bi,bio->...bo'
        o1_real[keep] = F.relu(
            torch.einsum("...bi,bio->...bo", xk.real, w1[0]) - torch.einsum("...bi,bio->...bo", xk.imag, w1[1]) + b1[0]
        )
        o1_imag[keep] = F.relu(
            torch.einsum("...bi,bio->...bo", xk.imag, w1[0]) + torch.einsum("...bi,bio->...bo", xk.real, w1[1]) + b1[1]
        )
        o2_real[keep] = (
            torch.einsum("...bi,bio->...bo", o1_real[keep], w2[0])
            - torch.einsum("...bi,bio->...bo", o1_imag[keep], w2[1])
            + b2[0]
        )
        o2_imag[keep] = (
            torch.einsum("...bi,bio->...bo", o1_imag[keep], w2[0])
            + torch.einsum("...bi,bio->...bo", o1_real[keep], w2[1])
            + b2[1]
        )

        x = torch.stack([o2_real, o2_imag], dim=-1)  # (B, H, W // 2 + 1, nb, bs, 2)
        x = F.softshrink(x, lambd=self.sparsity_threshold)  # sparsify the modes
        x = torch.view_as_complex(x).reshape(b, h, w // 2 + 1, c)
        x = torch.fft.irfft2(x, s=(h, w), dim=(1, 2), norm="ortho")
        return x.type(dtype) + bias


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """``x + AFNO(LN(x))`` (the double skip), then ``+ MLP(LN(.))``; ``(B, H, W, C)``."""

    def __init__(self, cfg: AFNOConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.embed_dim, eps=1e-6)
        self.filter = AFNO2D(cfg.embed_dim, cfg.num_blocks, cfg.sparsity_threshold, cfg.hard_thresholding_fraction)
        self.norm2 = nn.LayerNorm(cfg.embed_dim, eps=1e-6)
        self.mlp = Mlp(cfg.embed_dim, int(cfg.embed_dim * cfg.mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.filter(self.norm1(x)) + x
        return self.mlp(self.norm2(x)) + x


class AFNONet(nn.Module):
    """Fields ``(B, C, H, W)`` at time t -> fields ``(B, C, H, W)`` at t + 6 h."""

    def __init__(self, cfg: AFNOConfig) -> None:
        super().__init__()
        self.cfg = cfg
        p = cfg.patch_size
        self.h, self.w = cfg.img_size[0] // p, cfg.img_size[1] // p
        self.patch_embed = nn.Conv2d(cfg.channels, cfg.embed_dim, kernel_size=p, stride=p)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.h * self.w, cfg.embed_dim))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.head = nn.Linear(cfg.embed_dim, cfg.channels * p * p, bias=False)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.apply(transformer_init_weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, p, c = x.shape[0], self.cfg.patch_size, self.cfg.channels
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed  # (B, h w, D)
        x = x.reshape(b, self.h, self.w, -1)  # (B, h, w, D): the token grid the FFT mixes over
        for block in self.blocks:
            x = block(x)
        x = self.head(x)  # (B, h, w, p p C)
        # "b h w (p1 p2 c) -> b c (h p1) (w p2)"
        x = x.reshape(b, self.h, self.w, p, p, c).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, c, self.h * p, self.w * p)


class ForecastWorkload(Workload):
    """Train: one 6 h step against the next field. Eval: autoregressive rollout ``(B, steps, C, H, W)``."""

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return relative_l2_loss(outputs, self.targets, reduction="mean")  # the reference's LpLoss()

    def eval_step(self) -> torch.Tensor:
        (x,) = self.inputs
        preds = []
        with torch.no_grad(), self.autocast():
            for _ in range(self.module.cfg.rollout_steps):
                x = self.module(x)  # the prediction is the next input
                preds.append(x)
        return torch.stack(preds, dim=1)


def _synthetic_fields(ctx: BuildContext, cfg: AFNOConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """z-scored smooth fields at t and t + 6 h: ``(B, C, H, W)`` each, advected east by one patch."""
    h, w = cfg.img_size
    coarse = ctx.randn(ctx.batch_size, cfg.channels, h // cfg.patch_size, w // cfg.patch_size)
    field = F.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    field = field / field.std()
    return field, torch.roll(field, shifts=cfg.patch_size, dims=-1)


def _create_afno(ctx: BuildContext, **kwargs) -> Workload:
    smoke = (
        dict(img_size=(16, 32), patch_size=4, channels=3, embed_dim=16, depth=2, num_blocks=4, rollout_steps=2)
        if ctx.smoke
        else {}
    )
    cfg = replace(AFNOConfig(), **{**smoke, **kwargs})
    inputs, targets = _synthetic_fields(ctx, cfg)
    model = AFNONet(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4) if ctx.train else None
    return ForecastWorkload(ctx, model, (inputs,), targets, optimizer=opt)


@register_model(
    domain="other",
    task="weather_forecasting",
    batch_size=(1, 1),
    tags=("fft", "complex", "transformer"),
    source="Pathak et al., FourCastNet, 2022 (AFNO: Guibas et al., ICLR 2022); "
    "NVlabs/FourCastNet networks/afnonet.py (BSD-3-Clause, NVIDIA)",
    # from the reference definition (afno_backbone config) less its unused final LayerNorm (1,536):
    # patch conv 983,808 + pos 12,441,600 + 12 blocks x 5,023,488 + head 983,040
    param_count=74_690_304,
    notes="Synthetic ERA5-shaped fields (20 channels, 720x1440). Batch 1 per device, as the "
    "reference's 64 over 64 GPUs. Eval: a 4-step (24 h) autoregressive rollout.",
)
def fourcastnet_afno(ctx: BuildContext, **kwargs) -> Workload:
    """FourCastNet AFNO backbone (patch 8, width 768, depth 12) on 20x720x1440 fields, next-step loss."""
    return _create_afno(ctx, **kwargs)
