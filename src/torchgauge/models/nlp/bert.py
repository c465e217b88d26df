"""BERT-base pre-training from scratch, as codertimo/BERT-pytorch writes it (Apache-2.0 license).

Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers", 2018. The reference (and
TorchBench's BERT_pytorch) builds: token + sinusoidal position + segment embeddings, 12 pre-LN
transformer blocks (768 wide, 12 heads, tanh-GELU, LayerNorm eps 1e-6, dropout 0.1, padding-key
mask), a next-sentence head and a masked-LM head, both log-softmax, with NLL losses and Adam.
The block is ``gpt.Block`` without the causal mask (the reference projects q, k and v with three
Linear layers, fused into one here: same parameters and FLOPs). Vocabulary and shapes are the
suite's: 20,000 corpus words plus 5 specials, 128-token sentence pairs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths
from ..common.transformer_layers import sinusoid_table
from .gpt import Block

__all__ = ["BERT"]

PAD, UNK, EOS, SOS, MASK = range(5)  # WordVocab's special tokens


class BERT(nn.Module):
    """BERT encoder with the two pre-training heads (``BERTLM`` in the reference)."""

    def __init__(
        self,
        vocab_size: int,
        hidden: int = 768,
        n_layers: int = 12,
        attn_heads: int = 12,
        dropout: float = 0.1,
        max_len: int = 512,
    ) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab_size, hidden, padding_idx=PAD)
        self.segment = nn.Embedding(3, hidden, padding_idx=0)  # 0 padding, 1 sentence A, 2 sentence B
        self.register_buffer("position", sinusoid_table(max_len, hidden), persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(hidden, attn_heads, dropout, causal=False, ln_eps=1e-6, gelu_approximate="tanh")
            for _ in range(n_layers)
        )
        self.next_sentence = nn.Linear(hidden, 2)
        self.mask_lm = nn.Linear(hidden, vocab_size)

    def forward(self, tokens: torch.Tensor, segments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens, segments (B, T)`` to is-next log-probs ``(B, 2)`` and token log-probs ``(B, T, V)``."""
        key_mask = (tokens != PAD)[:, None, None, :]  # (B, 1, 1, T): attend to words only
        x = self.dropout(self.token(tokens) + self.position[: tokens.size(1)] + self.segment(segments))
        for block in self.blocks:
            x = block(x, key_mask)
        return F.log_softmax(self.next_sentence(x[:, 0]), dim=-1), F.log_softmax(self.mask_lm(x), dim=-1)


def _sentence_pairs(ctx: BuildContext, vocab_size: int, seq_len: int) -> tuple[torch.Tensor, ...]:
    """``<sos> A <eos> B <eos> <pad>...`` with 15% of the words masked, as BERTDataset samples them."""
    B = ctx.batch_size
    lengths = random_lengths(ctx, B, seq_len, min_len=seq_len // 2)
    split = lengths // 2  # sentence B starts here
    pos = torch.arange(seq_len, device=lengths.device)
    valid = length_mask(lengths, seq_len)
    words = ctx.randint(MASK + 1, vocab_size, (B, seq_len))
    words = torch.where(pos == 0, SOS, words)
    words = torch.where((pos == (split - 1)[:, None]) | (pos == (lengths - 1)[:, None]), EOS, words)
    masked = (ctx.rand(B, seq_len) < 0.15) & valid & (words > MASK)
    labels = torch.where(masked, words, PAD)  # PAD = "not predicted", ignored by the loss
    tokens = torch.where(masked, MASK, words).masked_fill(~valid, PAD)
    segments = torch.where(pos < split[:, None], 1, 2).masked_fill(~valid, 0)
    is_next = ctx.randint(0, 2, (B,))
    return tokens, segments, labels, is_next


def _pretraining_loss(
    outputs: tuple[torch.Tensor, torch.Tensor], targets: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    next_logp, token_logp = outputs
    is_next, labels = targets
    # The reference ignores class 0 in the next-sentence loss too (one shared NLLLoss); not here.
    return F.nll_loss(next_logp, is_next) + F.nll_loss(token_logp.transpose(1, 2), labels, ignore_index=PAD)


def _create_bert(ctx: BuildContext, **kwargs) -> Workload:
    # Smoke: the same layers at toy width (116M parameters would not fit a 2 s CPU budget).
    smoke = dict(vocab_size=512, hidden=64, n_layers=2, attn_heads=2) if ctx.smoke else {}
    arch = dict(vocab_size=20_005) | smoke | kwargs
    model = BERT(**arch)
    tokens, segments, labels, is_next = _sentence_pairs(ctx, arch["vocab_size"], ctx.pick(128, 16))
    opt = ctx.optimizer(model.parameters(), "adam", lr=1e-4, weight_decay=0.01) if ctx.train else None
    return Workload(ctx, model, (tokens, segments), (is_next, labels), loss_fn=_pretraining_loss, optimizer=opt)


@register_model(
    domain="nlp",
    task="language_modeling",
    batch_size=(16, 16),
    cpu_batch_size=(16, 2),
    param_count=115_805_991,
    source="Devlin et al. 2018; codertimo/BERT-pytorch",
    notes="param_count: the reference implementation at the suite's 20,005-word vocabulary; "
    "eval batch 2 on CPU, as TorchBench (16 / 8)",
)
def BERT_pytorch(ctx: BuildContext, **kwargs) -> Workload:  # the suite's name
    """BERT-base (12 layers, 768 wide, 12 heads) with masked-LM and next-sentence heads."""
    return _create_bert(ctx, **kwargs)
