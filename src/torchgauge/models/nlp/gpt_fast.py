"""TorchBench's ``simple_gpt`` and ``simple_gpt_tp_manual``: LLaMA-7B prefill into a static KV cache.

Reference: pytorch/benchmark ``torchbenchmark/models/simple_gpt/{__init__,model}.py`` and
``torchbenchmark/models/simple_gpt_tp_manual/{__init__,model,tp}.py`` (commit 0e83c440), from
meta-pytorch/simple_gpt, the gpt-fast style LLaMA (Touvron et al., 2023) after nanoGPT and
lit-llama. This is an independent re-implementation of their single-device form.

Architecture (``LLaMA.from_name("7B")``): 32 layers, 4096 wide, 32 heads of 128, SwiGLU MLP 11008
wide (``find_multiple(int(2 * 4 * 4096 / 3), 256)``), RMSNorm (eps 1e-5, computed in the weights'
dtype), interleaved-pair rotary embeddings, untied 32,000-token embedding and head, no biases:
6,738,415,616 parameters, all in bfloat16. ``setup_caches`` allocates a (1, 32, 2048, 128) key and
value cache per layer, a lower-triangular (2048, 2048) boolean mask and the rotary table (built in
bfloat16 arithmetic and stored as float16, "to mimic complex32").

The timed call is ``model(idx, input_pos)`` with a 10-token int32 prompt at positions 0..9, batch 1,
eval only: the keys and values go into the cache at ``input_pos`` and each query attends over all
2048 cache slots through the mask rows of its positions (SDPA with a boolean mask); the output is
the (1, 10, 32000) bfloat16 logits. TorchBench's ``train()`` raises NotImplementedError, so there is
no training mode.

``simple_gpt`` vs ``simple_gpt_tp_manual`` at world size 1 (what each reduces to on one device):

* ``simple_gpt`` shards with DTensor (``parallelize_module``: q/k/v and the MLP's two input
  projections column-wise, the output projections row-wise). Before that,
  ``prepare_qkv_for_dtensor_tp`` splits the fused q/k/v weight into three Linears, so its forward
  runs three 4096 x 4096 projections. On one device DTensor is an identity wrapper.
* ``simple_gpt_tp_manual`` shards by hand (``tp.py``: slices of each weight plus an all-reduce
  forward hook on the attention and MLP outputs); at world size 1 the slices are whole and the
  all-reduces are identities. Its attention keeps the fused q/k/v projection (one 4096 x 12288
  matmul, then ``split``), supports grouped queries (``n_query_groups``, 32 for 7B, so every group
  has one head) and calls ``repeat_interleave(1)`` on the full cache, which copies both 2048-slot
  caches every layer; its forward runs under ``no_grad``.

What differs from TorchBench: both need CUDA, bfloat16 support and a distributed launch
(``--multiprocess``; ``apply_tp`` even asserts a world size above 1), and time the model only
through the dynamo runner; here one device, any device type. The KV caches are buffers, not the
``nn.Parameter``s TorchBench makes them, so they are not counted as weights (TorchBench's
``parameters()`` would add 536,870,912 cache entries) and no optimizer could see them. At
bfloat16 the 6.7B weights take 12.6 GiB and the caches 1 GiB: a full-size run declares ~14 GiB and is
``unsupported`` on a smaller machine; smoke size runs anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["GPTFastConfig", "GPTFast", "KVCache", "build_rope_cache", "apply_rope"]


def find_multiple(n: int, k: int) -> int:
    """The smallest multiple of ``k`` that is at least ``n``."""
    return n if n % k == 0 else n + k - n % k


@dataclass(frozen=True)
class GPTFastConfig:
    block_size: int = 2048  # cache length and mask size
    vocab_size: int = 32000  # already a multiple of 64 (padded_vocab_size)
    n_layer: int = 32
    n_head: int = 32
    n_embd: int = 4096
    n_query_groups: int = 32  # key/value heads; tp_manual's LLaMA-2 config field (= n_head for 7B)
    intermediate_size: int = find_multiple(int(2 * 4 * 4096 / 3), 256)  # 11008: 2/3 of 4 x n_embd, rounded up
    rope_base: float = 10000.0
    fused_qkv: bool = False  # True: tp_manual's one q/k/v Linear; False: simple_gpt's three
    prompt_len: int = 10  # TorchBench prompt_size

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class RMSNorm(nn.Module):
    """``weight * x * rsqrt(mean(x^2) + eps)`` in the input's dtype (no float32 upcast, as the reference)."""

    def __init__(self, size: int, eps: float = 1e-5, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps))


def build_rope_cache(seq_len: int, head_dim: int, dtype: torch.dtype, base: float = 10000.0) -> torch.Tensor:
    """``(seq_len, head_dim / 2, 2)`` cos/sin table, computed in ``dtype`` as the reference does.

    Positions and frequencies are formed in ``dtype`` (bfloat16 rounds positions above 256), and a
    half-precision table is stored as float16 ("to mimic complex32").
    """
    theta = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=dtype) / head_dim))  # (hd/2,)
    positions = torch.arange(seq_len, dtype=dtype)
    angles = torch.outer(positions, theta).float()  # (T, hd/2)
    cache = torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)
    return cache.half() if dtype in (torch.float16, torch.bfloat16) else cache


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate the interleaved channel pairs ``(2i, 2i+1)`` of ``x (B, T, nh, hd)`` in float32."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)  # (B, T, nh, hd/2, 2)
    rope = rope.view(1, pairs.size(1), 1, pairs.size(3), 2)
    cos, sin = rope[..., 0], rope[..., 1]
    rotated = torch.stack([pairs[..., 0] * cos - pairs[..., 1] * sin, pairs[..., 1] * cos + pairs[..., 0] * sin], -1)
    return rotated.flatten(3).type_as(x)


class KVCache(nn.Module):
    """Static ``(B, n_kv_heads, block_size, hd)`` key and value buffers written at ``input_pos``."""

    def __init__(self, batch_size: int, n_heads: int, block_size: int, head_dim: int, dtype: torch.dtype) -> None:
        super().__init__()
        shape = (batch_size, n_heads, block_size, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k_cache[:, :, input_pos] = k  # k, v: (B, nkv, T, hd)
        self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTFastConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = config
        C, kv = config.n_embd, config.n_query_groups * config.head_dim
        if config.fused_qkv:
            self.wqkv = nn.Linear(C, C + 2 * kv, bias=False, dtype=dtype)
        else:
            self.wq, self.wk, self.wv = (nn.Linear(C, n, bias=False, dtype=dtype) for n in (C, kv, kv))
        self.proj = nn.Linear(C, C, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor, cache: KVCache):
        cfg = self.config
        B, T, C = x.shape
        kv = cfg.n_query_groups * cfg.head_dim
        if cfg.fused_qkv:
            q, k, v = self.wqkv(x).split([C, kv, kv], dim=-1)
        else:
            q, k, v = self.wq(x), self.wk(x), self.wv(x)
        q = apply_rope(q.view(B, T, cfg.n_head, cfg.head_dim), rope).transpose(1, 2)  # (B, nh, T, hd)
        k = apply_rope(k.view(B, T, cfg.n_query_groups, cfg.head_dim), rope).transpose(1, 2)  # (B, nkv, T, hd)
        v = v.view(B, T, cfg.n_query_groups, cfg.head_dim).transpose(1, 2)
        k, v = cache.update(input_pos, k, v)  # (B, nkv, block_size, hd)
        if cfg.fused_qkv:  # tp_manual's GQA path: a copy of the whole cache even for groups of one
            group = cfg.n_head // cfg.n_query_groups
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)  # (B, nh, T, hd)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, config: GPTFastConfig, dtype: torch.dtype) -> None:
        super().__init__()
        C, H = config.n_embd, config.intermediate_size
        self.fc_1 = nn.Linear(C, H, bias=False, dtype=dtype)  # gate
        self.fc_2 = nn.Linear(C, H, bias=False, dtype=dtype)  # up
        self.proj = nn.Linear(H, C, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.silu(self.fc_1(x)) * self.fc_2(x))


class Block(nn.Module):
    def __init__(self, config: GPTFastConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.norm_1 = RMSNorm(config.n_embd, dtype=dtype)
        self.attn = CausalSelfAttention(config, dtype)
        self.norm_2 = RMSNorm(config.n_embd, dtype=dtype)
        self.mlp = SwiGLU(config, dtype)

    def forward(self, x, rope, mask, input_pos, cache):
        x = x + self.attn(self.norm_1(x), rope, mask, input_pos, cache)
        return x + self.mlp(self.norm_2(x))


class GPTFast(nn.Module):
    """``forward(idx (B, T) int, input_pos (T,))`` -> logits ``(B, T, vocab)``; fills the KV caches."""

    def __init__(self, config: GPTFastConfig, max_batch_size: int, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.config = config
        # Weights made in ``dtype`` directly (TorchBench builds fp32, then .to(torch.bfloat16)).
        self.wte = nn.Embedding(config.vocab_size, config.n_embd, dtype=dtype)
        self.blocks = nn.ModuleList(Block(config, dtype) for _ in range(config.n_layer))
        self.ln_f = RMSNorm(config.n_embd, dtype=dtype)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False, dtype=dtype)
        # setup_caches(max_batch_size, max_seq_length=block_size)
        self.kv_caches = nn.ModuleList(
            KVCache(max_batch_size, config.n_query_groups, config.block_size, config.head_dim, dtype)
            for _ in range(config.n_layer)
        )
        self.register_buffer(
            "rope_cache",
            build_rope_cache(config.block_size, config.head_dim, dtype, config.rope_base),
            persistent=False,
        )
        causal = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("mask_cache", causal[None, None], persistent=False)  # (1, 1, S, S)

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        rope = self.rope_cache.index_select(0, input_pos)  # (T, hd/2, 2)
        mask = self.mask_cache.index_select(2, input_pos)  # (1, 1, T, block_size)
        x = self.wte(idx)  # (B, T, C)
        for block, cache in zip(self.blocks, self.kv_caches):
            x = block(x, rope, mask, input_pos, cache)
        return self.lm_head(self.ln_f(x))


# Smoke: the same prefill (10 tokens into a static cache) at toy width.
_SMOKE = dict(block_size=64, vocab_size=512, n_layer=2, n_head=4, n_embd=64, n_query_groups=4, intermediate_size=192)


def _create_gpt_fast(ctx: BuildContext, fused_qkv: bool, **kwargs) -> Workload:
    config = GPTFastConfig(**((_SMOKE if ctx.smoke else {}) | {"fused_qkv": fused_qkv} | kwargs))
    with torch.device(ctx.device):
        model = GPTFast(config, max_batch_size=ctx.batch_size)
    idx = ctx.randint(0, config.vocab_size, (ctx.batch_size, config.prompt_len), dtype=torch.int32)
    input_pos = torch.arange(config.prompt_len, device=ctx.device)
    return Workload(ctx, model, (idx, input_pos))


_SOURCE = "Touvron et al. 2023 (LLaMA 7B); meta-pytorch/simple_gpt (gpt-fast style) as in TorchBench "
# bf16 weights 12.6 GiB + KV caches 1 GiB + mask and activations.
_FULL_MEMORY_GIB = 14


@register_model(
    domain="nlp", task="generation", batch_size=1, modes=("eval",), param_count=6_738_415_616,
    source=_SOURCE + "simple_gpt", tags=("llm",), full_memory_gib=_FULL_MEMORY_GIB,
    notes="LLaMA-7B in bfloat16, 10-token prefill into a 2048-slot KV cache; TorchBench's DTensor TP at "
    "world size 1; eval only (TorchBench has no training); ~14 GiB at full size",
)  # fmt: skip
def simple_gpt(ctx: BuildContext, **kwargs) -> Workload:
    """LLaMA-7B (bf16) prefill of 10 tokens with separate q/k/v projections (simple_gpt at world size 1)."""
    return _create_gpt_fast(ctx, fused_qkv=False, **kwargs)


@register_model(
    domain="nlp", task="generation", batch_size=1, modes=("eval",), param_count=6_738_415_616,
    source=_SOURCE + "simple_gpt_tp_manual", tags=("llm",), full_memory_gib=_FULL_MEMORY_GIB,
    notes="simple_gpt's manual tensor-parallel variant at world size 1: fused q/k/v, GQA repeat of the "
    "whole cache, identity all-reduces; eval only; ~14 GiB at full size",
)  # fmt: skip
def simple_gpt_tp_manual(ctx: BuildContext, **kwargs) -> Workload:
    """LLaMA-7B (bf16) prefill of 10 tokens with the fused q/k/v projection (tp_manual at world size 1)."""
    return _create_gpt_fast(ctx, fused_qkv=True, **kwargs)
