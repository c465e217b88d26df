"""Small Llama-architecture decoders: RMSNorm, rotary embeddings, SwiGLU and grouped-query attention.

Architecture of Touvron et al., "LLaMA" (2023) and Llama 2 (GQA), written after Meta's reference
``llama/model.py`` (Llama 2 Community License; this is an independent re-implementation). Two
configurations are registered:

- ``llama`` is TorchBench's: Meta's reference ``ModelArgs`` defaults (dim 512, 8 layers, 8 heads,
  SwiGLU hidden 1536, 32,000-token vocabulary, untied output: 60,039,680 parameters) with a
  key/value cache of ``max_batch_size 64 x max_seq_len 1024``. Eval only, as in TorchBench: one
  forward of ``ones(B, 32)`` int32 tokens at ``start_pos = 1`` that writes the cache, attends over
  the cached prefix *without* a causal mask (the reference builds one and never applies it) and
  returns the last position's logits ``(B, V)``.
- ``smollm_135m`` is SmolLM-135M (HuggingFaceTB, Apache-2.0), a published Llama-architecture model:
  30 layers, 576 wide, 9 query heads sharing 3 key/value heads, SwiGLU hidden 1536, 49,152-token
  vocabulary, tied input/output embeddings: 134,515,008 parameters, trained on 1024-token sequences.

Rotary embeddings use the rotate-half layout (Hugging Face's; Meta's reference rotates
interleaved pairs as complex numbers, the same arithmetic on permuted channels), and GQA repeats
each key/value head for its query group as Meta's ``repeat_kv`` does, so every SDPA backend applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload, language_modeling

__all__ = ["TORCHBENCH_LLAMA", "Attention", "Llama", "LlamaConfig", "RMSNorm", "apply_rotary", "rotary_tables"]


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 49152
    dim: int = 576
    n_layers: int = 30  # deep and narrow: SmolLM's choice for small models
    n_heads: int = 9  # head_dim 64
    n_kv_heads: int = 3  # each key/value head serves 3 query heads
    ffn_hidden: int = 1536  # SwiGLU hidden width (8/3 x dim, rounded)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048
    tie_embeddings: bool = True  # output projection = token embedding
    # > 0: a key/value cache of (max_cache_batch, max_seq_len) per layer, and forward(tokens,
    # start_pos) returns the last position's logits, as Meta's reference inference model.
    max_cache_batch: int = 0


# TorchBench's llama: Meta's reference ModelArgs defaults with vocab_size=32000.
TORCHBENCH_LLAMA = LlamaConfig(
    vocab_size=32000,
    dim=512,
    n_layers=8,
    n_heads=8,
    n_kv_heads=8,
    ffn_hidden=1536,
    max_seq_len=1024,
    tie_embeddings=False,
    max_cache_batch=64,
)


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` of shape ``(seq_len, head_dim)``: angle ``pos * theta^(-2i/head_dim)``, halves repeated."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (head_dim/2,)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (T, head_dim/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, head_dim)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs ``(i, i + head_dim/2)`` of ``x (B, nh, T, hd)`` by their position's angle."""
    half = x.size(-1) // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos + rotated * sin).type_as(x)


class Attention(nn.Module):
    """Grouped-query attention with rotary positions on queries and keys.

    Without a cache it is causal over the input. With ``max_cache_batch > 0`` it keeps key/value
    buffers ``(max_cache_batch, max_seq_len, nkv, hd)``: ``forward(x, cos, sin, start_pos)``
    writes the new keys/values at ``start_pos`` and attends over the cached ``start_pos + T``
    positions unmasked, as Meta's reference does.
    """

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, max_cache_batch: int = 0, max_seq_len: int = 0) -> None:
        super().__init__()
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.cached = max_cache_batch > 0
        if self.cached:
            shape = (max_cache_batch, max_seq_len, n_kv_heads, self.head_dim)
            self.register_buffer("cache_k", torch.zeros(shape), persistent=False)
            self.register_buffer("cache_v", torch.zeros(shape), persistent=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hd)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, nkv, T, hd)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.cached:
            with torch.no_grad():  # the cache is state, not part of the graph
                self.cache_k[:B, start_pos : start_pos + T] = k.transpose(1, 2)
                self.cache_v[:B, start_pos : start_pos + T] = v.transpose(1, 2)
            k = self.cache_k[:B, : start_pos + T].transpose(1, 2)  # (B, nkv, start_pos + T, hd)
            v = self.cache_v[:B, : start_pos + T].transpose(1, 2)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, nh, S, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=not self.cached)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, dim, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(
            config.dim, config.n_heads, config.n_kv_heads, config.max_cache_batch, config.max_seq_len
        )
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config.dim, config.ffn_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin, start_pos)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if config.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rotary_tables(config.dim // config.n_heads, config.max_seq_len, config.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        """Token ids ``(B, T)`` to logits: ``(B, T, V)``, or the last position's ``(B, V)`` with a cache."""
        T = tokens.size(1)
        cos, sin = self.rope_cos[start_pos : start_pos + T], self.rope_sin[start_pos : start_pos + T]
        h = self.tok_embeddings(tokens)  # (B, T, dim)
        for layer in self.layers:
            h = layer(h, cos, sin, start_pos)
        h = self.norm(h)
        if self.config.max_cache_batch:
            return self.output(h[:, -1, :]).float()  # only the last position's logits, as the reference
        return self.output(h)


# Toy width for size="smoke": the same layers, small enough for a 2 s CPU budget.
_SMOKE = dict(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=128)


def _create_llama_inference(ctx: BuildContext, seq_len: int = 32, start_pos: int = 1, **kwargs) -> Workload:
    # TorchBench's inputs: a batch of all-ones int32 prompts decoded at position 1.
    config = replace(TORCHBENCH_LLAMA, **(_SMOKE if ctx.smoke else {}), **kwargs)
    if ctx.batch_size > config.max_cache_batch:
        raise ValueError(f"batch size {ctx.batch_size} exceeds the KV cache's max_cache_batch={config.max_cache_batch}")
    tokens = torch.ones(ctx.batch_size, ctx.pick(seq_len, 8), dtype=torch.int32, device=ctx.device)
    return Workload(ctx, Llama(config), (tokens, start_pos))


def _create_smollm(ctx: BuildContext, seq_len: int = 1024, **kwargs) -> Workload:
    model = Llama(LlamaConfig(**((_SMOKE if ctx.smoke else {}) | kwargs)))
    return language_modeling(ctx, model, vocab_size=model.config.vocab_size, seq_len=ctx.pick(seq_len, 16), lr=3e-4)


@register_model(
    domain="nlp",
    task="language_modeling",
    batch_size=32,
    modes=("eval",),
    param_count=60_039_680,
    source="Touvron et al. 2023 (LLaMA); TorchBench llama (Meta's reference ModelArgs defaults)",
    notes="eval only, as TorchBench: 32 all-ones tokens at start_pos 1 through a 64 x 1024 KV cache, last-token logits",
)
def llama(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's llama: dim 512, 8 layers, 32k vocabulary, KV cache, last-token logits."""
    return _create_llama_inference(ctx, **kwargs)


@register_model(
    domain="nlp",
    task="language_modeling",
    batch_size=(8, 32),
    param_count=134_515_008,
    source="Touvron et al. 2023 (LLaMA); config of HuggingFaceTB/SmolLM-135M",
    notes="1024-token sequences; GQA 9 query / 3 key-value heads",
)
def smollm_135m(ctx: BuildContext, **kwargs) -> Workload:
    """Llama architecture at SmolLM-135M size (30 layers, 576 wide, GQA 9/3, tied embeddings)."""
    return _create_smollm(ctx, **kwargs)
