"""Vision Transformer: Dosovitskiy et al., "An Image is Worth 16x16 Words", 2021.

Layers follow timm's ``vision_transformer.py`` (Apache-2.0; ``vit_base_patch16_224``,
``vit_large_patch16_224``), which match torchvision's ``vit_b_16`` / ``vit_l_16`` parameter for
parameter: 16x16 patches embedded by a strided conv, a class token, learned position
embeddings, pre-norm blocks (LayerNorm eps 1e-6, fused qkv with bias, GELU MLP of ratio 4),
a final LayerNorm and a linear head on the class token. TorchBench's ``timm_vision_transformer``
is timm's ``vit_small_patch16_224`` (width 384, 6 heads) and ``timm_vision_transformer_large``
its ``vit_giant_patch14_224`` (Zhai et al., "Scaling Vision Transformers", 2022: 14x14 patches,
width 1408, 40 blocks, 16 heads, MLP ratio 48/11), both run through TorchBench's timm step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, image_classification

from ..common.torchbench_precision import TIMM_FACTORY
from .timm_step import timm_classification

__all__ = ["VisionTransformer", "ViTConfig"]


@dataclass(frozen=True)
class ViTConfig:
    image_size: int = 224
    patch_size: int = 16
    embed_dim: int = 768  # ViT-B
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    num_classes: int = 1000


class Attention(nn.Module):
    """Multi-head self-attention with one fused qkv projection."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.num_heads, c // self.num_heads)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, B, nh, T, hs)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])  # (B, nh, T, hs)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """Images ``(B, 3, S, S)`` -> logits ``(B, num_classes)`` with S = ``cfg.image_size``."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        d = cfg.embed_dim
        num_patches = (cfg.image_size // cfg.patch_size) ** 2
        self.patch_embed = nn.Conv2d(3, d, cfg.patch_size, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, d))  # +1: the class token
        self.blocks = nn.Sequential(*(Block(d, cfg.num_heads, cfg.mlp_ratio) for _ in range(cfg.depth)))
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, cfg.num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for m in self.modules():
            if isinstance(m, nn.Linear):  # timm's default ("" mode) initialisation
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def no_weight_decay(self) -> set[str]:
        """Parameters timm's optimizer factory keeps out of weight decay."""
        return {"pos_embed", "cls_token"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)  # (B, N, D), N = (S / patch)^2
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed  # (B, N + 1, D)
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])  # class token -> (B, num_classes)


def _create_vit(
    ctx: BuildContext, cfg: ViTConfig, *, workload: Callable[..., Workload] = image_classification, **kwargs
) -> Workload:
    # Smoke: 32 px (2x2 patches), two blocks at a quarter of the width (same heads, head dim
    # a quarter); the full network holds 85M (B) / 302M (L) weights whose init and optimizer
    # steps alone take seconds on a CPU, and at full width ViT-L's two blocks still took 123 ms.
    # ``workload``: our image_classification step, or TorchBench's timm step for timm_*.
    smoke = {"image_size": 32, "depth": 2, "embed_dim": cfg.embed_dim // 4}
    cfg = replace(cfg, **{**ctx.pick({}, smoke), **kwargs})
    return workload(ctx, VisionTransformer(cfg), image_size=cfg.image_size, num_classes=cfg.num_classes)


VIT_SMALL_PATCH16 = ViTConfig(embed_dim=384, depth=12, num_heads=6)  # timm vit_small_patch16_224
VIT_GIANT_PATCH14 = ViTConfig(
    patch_size=14, embed_dim=1408, depth=40, num_heads=16, mlp_ratio=48 / 11
)  # timm vit_giant_patch14_224


_SOURCE = "Dosovitskiy et al., An Image is Worth 16x16 Words, 2021; timm vision_transformer"


@register_model(
    domain="vision", task="classification", source=_SOURCE, batch_size=(32, 32), param_count=86_567_656
)  # fmt: skip
def vit_b_16(ctx: BuildContext, **kwargs) -> Workload:
    """ViT-B/16 at 224x224."""
    return _create_vit(ctx, ViTConfig(), **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE, batch_size=(8, 8), param_count=304_326_632
)  # fmt: skip
def vit_l_16(ctx: BuildContext, **kwargs) -> Workload:
    """ViT-L/16 at 224x224."""
    return _create_vit(ctx, ViTConfig(embed_dim=1024, depth=24, num_heads=16), **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE + " vit_small_patch16_224 via TorchBench's timm harness",
    batch_size=(32, 32), param_count=22_050_664,
    torchbench_precision=TIMM_FACTORY,
)  # fmt: skip
def timm_vision_transformer(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's timm_vision_transformer: ViT-S/16 (timm vit_small_patch16_224) at 224x224, timm's SGD step."""
    return _create_vit(ctx, VIT_SMALL_PATCH16, workload=timm_classification, **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE + " vit_giant_patch14_224 via TorchBench's timm harness",
    batch_size=(32, 32), param_count=1_012_611_432,
    # fp32 weights 3.8 GiB. Training adds gradients and Nesterov momentum (3.8 GiB each) and the
    # activations autograd saves at batch 32: 29 GiB with fused attention (CPU and CUDA SDPA),
    # counted with saved-tensor hooks on the meta device; 41 GiB in all, plus headroom. Eval
    # holds the weights plus one block's activations (< 1 GiB).
    full_memory_gib=(44, 5),
    notes="1.0B parameters: full size needs ~44 GiB to train and ~5 GiB to evaluate (fp32)",
    torchbench_precision=TIMM_FACTORY,
)  # fmt: skip
def timm_vision_transformer_large(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's timm_vision_transformer_large: ViT-g/14 (timm vit_giant_patch14_224), timm's SGD step."""
    # Smoke: two blocks at an eighth of the width (176, 16 heads of 11) so the weights stay small.
    smoke = {"embed_dim": VIT_GIANT_PATCH14.embed_dim // 8}
    return _create_vit(ctx, VIT_GIANT_PATCH14, workload=timm_classification, **{**ctx.pick({}, smoke), **kwargs})
