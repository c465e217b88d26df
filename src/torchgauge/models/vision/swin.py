"""Swin Transformer: Liu et al., "Swin Transformer: Hierarchical Vision Transformer using Shifted
Windows", ICCV 2021.

Follows the authors' microsoft/Swin-Transformer ``models/swin_transformer.py`` (MIT), Swin-T
(``swin_tiny_patch4_window7_224``): 4x4 patches embedded to 96 channels and layer-normed; four
stages of (2, 2, 6, 2) blocks with (3, 6, 12, 24) heads at resolutions 56, 28, 14, 7; each block
is pre-norm multi-head self-attention *within 7x7 windows* plus a GELU MLP of ratio 4, and every
second block first rolls the feature map by half a window (``torch.roll``) so windows straddle
the previous partition, masking attention between pixels that the roll brought together from
opposite borders (the mask, -100 between different regions, is built once per block for its
fixed resolution). Attention logits get a learned bias per head and relative offset
(a ``(2*7-1)^2 x heads`` table gathered by a fixed index). Stages are joined by patch merging
(2x2 neighbours concatenated, layer-normed, linearly reduced to twice the channels); stochastic
depth rises linearly to 0.2. 28,288,354 parameters, as the reference and torchvision ``swin_t``.

Training as the reference's ``main.py``: AdamW (lr 1e-3 at batch 1024, weight decay 0.05, none on
biases, norms and the relative-position tables), gradient norm clipped at 5, label smoothing 0.1.
Differences: the reference also mixes images (mixup/cutmix) and then uses a soft-target
cross-entropy; that is data augmentation outside the step, so the loss here is the label-smoothed
cross-entropy the reference uses when mixing is off. Written from the paper and the reference's
structure; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.weight_init import transformer_init_weights

__all__ = [
    "SwinConfig",
    "SwinTransformer",
    "WindowAttention",
    "relative_position_index",
    "shifted_window_mask",
    "window_partition",
    "window_reverse",
]

# The reference's value for "no attention" between regions of a shifted window (not -inf).
MASK_VALUE = -100.0
CLIP_GRAD = 5.0  # TRAIN.CLIP_GRAD of the reference config


@dataclass(frozen=True)
class SwinConfig:
    image_size: int = 224
    patch_size: int = 4
    embed_dim: int = 96  # C of Swin-T; stage i has C * 2^i channels
    depths: tuple[int, ...] = (2, 2, 6, 2)
    num_heads: tuple[int, ...] = (3, 6, 12, 24)  # head dim 32 throughout
    window_size: int = 7
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.2  # Swin-T; 0.3 for Swin-S, 0.5 for Swin-B
    num_classes: int = 1000


def window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """``(B, H, W, C) -> (B * H/w * W/w, w, w, C)``, windows in row-major order per image."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window, window, c)


def window_reverse(windows: torch.Tensor, window: int, h: int, w: int) -> torch.Tensor:
    """Inverse of :func:`window_partition`: ``(B * nW, w, w, C) -> (B, H, W, C)``."""
    b = windows.shape[0] // ((h // window) * (w // window))
    x = windows.view(b, h // window, w // window, window, window, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


def relative_position_index(window: int) -> torch.Tensor:
    """``(w^2, w^2)`` long: the bias-table row of offset ``(dy, dx)`` between tokens i and j of a window."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)  # (2, N)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)  # (N, N, 2), offsets in [-(w-1), w-1]
    rel = rel + (window - 1)  # shift to [0, 2w-2]
    return rel[..., 0] * (2 * window - 1) + rel[..., 1]


def shifted_window_mask(h: int, w: int, window: int, shift: int) -> torch.Tensor:
    """``(nW, w^2, w^2)``: 0 between tokens from the same region of the rolled map, -100 otherwise."""
    region = torch.zeros(1, h, w, 1)
    spans = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    label = 0
    for hs in spans:  # 3 x 3 regions: the roll wraps the last `shift` rows/columns to the top/left
        for ws in spans:
            region[:, hs, ws, :] = label
            label += 1
    ids = window_partition(region, window).view(-1, window * window)  # (nW, N)
    mask = ids.unsqueeze(1) - ids.unsqueeze(2)
    return mask.masked_fill(mask != 0, MASK_VALUE).masked_fill(mask == 0, 0.0)


def drop_path(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Stochastic depth (timm ``DropPath``): zero a sample's residual branch with probability p, rescale the rest."""
    if p == 0.0 or not training:
        return x
    keep = 1 - p
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    return x * mask.div_(keep)


class WindowAttention(nn.Module):
    """Multi-head self-attention within windows, with a relative position bias: ``(B*nW, N, C) -> same``."""

    def __init__(self, dim: int, window: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, num_heads))
        self.register_buffer("relative_position_index", relative_position_index(window), persistent=False)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (B*nW, nh, N, hs)
        attn = (q * self.scale) @ k.transpose(-2, -1)  # (B*nW, nh, N, N)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        attn = attn + bias.permute(2, 0, 1).unsqueeze(0)  # (1, nh, N, N)
        if mask is not None:
            nw = mask.shape[0]  # windows per image: the batch is image-major
            attn = attn.view(b // nw, nw, self.num_heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, n, n)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class SwinBlock(nn.Module):
    """Pre-norm (shifted-)window attention and MLP on tokens ``(B, H*W, C)`` of a fixed ``H x W`` map."""

    def __init__(
        self, dim: int, resolution: int, num_heads: int, window: int, shift: int, mlp_ratio: float, drop_rate: float
    ) -> None:
        super().__init__()
        if resolution <= window:  # one window covers the map: nothing to shift (the reference's rule)
            window, shift = resolution, 0
        self.resolution, self.window, self.shift, self.drop_rate = resolution, window, shift, drop_rate
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
        mask = shifted_window_mask(resolution, resolution, window, shift) if shift else None
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c = x.shape
        h = w = self.resolution
        y = self.norm1(x).view(b, h, w, c)
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        windows = window_partition(y, self.window).view(-1, self.window * self.window, c)  # (B*nW, N, C)
        windows = self.attn(windows, self.attn_mask).view(-1, self.window, self.window, c)
        y = window_reverse(windows, self.window, h, w)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + drop_path(y.view(b, h * w, c), self.drop_rate, self.training)
        return x + drop_path(self.mlp(self.norm2(x)), self.drop_rate, self.training)


class PatchMerging(nn.Module):
    """``(B, H*W, C) -> (B, H/2*W/2, 2C)``: each 2x2 neighbourhood concatenated, normed, reduced."""

    def __init__(self, dim: int, resolution: int) -> None:
        super().__init__()
        self.resolution = resolution
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c = x.shape
        x = x.view(b, self.resolution, self.resolution, c)
        # (even, even), (odd, even), (even, odd), (odd, odd) rows/columns: the reference's order
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
        return self.reduction(self.norm(x.view(b, -1, 4 * c)))


class SwinTransformer(nn.Module):
    """Images ``(B, 3, S, S)`` -> logits ``(B, num_classes)``; S is fixed at construction (the masks)."""

    def __init__(self, cfg: SwinConfig) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, cfg.embed_dim, cfg.patch_size, cfg.patch_size)
        self.patch_norm = nn.LayerNorm(cfg.embed_dim)
        rates = torch.linspace(0, cfg.drop_path_rate, sum(cfg.depths)).tolist()  # rises block by block
        res, dim, stages = cfg.image_size // cfg.patch_size, cfg.embed_dim, []
        for i, (depth, heads) in enumerate(zip(cfg.depths, cfg.num_heads)):
            rate, rates = rates[:depth], rates[depth:]
            blocks: list[nn.Module] = [
                SwinBlock(dim, res, heads, cfg.window_size, 0 if j % 2 == 0 else cfg.window_size // 2,
                          cfg.mlp_ratio, rate[j])
                for j in range(depth)
            ]  # fmt: skip
            if i < len(cfg.depths) - 1:
                blocks.append(PatchMerging(dim, res))
                res, dim = res // 2, dim * 2
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)  # (B, (S/32)^2, 8C)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, cfg.num_classes)
        for m in self.modules():
            transformer_init_weights(m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_norm(self.patch_embed(x).flatten(2).transpose(1, 2))  # (B, (S/4)^2, C)
        x = self.norm(self.stages(x))
        return self.head(x.mean(dim=1))  # the reference's AdaptiveAvgPool1d over tokens


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """The reference's ``set_weight_decay``: no decay on biases, norms and relative-position tables."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        skip = p.ndim == 1 or name.endswith(".bias") or "relative_position_bias_table" in name
        (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class SwinWorkload(Workload):
    """Train step of the reference: label-smoothed cross-entropy, gradient norm clipped before AdamW."""

    max_grad_norm = CLIP_GRAD  # the reference's AMP path unscales, then clips the true gradients

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs, self.targets, label_smoothing=0.1)


def _create_swin(ctx: BuildContext, cfg: SwinConfig, **kwargs) -> Workload:
    smoke = dict(image_size=32, embed_dim=16, num_heads=(1, 2, 2, 4), depths=(2, 2, 2, 2), window_size=2)
    cfg = replace(cfg, **{**(smoke if ctx.smoke else {}), **kwargs})
    model = SwinTransformer(cfg)
    images = ctx.randn(ctx.batch_size, 3, cfg.image_size, cfg.image_size)
    labels = ctx.randint(0, cfg.num_classes, (ctx.batch_size,))
    opt = torch.optim.AdamW(_param_groups(model, 0.05), lr=1e-3, betas=(0.9, 0.999), eps=1e-8) if ctx.train else None
    return SwinWorkload(ctx, model, (images,), labels, optimizer=opt)


@register_model(
    domain="vision", task="classification", batch_size=(128, 64), param_count=28_288_354,
    source="Liu et al., Swin Transformer, ICCV 2021; microsoft/Swin-Transformer swin_tiny_patch4_window7_224",
    unsupported_precisions=("fp16",),
    notes="Param count as the reference and torchvision swin_t. fp16 unsupported: in pure float16 AdamW's eps "
          "(1e-8) rounds to 0 and parameters with zero gradients divide 0 by 0 in the first step, so training "
          "turns NaN (the reference trains with AMP). Smoke: 32 px, C=16, window 2.",
)  # fmt: skip
def swin_t(ctx: BuildContext, **kwargs) -> Workload:
    """Swin-T (C=96, depths 2-2-6-2, window 7) at 224x224."""
    return _create_swin(ctx, SwinConfig(), **kwargs)
