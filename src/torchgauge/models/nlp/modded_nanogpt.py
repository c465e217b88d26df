"""TorchBench's ``modded_nanogpt``: Keller Jordan's NanoGPT speedrun GPT (Aug 23 2025 record).

Reference: pytorch/benchmark ``torchbenchmark/models/modded_nanogpt/{__init__,model}.py`` (commit
0e83c440), vendored from KellerJordan/modded-nanogpt (MIT). This is an independent re-implementation
of the network TorchBench builds, ``GPT(50257, num_layers=12, num_heads=6, model_dim=768,
max_seq_len=262144)``:

* vocabulary padded to 50,304 (a multiple of 128); token embedding and three value embeddings,
  all bfloat16 (TorchBench calls ``.bfloat16()`` on every ``nn.Embedding``), so activations run in
  bfloat16 and every float32 weight is cast to the activations' dtype at use (``type_as``);
* 12 blocks, ``x = l0 * x + l1 * x0`` then attention and a ReLU^2 MLP (3072 wide, weights stored
  as two (768, 3072) matrices), each on ``rms_norm`` inputs; block 7 has no attention;
* attention: merged q/k/v/o weight (4, 768, 768), QK-norm, half-truncated rotary embeddings (32
  frequencies from 1 to 1/1024, 32 zeros), value embeddings mixed into v with learned lambdas in
  blocks 0-2 and 9-11 (the "012 ... 012" layout), attention scale 0.12, a sigmoid gate per head
  from the first 12 channels, and the sliding-window document-causal block masks below;
* U-net skips from the first six blocks into the last six, learned scalars (padded to a multiple
  of the fake world size 8, 64 in all), an untied zero-initialised head, logits soft-capped as
  ``30 * sigmoid(logits / 7.5)`` and cross-entropy (summed in training) against the targets.
  275,743,576 parameters.

Attention pattern. The speedrun builds FlexAttention ``BlockMask``s of 128-token blocks: for query
block ``i``, the key blocks that are causal and can share a document (a document starts after
each token 50256). Blocks entirely in the past and in one document are "full", the rest
"partial" (the diagonal, document edges). Of each kind it keeps the nearest ones: at most
``window - 1`` full blocks and ``max(window - n_full, 1)`` partial blocks, where ``window`` is the
long window (``get_window_size_blocks(0.5)`` = 7 blocks, 896 tokens) for blocks 0, 4, 7, 11 and
half of it (3 blocks) for the others; within kept blocks the document-causal rule applies.
:func:`sliding_window_document_mask` builds exactly that pattern as a dense (T, T) boolean mask,
and attention is ``scaled_dot_product_attention`` with it.

The timed step is TorchBench's only mode, training (dynamo's ``only_training``; both of
TorchBench's own ``train()`` and ``eval()`` raise NotImplementedError "not supported in CI"): the
forward on one sequence of 6,144 tokens ("originally 49152, lower to run flex attention in
eager"), int32 inputs, int64 targets, window 7 blocks, batch 1; the summed loss's backward; and
``torch.optim.Adam(lr=0.01)``, the optimizer dynamo's runner gives it.

What differs from TorchBench, which needs CUDA, bfloat16 and flex attention (CPU is
``not_implemented``): SDPA with the dense mask computes every (query, key) score and discards the
masked ones, where compiled flex attention skips whole masked blocks (at most 7 of 48 key blocks
per query block). TorchBench's eager run does not skip them either: uncompiled ``flex_attention``
falls back to a dense float32 implementation that applies only the ``mask_mod`` (document-causal)
and ignores the block mask's block lists, so eager TorchBench attends over the whole document,
not the sliding window (checked on torch 2.13: the eager loss is the same for every window). Here
the sliding window applies in eager mode too, as it does compiled; the dense cost matches
TorchBench's eager one, the scores are bfloat16 rather than float32. The head's training matmul is plain
bfloat16, not the speedrun's FP8 ``torch._scaled_mm`` custom op (H100 only). The rotary table is
one model-level buffer, not one 262,144-row copy per attention layer (11 x 134 MB in the reference);
the values are the same. Dynamo's runner also wraps the step in bfloat16 autocast, a no-op here as
the activations are already bfloat16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, UnsupportedError, Workload

__all__ = ["ModdedNanoGPTConfig", "ModdedNanoGPT", "sliding_window_document_mask", "window_size_blocks"]


def next_multiple_of_n(v: float, n: int) -> int:
    """The smallest multiple of ``n`` that is at least ``v`` (and at least ``n``)."""
    return max(n, math.ceil(v / n) * n)


def window_size_blocks(progress: float, block_size: int = 128) -> int:
    """The speedrun's window schedule: 128 to 1792 tokens over training, in blocks (0.5 -> 7)."""
    return next_multiple_of_n(1728 * progress, block_size) // block_size


@dataclass(frozen=True)
class ModdedNanoGPTConfig:
    vocab_size: int = 50257  # GPT-2 BPE; padded to a multiple of 128 inside the model
    num_layers: int = 12
    num_heads: int = 6
    head_dim: int = 128  # num_heads * head_dim must equal model_dim
    model_dim: int = 768
    max_seq_len: int = 262144  # rotary table length (TorchBench's max_seq_len)
    seq_len: int = 6144  # TorchBench input_seq_len ("originally 49152")
    block_size: int = 128  # FlexAttention block size
    window_progress: float = 0.5  # TorchBench: get_window_size_blocks(0.5), the average window
    eos_token: int = 50256  # documents start after this token
    world_size: int = 8  # TorchBench's fake process group: the scalars are padded to a multiple of it
    no_attention_layer: int = 7  # "skip attention of blocks.7"
    attn_scale: float = 0.12
    attn_gate_dim: int = 12

    @property
    def padded_vocab(self) -> int:
        return next_multiple_of_n(self.vocab_size, 128)


def _nearest_kept(blocks: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Of each row's True blocks, the ``keep[row]`` with the highest indices (the nearest in the past).

    The order the speedrun's ``dense_to_ordered`` gives them: stable argsort, flipped.
    """
    from_right = blocks.flip(-1).int().cumsum(-1).flip(-1)  # True blocks at index >= j
    return blocks & (from_right <= keep[:, None])


def sliding_window_document_mask(
    input_seq: torch.Tensor, window_blocks: int | torch.Tensor, block_size: int = 128, eos_token: int = 50256
) -> torch.Tensor:
    """The (T, T) boolean attention pattern of the speedrun's BlockMask for ``window_blocks``.

    ``input_seq`` is ``(T,)`` with ``T`` a multiple of ``block_size``; True = the query (row) sees the key.
    """
    T = input_seq.numel()
    if T % block_size:
        raise ValueError(f"sequence length {T} must be a multiple of the block size {block_size}")
    docs = (input_seq == eos_token).cumsum(0)  # (T,) document id of each token
    blk = torch.arange(T // block_size, device=input_seq.device)
    low, high = docs.view(-1, block_size)[:, 0], docs.view(-1, block_size)[:, -1]  # (NB,)
    any_ = (blk[:, None] >= blk) & (low[:, None] <= high) & (high[:, None] >= low)  # may hold a visible pair
    all_ = (blk[:, None] > blk) & (low[:, None] == high) & (high[:, None] == low)  # every pair visible
    partial = any_ & ~all_
    n_full = all_.sum(-1)
    window = torch.as_tensor(window_blocks, device=input_seq.device)
    keep_full = n_full.clamp_max(window - 1)
    keep_partial = partial.sum(-1).clamp_max((window - n_full).clamp_min(1))
    kept = _nearest_kept(all_, keep_full) | _nearest_kept(partial, keep_partial)  # (NB, NB)
    kept = kept.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)  # (T, T)
    pos = torch.arange(T, device=input_seq.device)
    document_causal = (pos[:, None] >= pos) & (docs[:, None] == docs)
    return kept & document_causal


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


def _uniform_(w: torch.Tensor, fan_in: int) -> torch.Tensor:
    """The speedrun's init: uniform with std 0.5 / sqrt(fan_in)."""
    bound = 3**0.5 * 0.5 * fan_in**-0.5
    return w.uniform_(-bound, bound)


def half_truncated_rotary(head_dim: int, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin`` of shape ``(max_seq_len, head_dim / 2)``: head_dim/4 frequencies 1..1/1024, then zeros."""
    freq = (1 / 1024) ** torch.linspace(0, 1, steps=head_dim // 4, dtype=torch.float32)
    freq = torch.cat([freq, freq.new_zeros(head_dim // 4)])
    theta = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), freq)
    return theta.cos(), theta.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate halves ``(x1, x2)`` of ``x (B, T, H, D)`` in float32."""
    cos, sin = cos[None, : x.size(-3), None, :], sin[None, : x.size(-3), None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos), 3).type_as(x)


class Attention(nn.Module):
    def __init__(self, config: ModdedNanoGPTConfig) -> None:
        super().__init__()
        dim, self.num_heads, self.head_dim = config.model_dim, config.num_heads, config.head_dim
        if self.num_heads * self.head_dim != dim:
            raise ValueError(f"num_heads * head_dim ({self.num_heads} x {self.head_dim}) must equal model_dim {dim}")
        self.scale, self.gate_dim = config.attn_scale, config.attn_gate_dim
        self.qkvo_w = nn.Parameter(torch.empty(4, dim, dim))  # q, k, v and output weights
        with torch.no_grad():
            _uniform_(self.qkvo_w[:3], dim)
            self.qkvo_w[3].zero_()
        self.attn_gate = nn.Linear(self.gate_dim, self.num_heads, bias=False)
        nn.init.zeros_(self.attn_gate.weight)

    def forward(self, x, ve, lambdas, mask, cos, sin):
        B, T = x.shape[:2]  # B == 1
        qkv = F.linear(x, self.qkvo_w[:3].flatten(end_dim=1).type_as(x))  # (B, T, 3 * dim)
        q, k, v = qkv.view(B, T, 3 * self.num_heads, self.head_dim).chunk(3, dim=-2)  # (B, T, H, D)
        q, k = apply_rotary(rms_norm(q), cos, sin), apply_rotary(rms_norm(k), cos, sin)
        v = lambdas[0] * v + lambdas[1] * ve.view_as(v) if ve is not None else lambdas[0] * v
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=self.scale
        ).transpose(1, 2)  # (B, T, H, D)
        gate = torch.sigmoid(F.linear(x[..., : self.gate_dim], self.attn_gate.weight.type_as(x)))  # (B, T, H)
        y = (y * gate.view(B, T, self.num_heads, 1)).contiguous().view(B, T, -1)
        return F.linear(y, self.qkvo_w[3].type_as(y))


class ReLUSquaredMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = nn.Parameter(_uniform_(torch.empty(dim, 4 * dim), dim))  # used transposed
        self.c_proj = nn.Parameter(torch.zeros(dim, 4 * dim))  # zero init

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(F.linear(x, self.c_fc.T.type_as(x))).square()
        return F.linear(x, self.c_proj.type_as(x))


class Block(nn.Module):
    def __init__(self, config: ModdedNanoGPTConfig, layer_idx: int) -> None:
        super().__init__()
        self.attn = Attention(config) if layer_idx != config.no_attention_layer else None
        self.mlp = ReLUSquaredMLP(config.model_dim)

    def forward(self, x, ve, x0, lambdas, sa_lambdas, mask, cos, sin):
        x = lambdas[0] * x + lambdas[1] * x0
        if self.attn is not None:
            x = x + self.attn(rms_norm(x), ve, sa_lambdas, mask, cos, sin)
        return x + self.mlp(rms_norm(x))


# Which blocks use the long window (the rest use half of it): "long-short SWA", Gemma 2 style.
LONG_WINDOW_LAYERS = (0, 4, 7, 11)


class ModdedNanoGPT(nn.Module):
    """``forward(input_seq (T,) int, target_seq (T,) int64, window_blocks)`` -> scalar loss."""

    def __init__(self, config: ModdedNanoGPTConfig) -> None:
        super().__init__()
        self.config = config
        L, dim, vocab = config.num_layers, config.model_dim, config.padded_vocab
        if L % 2 or L < 6:
            raise ValueError(f"num_layers must be even and at least 6 (U-net halves, 3 + 3 value embeddings); got {L}")
        self.embed = nn.Embedding(vocab, dim, dtype=torch.bfloat16)
        self.value_embeds = nn.ModuleList(nn.Embedding(vocab, dim, dtype=torch.bfloat16) for _ in range(3))
        self.blocks = nn.ModuleList(Block(config, i) for i in range(L))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        nn.init.zeros_(self.lm_head.weight)
        pad = (-L * 5) % config.world_size
        self.scalars = nn.Parameter(
            torch.cat(
                [torch.ones(L), torch.tensor([1.0, 0.0]).repeat(L), torch.tensor([0.5, 0.5]).repeat(L), torch.ones(pad)]
            )
        )  # skip weights (L, the first half used), block lambdas (L x 2), attention lambdas (L x 2), padding
        cos, sin = half_truncated_rotary(config.head_dim, config.max_seq_len)
        self.register_buffer("rotary_cos", cos, persistent=False)
        self.register_buffer("rotary_sin", sin, persistent=False)

    def forward(self, input_seq: torch.Tensor, target_seq: torch.Tensor, window_blocks: torch.Tensor) -> torch.Tensor:
        cfg, L = self.config, len(self.blocks)
        ve = [embed(input_seq) for embed in self.value_embeds]  # 3 x (T, dim)
        ve = ve + [None] * (L - 6) + ve  # "012 ... 012"
        long_mask = sliding_window_document_mask(input_seq, window_blocks, cfg.block_size, cfg.eos_token)
        short_mask = sliding_window_document_mask(input_seq, window_blocks // 2, cfg.block_size, cfg.eos_token)
        x = x0 = rms_norm(self.embed(input_seq)[None])  # (1, T, dim) bfloat16
        skip_weights = self.scalars[: L // 2]
        lambdas = self.scalars[L : 3 * L].view(-1, 2)
        sa_lambdas = self.scalars[3 * L : 5 * L].view(-1, 2)
        skips = []
        for i, block in enumerate(self.blocks):
            if i >= L // 2:
                x = x + skip_weights[i - L // 2] * skips.pop()
            mask = long_mask if i in LONG_WINDOW_LAYERS else short_mask
            x = block(x, ve[i], x0, lambdas[i], sa_lambdas[i], mask, self.rotary_cos, self.rotary_sin)
            if i < L // 2:
                skips.append(x)
        logits = F.linear(rms_norm(x), self.lm_head.weight.type_as(x)).float()  # (1, T, V)
        logits = 30 * torch.sigmoid(logits / 7.5)  # soft cap
        return F.cross_entropy(
            logits.view(-1, logits.size(-1)), target_seq, reduction="sum" if self.training else "mean"
        )


class ModdedNanoGPTWorkload(Workload):
    """The loss is the module's output (TorchBench's GPTWrapper returns it)."""

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs


# Smoke: every structural feature (12 blocks, value embeddings, long/short windows over 4 blocks)
# at toy width; the end-of-text id is the last of the smaller vocabulary so documents can occur.
_SMOKE = dict(vocab_size=512, num_heads=2, head_dim=32, model_dim=64, max_seq_len=512, seq_len=512, eos_token=511)


@register_model(
    domain="nlp", task="language_modeling", batch_size=1, modes=("train",), param_count=275_743_576,
    source="Jordan et al., modded-nanogpt speedrun (Aug 2025 record) as vendored by TorchBench modded_nanogpt",
    # Measured peak RSS of one CPU training step: 4.6 GiB at 1,536 tokens, 5.9 GiB at 3,072, so about
    # 8.6 GiB at 6,144 (activations grow ~1.3 GiB per 1,536 tokens); 12 leaves headroom.
    full_memory_gib=12,
    notes="12 layers, 768 wide, value embeddings, long/short sliding-window document-causal attention "
    "(SDPA with the BlockMask's pattern as a dense mask); 6,144 tokens; train only, as TorchBench",
)  # fmt: skip
def modded_nanogpt(ctx: BuildContext, **kwargs) -> Workload:
    """Speedrun GPT on one 6,144-token sequence: summed loss, backward, Adam (TorchBench's dynamo step)."""
    if ctx.batch_size != 1:  # the speedrun's attention asserts one sequence ("for FlexAttention")
        raise UnsupportedError(f"modded_nanogpt takes one sequence per step (batch size 1); got {ctx.batch_size}")
    config = ModdedNanoGPTConfig(**((_SMOKE if ctx.smoke else {}) | kwargs))
    with torch.device(ctx.device):
        model = ModdedNanoGPT(config)
    input_seq = ctx.randint(0, config.vocab_size, (config.seq_len,), dtype=torch.int32)
    target_seq = ctx.randint(0, config.vocab_size, (config.seq_len,))
    window = torch.tensor(
        window_size_blocks(config.window_progress, config.block_size), dtype=torch.int32, device=ctx.device
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01) if ctx.train else None
    return ModdedNanoGPTWorkload(ctx, model, (input_seq, target_seq, window), optimizer=optimizer)
