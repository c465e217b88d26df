"""The original encoder-decoder Transformer (Vaswani et al., "Attention Is All You Need", 2017).

Follows jadore801120/attention-is-all-you-need-pytorch (MIT license), the implementation in the
TorchBench suite: base configuration (d_model 512, 8 heads, d_ff 2048, 6 + 6 post-LN layers),
sinusoidal positions, one embedding matrix shared by source, target and the output projection
(``-embs_share_weight -proj_share_weight``), logits scaled by ``d_model ** -0.5``, and
label-smoothed cross-entropy summed over target tokens. Attention runs through
``F.scaled_dot_product_attention`` (same math as the reference's explicit softmax).

The post-LN layers (``EncoderLayer``, ``DecoderLayer``) and ``sinusoid_table`` live in
:mod:`torchgauge.models.common.transformer_layers`, shared with ``speech.speech_transformer``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths
from ..common.transformer_layers import DecoderLayer, EncoderLayer, causal_mask, sinusoid_table

__all__ = ["Transformer"]


class Transformer(nn.Module):
    """Encoder-decoder Transformer with one shared source/target embedding and tied output projection."""

    def __init__(
        self,
        vocab_size: int,
        pad_idx: int,
        d_model: int = 512,
        d_inner: int = 2048,
        n_layers: int = 6,
        n_head: int = 8,
        d_k: int = 64,
        d_v: int = 64,
        dropout: float = 0.1,
        n_position: int = 200,
    ) -> None:
        super().__init__()
        self.pad_idx, self.d_model = pad_idx, d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_idx)  # src, trg and projection
        self.register_buffer("position", sinusoid_table(n_position, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.encoder_norm = nn.LayerNorm(d_model, eps=1e-6)  # applied to the embeddings, before layer 1
        self.decoder_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(d_model, d_inner, n_head, d_k, d_v, dropout) for _ in range(n_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(d_model, d_inner, n_head, d_k, d_v, dropout) for _ in range(n_layers)
        )
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def _embed(self, tokens: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return norm(self.dropout(self.embedding(tokens) + self.position[: tokens.size(1)]))

    def forward(self, src: torch.Tensor, trg: torch.Tensor) -> torch.Tensor:
        """``src (B, S)`` and shifted ``trg (B, T)`` token ids to logits ``(B, T, V)``."""
        src_mask = (src != self.pad_idx)[:, None, None, :]  # (B, 1, 1, S): keys that are words
        trg_mask = (trg != self.pad_idx)[:, None, None, :] & causal_mask(trg.size(1), trg.device)  # (B, 1, T, T)
        memory = self._embed(src, self.encoder_norm)
        for layer in self.encoder_layers:
            memory = layer(memory, src_mask)
        x = self._embed(trg, self.decoder_norm)
        for layer in self.decoder_layers:
            x = layer(x, memory, trg_mask, src_mask)
        return F.linear(x, self.embedding.weight) * self.d_model**-0.5  # (B, T, V)


# Multi30k de-en as the suite preprocesses it (spaCy words seen 3+ times, the two languages
# merged) has about 9.5k entries; this is our stand-in for its exact size.
MULTI30K_SHARED_VOCAB = 9521
PAD_IDX, BOS_IDX, EOS_IDX = 1, 2, 3  # torchtext order: <unk>, <blank>, <s>, </s>


def _sentences(ctx: BuildContext, vocab_size: int, max_len: int) -> torch.Tensor:
    """``(B, max_len)`` token ids: <s> words </s> then padding, lengths varying over the batch."""
    lengths = random_lengths(ctx, ctx.batch_size, max_len, min_len=max_len // 2)
    words = ctx.randint(EOS_IDX + 1, vocab_size, (ctx.batch_size, max_len))
    positions = torch.arange(max_len, device=words.device)
    words = torch.where(positions == 0, BOS_IDX, words)
    words = torch.where(positions == (lengths - 1)[:, None], EOS_IDX, words)
    return words.masked_fill(~length_mask(lengths, max_len), PAD_IDX)


def _create_transformer(ctx: BuildContext, **kwargs) -> Workload:
    # Smoke: the same layers at toy width (49M parameters and their Adam state take seconds on a CPU).
    smoke = dict(vocab_size=512, d_model=64, d_inner=128, n_layers=2, n_head=2, d_k=32, d_v=32) if ctx.smoke else {}
    arch = dict(vocab_size=MULTI30K_SHARED_VOCAB, pad_idx=PAD_IDX) | smoke | kwargs
    model = Transformer(**arch)
    # Multi30k sentences are short: batches pad to about 40 tokens with <s> and </s>.
    src = _sentences(ctx, arch["vocab_size"], ctx.pick(40, 8))
    trg = _sentences(ctx, arch["vocab_size"], ctx.pick(40, 8) + 1)
    opt = ctx.optimizer(model.parameters(), "adam", lr=1e-4, betas=(0.9, 0.98), eps=1e-9) if ctx.train else None

    def smoothed_cross_entropy(logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
        # PyTorch spreads eps over all V classes, the reference over the V - 1 others: same cost.
        return F.cross_entropy(
            logits.flatten(0, 1), gold.flatten(), ignore_index=PAD_IDX, label_smoothing=0.1, reduction="sum"
        )

    return Workload(ctx, model, (src, trg[:, :-1]), trg[:, 1:], loss_fn=smoothed_cross_entropy, optimizer=opt)


@register_model(
    domain="nlp",
    task="translation",
    batch_size=(256, 32),
    param_count=48_978_432,
    source="Vaswani et al. 2017; jadore801120/attention-is-all-you-need-pytorch",
    notes="param_count: the reference implementation at a 9,521-word shared vocabulary (Multi30k-sized)",
)
def attention_is_all_you_need_pytorch(ctx: BuildContext, **kwargs) -> Workload:
    """Transformer base (6 + 6 layers, d_model 512), shared vocabulary, label smoothing 0.1."""
    return _create_transformer(ctx, **kwargs)
