"""TorchBench's ``cm3leon_generate``: greedy incremental generation from a CM3Leon-style decoder.

Reference: pytorch/benchmark ``torchbenchmark/models/cm3leon_generate/{__init__,model}.py``
(commit 0e83c440), a cut-down metaseq ``TransformerDecoder`` (Yu et al., "Scaling Autoregressive
Multi-Modal Models: Pretraining and Instruction Tuning", 2023) driven by a ``SequenceGenerator``
with beam 1. This is an independent, compact re-implementation of the same network and loop.

Architecture (``create_model(1536)``): 24 pre-LayerNorm decoder layers, 1536 wide, 16 heads,
ReLU MLP 6144 wide, biases everywhere; a 2048-token embedding (padding index -1, i.e. 2047) tied to
the output projection; learned positions offset past the padding index (4096 rows, metaseq's
``make_positions``); no embedding scale; final LayerNorm. 689,396,736 parameters.

The timed step is ``SequenceGenerator.forward`` on a (1, 64) prompt drawn from ids [1, 128): 64
greedy tokens (argmax of the float log-softmax), 65 decoder calls under ``no_grad``. It
reproduces two properties of TorchBench's incremental decoding that set what is timed:

* Every call, the prompt call included, embeds only the last token: ``forward_embedding`` slices
  to ``tokens[:, -1:]`` whenever an incremental state is passed, and the generator passes one
  (empty) from the first call. The prompt is never encoded; only its length and last token count.
* All 24 attention layers share one key/value cache entry: the state key is the constant
  ``"5.attn_state"`` (metaseq's per-module uuid was replaced by ``"5"``), so each layer appends
  its key and value to the previous layer's. Layer ``l`` on call ``s`` attends over
  ``24 * s + l + 1`` keys; after 65 calls the cache holds 1,560 entries.

What differs: TorchBench never initialises the attention and MLP ``Linear`` weights
(``torch.empty``), so its logits are whatever memory held (all NaN in our CPU check, every greedy
id 0); here they take ``nn.Linear``'s default init, so the greedy tokens are real argmaxes. With
the same (initialised) weights, TorchBench's code and this one generate the same ids. A generated padding id
(2047) would make TorchBench's attention fail an assertion (its padding mask is as long as the
sequence, the shared cache is not); here it raises with that reason. The all-zero 1 x 1 future
mask TorchBench adds to each single-query score row is left out (adding zeros); its
``nan_to_num`` is kept. Eval only: TorchBench's ``train()`` computes cross-entropy between the
generated int64 ids and the prompt, which fails in torch ("log_softmax not implemented for
'Long'"), and dynamo's runner lists the model under "DEFAULT_TRAIN_BSIZE not implemented".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["CM3LeonConfig", "CM3LeonDecoder", "SharedKVCache", "GreedyGenerator", "make_positions"]


@dataclass(frozen=True)
class CM3LeonConfig:
    vocab_size: int = 2048  # embedding rows; the last (2047) is the padding id
    embed_dim: int = 1536  # TorchBench's create_model(embed_dim=1536)
    n_layers: int = 24
    n_heads: int = 16  # head_dim 96
    ffn_dim: int = 6144  # 4 x embed_dim
    max_positions: int = 2048  # max_target_positions; the table adds padding_idx + 1 rows
    prompt_len: int = 64  # TorchBench prompt_size
    generate_len: int = 64  # TorchBench generate_size ("quite a bit smaller than T5")
    prompt_vocab: int = 128  # prompt ids are drawn from [1, 128) ("cribbed from original script")

    @property
    def padding_idx(self) -> int:
        return self.vocab_size - 1  # nn.Embedding(..., padding_idx=-1) normalises -1 to this


def make_positions(tokens: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """metaseq's positions: non-padding tokens count up from ``padding_idx + 1``; padding stays at it."""
    mask = tokens.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class SharedKVCache:
    """One key/value store that every layer appends to, as TorchBench's shared state entry does.

    ``key`` and ``value`` are ``(B * n_heads, S, head_dim)``; ``S`` grows by one per layer per call.
    """

    def __init__(self) -> None:
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.key is not None:
            k, v = torch.cat([self.key, k], dim=1), torch.cat([self.value, v], dim=1)
        self.key, self.value = k, v
        return k, v

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.size(1)


class IncrementalSelfAttention(nn.Module):
    """One query position against the shared cache: fairseq's bmm attention with float32 softmax."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.q_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(T, B, C)`` -> ``(B * nh, T, hd)``."""
        T, B, _ = t.shape
        return t.contiguous().view(T, B * self.n_heads, self.head_dim).transpose(0, 1)

    def forward(self, x: torch.Tensor, cache: SharedKVCache) -> torch.Tensor:
        T, B, C = x.shape  # T x B x C, as metaseq (T == 1 in generation)
        q = self._split_heads(self.q_proj(x) * self.scaling)  # (B*nh, T, hd)
        k, v = cache.append(self._split_heads(self.k_proj(x)), self._split_heads(self.v_proj(x)))  # (B*nh, S, hd)
        scores = torch.nan_to_num(torch.bmm(q, k.transpose(1, 2)))  # (B*nh, T, S)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
        y = torch.bmm(probs, v).transpose(0, 1).contiguous().view(T, B, C)
        return self.out_proj(y)


class DecoderLayer(nn.Module):
    """Pre-norm: ``x + attn(ln(x))``, then ``x + fc2(relu(fc1(ln(x))))``."""

    def __init__(self, config: CM3LeonConfig) -> None:
        super().__init__()
        self.self_attn = IncrementalSelfAttention(config.embed_dim, config.n_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.embed_dim)
        self.fc1 = nn.Linear(config.embed_dim, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, config.embed_dim)
        self.final_layer_norm = nn.LayerNorm(config.embed_dim)

    def forward(self, x: torch.Tensor, cache: SharedKVCache) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x), cache)
        return x + self.fc2(F.relu(self.fc1(self.final_layer_norm(x))))


class CM3LeonDecoder(nn.Module):
    def __init__(self, config: CM3LeonConfig) -> None:
        super().__init__()
        self.config = config
        pad = config.padding_idx
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=pad)
        # Learned positions offset past the padding index, as metaseq's PositionalEmbedding(learned=True).
        self.embed_positions = nn.Embedding(config.max_positions + pad + 1, config.embed_dim, padding_idx=pad)
        nn.init.normal_(self.embed_positions.weight, std=config.embed_dim**-0.5)
        with torch.no_grad():
            self.embed_positions.weight[pad].zero_()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))
        self.layer_norm = nn.LayerNorm(config.embed_dim)

    def forward(self, tokens: torch.Tensor, cache: SharedKVCache) -> torch.Tensor:
        """Ids so far ``(B, L)`` to logits ``(B, 1, V)`` for the last one, appending to ``cache``."""
        pad = self.config.padding_idx
        if tokens.eq(pad).any():  # TorchBench checks too (a host sync every call), then fails on it
            raise RuntimeError(
                f"padding id {pad} in the sequence: TorchBench's shared cache cannot take a padding mask"
            )
        positions = self.embed_positions(make_positions(tokens, pad))[:, -1:]  # (B, 1, C)
        x = self.embed_tokens(tokens[:, -1:]) + positions  # only the last token, even for the prompt
        x = x.transpose(0, 1).contiguous()  # (1, B, C)
        for layer in self.layers:
            x = layer(x, cache)
        x = F.linear(self.layer_norm(x), self.embed_tokens.weight)  # tied output projection
        return x.transpose(0, 1).contiguous()  # (B, 1, V)


class GreedyGenerator(nn.Module):
    """TorchBench's ``SequenceGenerator`` (beam 1): prompt call, then one call per generated token.

    Returns the ``(B * beam, prompt + generate)`` ids and the last call's log-probabilities (which
    TorchBench computes after the final token and discards).
    """

    def __init__(self, model: CM3LeonDecoder, beam_size: int = 1, generate_len: int = 64) -> None:
        super().__init__()
        self.model, self.beam_size, self.generate_len = model, beam_size, generate_len
        self.last_cache: SharedKVCache | None = None  # kept for inspection (tests)

    @torch.no_grad()
    def forward(self, src_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bsz, start = src_tokens.shape
        max_len = start + self.generate_len
        tokens = torch.zeros(bsz * self.beam_size, max_len, dtype=torch.long, device=src_tokens.device)
        tokens[:, :start] = src_tokens.repeat_interleave(self.beam_size, 0)
        cache = self.last_cache = SharedKVCache()
        lprobs = F.log_softmax(self.model(tokens[:, :start], cache).float()[:, -1, :], dim=-1)
        for step in range(start, max_len):
            tokens[:, step] = lprobs.max(-1)[1]
            lprobs = F.log_softmax(self.model(tokens[:, : step + 1], cache).float()[:, -1, :], dim=-1)
        return tokens, lprobs


# Smoke: the same loop (64-token prompt, 64 generated) through a toy-width decoder.
_SMOKE = dict(vocab_size=256, embed_dim=64, n_layers=2, n_heads=4, ffn_dim=256, max_positions=256)


@register_model(
    domain="nlp", task="generation", batch_size=1, modes=("eval",), param_count=689_396_736,
    source="Yu et al. 2023 (CM3Leon); metaseq TransformerDecoder as in TorchBench cm3leon_generate",
    # fp32 weights 2.6 GiB plus the generation state.
    full_memory_gib=3,
    notes="greedy generation, 64 tokens after a 64-token prompt, 65 single-token decoder calls with "
    "TorchBench's shared key/value cache; eval only (TorchBench's train step fails)",
)  # fmt: skip
def cm3leon_generate(ctx: BuildContext, **kwargs) -> Workload:
    """24-layer 1536-wide decoder generating 64 greedy tokens after a 64-token prompt (beam 1)."""
    config = CM3LeonConfig(**((_SMOKE if ctx.smoke else {}) | kwargs))
    with torch.device(ctx.device):
        generator = GreedyGenerator(CM3LeonDecoder(config), beam_size=1, generate_len=config.generate_len)
    prompt = ctx.randint(1, config.prompt_vocab, (ctx.batch_size, config.prompt_len))
    return Workload(ctx, generator, (prompt,))
