"""The post-LN layers of the 2017 encoder-decoder Transformer, sinusoidal positions and a causal mask.

Vaswani et al., "Attention Is All You Need", 2017, as jadore801120/attention-is-all-you-need-pytorch
(MIT) writes them. Shared by ``nlp.transformer`` (the translation model), ``nlp.bert`` (the
sinusoid table) and ``speech.speech_transformer`` (kaituoxu/Speech-Transformer uses the same
layers, with biases). Attention runs through ``F.scaled_dot_product_attention`` (same math as the
reference's explicit softmax).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["DecoderLayer", "EncoderLayer", "PostNormAttention", "PostNormFeedForward", "causal_mask", "sinusoid_table"]


def sinusoid_table(n_position: int, d_model: int) -> torch.Tensor:
    """``(n_position, d_model)`` sinusoidal encodings: sin on even channels, cos on odd ones."""
    position = torch.arange(n_position, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_position, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table


def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """``(length, length)`` bool mask, True where a query may attend (itself and the past)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


class PostNormAttention(nn.Module):
    """Multi-head attention, then dropout, residual and LayerNorm (the 2017 post-LN sublayer)."""

    def __init__(self, d_model: int, n_head: int, d_k: int, d_v: int, dropout: float, bias: bool, eps: float) -> None:
        super().__init__()
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k, bias=bias)
        self.w_ks = nn.Linear(d_model, n_head * d_k, bias=bias)
        self.w_vs = nn.Linear(d_model, n_head * d_v, bias=bias)
        self.fc = nn.Linear(n_head * d_v, d_model, bias=bias)
        self.attn_dropout = dropout
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """``x (B, Lq, d)`` attends to ``memory (B, Lk, d)``; ``mask`` broadcasts to ``(B, 1, Lq, Lk)``."""
        B, Lq, _ = x.shape
        Lk = memory.size(1)
        q = self.w_qs(x).view(B, Lq, self.n_head, self.d_k).transpose(1, 2)  # (B, nh, Lq, dk)
        k = self.w_ks(memory).view(B, Lk, self.n_head, self.d_k).transpose(1, 2)  # (B, nh, Lk, dk)
        v = self.w_vs(memory).view(B, Lk, self.n_head, self.d_v).transpose(1, 2)  # (B, nh, Lk, dv)
        drop = self.attn_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        out = out.transpose(1, 2).reshape(B, Lq, self.n_head * self.d_v)
        return self.layer_norm(self.dropout(self.fc(out)) + x)


class PostNormFeedForward(nn.Module):
    """Position-wise ReLU MLP, then dropout, residual and LayerNorm."""

    def __init__(self, d_model: int, d_inner: int, dropout: float, eps: float) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_inner)
        self.w_2 = nn.Linear(d_inner, d_model)
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(self.dropout(self.w_2(F.relu(self.w_1(x)))) + x)


def _zero_padding(x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    return x if keep is None else x * keep


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward sublayers; ``keep (B, T, 1)`` zeroes padded frames if given."""

    def __init__(
        self,
        d_model: int,
        d_inner: int,
        n_head: int,
        d_k: int,
        d_v: int,
        dropout: float = 0.1,
        bias: bool = False,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.slf_attn = PostNormAttention(d_model, n_head, d_k, d_v, dropout, bias, eps)
        self.pos_ffn = PostNormFeedForward(d_model, d_inner, dropout, eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, keep: torch.Tensor | None = None) -> torch.Tensor:
        x = _zero_padding(self.slf_attn(x, x, mask), keep)
        return _zero_padding(self.pos_ffn(x), keep)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention and feed-forward sublayers."""

    def __init__(
        self,
        d_model: int,
        d_inner: int,
        n_head: int,
        d_k: int,
        d_v: int,
        dropout: float = 0.1,
        bias: bool = False,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.slf_attn = PostNormAttention(d_model, n_head, d_k, d_v, dropout, bias, eps)
        self.enc_attn = PostNormAttention(d_model, n_head, d_k, d_v, dropout, bias, eps)
        self.pos_ffn = PostNormFeedForward(d_model, d_inner, dropout, eps)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None,
        memory_mask: torch.Tensor | None,
        keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = _zero_padding(self.slf_attn(x, x, self_mask), keep)
        x = _zero_padding(self.enc_attn(x, memory, memory_mask), keep)
        return _zero_padding(self.pos_ffn(x), keep)
