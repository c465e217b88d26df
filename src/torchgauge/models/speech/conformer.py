"""Conformer-S with a CTC head: end-to-end character recognition from raw 16 kHz waveforms.

Gulati et al., "Conformer: Convolution-augmented Transformer for Speech Recognition" (Interspeech
2020), size S: d=144, 16 blocks, 4 heads, each block macaron-style (half-step FFN, self-attention,
convolution module, half-step FFN, LayerNorm), FFN expansion 4 with Swish (SiLU), convolution
module = pointwise conv to 2d + GLU, depthwise conv, BatchNorm, Swish, pointwise conv. Attention
uses Transformer-XL relative sinusoidal positions (content and position biases ``u``, ``v``,
scores shifted by the pad-and-reshape trick), as the paper and ESPnet's ``rel_pos`` encoder do.

Differences from the paper, chosen for an encoder-only benchmark: the paper decodes with a
single-layer LSTM (its 10.3 M parameters include it); here a Linear CTC head over 29 characters
(blank, a-z, space, apostrophe) is trained with ``F.ctc_loss`` and eval is greedy CTC decoding.
The depthwise kernel is 31 (the paper says 32; odd kernels keep "same" padding symmetric, as
ESPnet and NeMo use). The Conv2d subsampling has d channels (ESPnet's ``Conv2dSubsampling``).
Parameters: 8,694,317 = 582,336 subsampling + 16 x 506,736 blocks + 4,205 CTC head; the
8.69 M encoder against the paper's 10.3 M leaves about 1.6 M for its decoder (one 320-unit
LSTM, about 0.8 M, with its embedding and joint network) and choices the paper leaves open
(subsampling width).

The front-end runs inside ``forward``: ``torch.stft`` (Hann, n_fft 400 = 25 ms, hop 160 = 10 ms),
power spectrum, an 80-band HTK-mel filterbank built here, log with a floor, then per-utterance
mean/variance normalisation over the valid frames (NeMo's ``per_feature``). SpecAugment
(two frequency masks F=27, two time masks T=40, as ESPnet's LibriSpeech recipes) runs in
training only, drawing its masks from a seeded ``torch.Generator``. Written from the papers;
no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths

__all__ = [
    "ConformerCTC",
    "ConformerConfig",
    "ctc_greedy_decode",
    "hz_to_mel",
    "mel_filterbank",
    "mel_to_hz",
    "rel_shift",
]

BLANK = 0  # CTC blank; the 28 characters follow: a-z, space, apostrophe


@dataclass(frozen=True)
class ConformerConfig:
    sample_rate: int = 16_000
    n_fft: int = 400  # 25 ms window
    hop_length: int = 160  # 10 ms hop
    n_mels: int = 80
    d_model: int = 144  # Conformer(S)
    n_heads: int = 4
    n_layers: int = 16
    ff_mult: int = 4  # FFN expansion
    conv_kernel: int = 31  # depthwise kernel (the paper: 32)
    dropout: float = 0.1
    vocab_size: int = 29  # blank + 26 letters + space + apostrophe
    freq_masks: int = 2
    freq_mask_width: int = 27  # F of SpecAugment (LibriSpeech policy)
    time_masks: int = 2
    time_mask_width: int = 40  # T of SpecAugment, in 10 ms frames
    log_floor: float = 1e-10  # mel energies are clamped here before the log


# -- front-end -----------------------------------------------------------------------------------------
def hz_to_mel(hz: torch.Tensor | float) -> torch.Tensor:
    """HTK mel scale: ``2595 log10(1 + f / 700)``."""
    return 2595.0 * torch.log10(1.0 + torch.as_tensor(hz, dtype=torch.float64) / 700.0)


def mel_to_hz(mel: torch.Tensor | float) -> torch.Tensor:
    """Inverse of :func:`hz_to_mel`."""
    return 700.0 * (10.0 ** (torch.as_tensor(mel, dtype=torch.float64) / 2595.0) - 1.0)


def mel_filterbank(
    n_mels: int, n_fft: int, sample_rate: int, f_min: float = 0.0, f_max: float | None = None
) -> torch.Tensor:
    """Triangular filters ``(n_mels, n_fft // 2 + 1)`` over the rfft bins, float64, unnormalised (peak 1).

    Filter ``m`` rises linearly in Hz from edge ``m`` to its centre ``m + 1`` and falls to edge
    ``m + 2``, where the ``n_mels + 2`` edges are equally spaced on the mel scale.
    """
    f_max = sample_rate / 2 if f_max is None else f_max
    edges = mel_to_hz(torch.linspace(hz_to_mel(f_min).item(), hz_to_mel(f_max).item(), n_mels + 2, dtype=torch.float64))
    bins = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)  # (K,)
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # (M, 1) each
    rising = (bins - left) / (centre - left)
    falling = (right - bins) / (right - centre)
    return torch.minimum(rising, falling).clamp_min(0.0)


class LogMelFrontEnd(nn.Module):
    """Waveforms ``(B, N)`` and lengths ``(B,)`` to normalised log-mel frames ``(B, T, n_mels)``."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.n_fft, self.hop_length, self.floor = cfg.n_fft, cfg.hop_length, cfg.log_floor
        self.register_buffer("window", torch.hann_window(cfg.n_fft), persistent=False)
        self.register_buffer("mel_fb", mel_filterbank(cfg.n_mels, cfg.n_fft, cfg.sample_rate).float(), persistent=False)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = torch.promote_types(wave.dtype, torch.float32)  # no half-precision STFT on every device
        spec = torch.stft(
            wave.to(dtype), self.n_fft, self.hop_length, window=self.window.to(dtype), center=True, return_complex=True
        )  # (B, n_fft/2 + 1, T)
        power = spec.real.square() + spec.imag.square()
        feats = torch.matmul(self.mel_fb.to(dtype), power).clamp_min(self.floor).log().transpose(1, 2)  # (B, T, M)
        frames = 1 + lengths // self.hop_length  # frames centred inside the utterance
        valid = length_mask(frames, feats.size(1))[..., None].to(dtype)  # (B, T, 1)
        count = frames[:, None, None].to(dtype)
        mean = (feats * valid).sum(1, keepdim=True) / count
        var = ((feats - mean).square() * valid).sum(1, keepdim=True) / count
        feats = (feats - mean) * torch.rsqrt(var + 1e-5) * valid  # padding stays exactly 0
        return feats.to(wave.dtype), frames


class SpecAugment(nn.Module):
    """Zero ``freq_masks`` bands of width <= F and ``time_masks`` spans of width <= T per utterance.

    Masks are drawn from ``generator`` (seeded by the builder) when set, so a run is reproducible.
    """

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.generator: torch.Generator | None = None

    def _spans(self, n: int, width: int, size: torch.Tensor, positions: int, like: torch.Tensor) -> torch.Tensor:
        """``(B, positions)`` bool, True inside any of ``n`` spans of width in [0, width] within ``size`` (B,)."""
        u = torch.rand(2, size.numel(), n, generator=self.generator, device=like.device, dtype=torch.float32)
        w = torch.minimum((u[0] * (width + 1)).floor().long(), size[:, None])  # (B, n)
        start = (u[1] * (size[:, None] - w + 1)).floor().long()
        idx = torch.arange(positions, device=like.device)[None, None]  # (1, 1, positions)
        return ((idx >= start[..., None]) & (idx < (start + w)[..., None])).any(1)

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        B, T, M = feats.shape
        freq = self._spans(self.cfg.freq_masks, self.cfg.freq_mask_width, frames.new_full((B,), M), M, feats)
        time = self._spans(self.cfg.time_masks, self.cfg.time_mask_width, frames, T, feats)
        return feats.masked_fill(freq[:, None, :] | time[:, :, None], 0.0)


class Conv2dSubsampling(nn.Module):
    """``(B, T, n_mels)`` to ``(B, T', d)``, ``T' = ((T - 1) // 2 - 1) // 2``: two 3x3 stride-2 convs + Linear."""

    def __init__(self, n_mels: int, d: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.out = nn.Linear(d * (((n_mels - 1) // 2 - 1) // 2), d)

    def forward(self, x: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(x[:, None])  # (B, d, T', M')
        return self.out(x.transpose(1, 2).flatten(2)), ((frames - 1) // 2 - 1) // 2


# -- Conformer block -----------------------------------------------------------------------------------
def relative_positions(length: int, d: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Sinusoids ``(2T - 1, d)`` of the relative distances ``T - 1, T - 2, ..., -(T - 1)``."""
    pos = torch.arange(length - 1, -length, -1, device=device, dtype=torch.float32)[:, None]
    freqs = torch.exp(torch.arange(0, d, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d))
    return torch.stack((torch.sin(pos * freqs), torch.cos(pos * freqs)), dim=-1).flatten(1).to(dtype)


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """``(..., T, 2T - 1)`` by relative column to ``(..., T, T)``: ``out[i, j] = x[i, T - 1 - i + j]``.

    Transformer-XL's trick: prepend a zero column, read the buffer as ``(2T, T)``, drop the first
    row; every row ``i`` then starts ``T - 1 - i`` columns further on.
    """
    *batch, T, P = x.shape
    x = F.pad(x, (1, 0)).view(*batch, P + 1, T)[..., 1:, :]
    return x.reshape(*batch, T, P)[..., :T]


class RelPositionSelfAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions and a key padding mask."""

    def __init__(self, d: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.h, self.dk, self.dropout = n_heads, d // n_heads, dropout
        self.qkv = nn.Linear(d, 3 * d)
        self.pos = nn.Linear(d, d, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(n_heads, d // n_heads))  # content bias
        self.pos_bias_v = nn.Parameter(torch.empty(n_heads, d // n_heads))  # position bias
        self.out = nn.Linear(d, d)
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor, key_valid: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.dk).unbind(2)  # (B, T, h, dk) each
        p = self.pos(pos_emb).view(2 * T - 1, self.h, self.dk).transpose(0, 1)  # (h, 2T-1, dk)
        bd = rel_shift((q + self.pos_bias_v).transpose(1, 2) @ p.transpose(1, 2))  # (B, h, T, T)
        bias = (bd / math.sqrt(self.dk)).masked_fill(~key_valid[:, None, None, :], float("-inf"))
        # (q + u) k^T / sqrt(dk) + bias: the position term enters the fused kernel as an additive mask
        out = F.scaled_dot_product_attention(
            (q + self.pos_bias_u).transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=bias,
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out(out.transpose(1, 2).reshape(B, T, d))


class FeedForward(nn.Sequential):
    def __init__(self, d: int, mult: int, dropout: float) -> None:
        super().__init__(
            nn.LayerNorm(d),
            nn.Linear(d, mult * d),
            nn.SiLU(),
            nn.Dropout(dropout),
            nn.Linear(mult * d, d),
            nn.Dropout(dropout),
        )


class ConvModule(nn.Module):
    """LayerNorm, pointwise to 2d + GLU, depthwise conv, BatchNorm, SiLU, pointwise, dropout."""

    def __init__(self, d: int, kernel: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pointwise_in = nn.Conv1d(d, 2 * d, 1)
        self.depthwise = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pointwise_out = nn.Conv1d(d, d, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = F.glu(self.pointwise_in(self.norm(x).transpose(1, 2)), dim=1)  # (B, d, T)
        x = x.masked_fill(~valid[:, None, :], 0.0)  # padding must not leak into the depthwise conv
        x = self.pointwise_out(F.silu(self.bn(self.depthwise(x))))
        return self.dropout(x.transpose(1, 2))


class ConformerBlock(nn.Module):
    """x + FFN/2, + MHSA, + Conv, + FFN/2, then LayerNorm (the macaron block of the paper's Fig. 1)."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.ff1 = FeedForward(d, cfg.ff_mult, cfg.dropout)
        self.attn_norm = nn.LayerNorm(d)
        self.attn = RelPositionSelfAttention(d, cfg.n_heads, cfg.dropout)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.conv = ConvModule(d, cfg.conv_kernel, cfg.dropout)
        self.ff2 = FeedForward(d, cfg.ff_mult, cfg.dropout)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, pos_emb: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        x = x + self.attn_dropout(self.attn(self.attn_norm(x), pos_emb, valid))
        x = x + self.conv(x, valid)
        return self.norm(x + 0.5 * self.ff2(x))


class ConformerCTC(nn.Module):
    """Waveforms ``(B, N)`` + lengths ``(B,)`` to CTC logits ``(B, T', vocab)`` and their lengths ``(B,)``."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.front_end = LogMelFrontEnd(cfg)
        self.spec_augment = SpecAugment(cfg)
        self.subsampling = Conv2dSubsampling(cfg.n_mels, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(ConformerBlock(cfg) for _ in range(cfg.n_layers))
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats, frames = self.front_end(wave, lengths)
        if self.training:
            feats = self.spec_augment(feats, frames)
        return self.encode(feats, frames)

    def encode(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-mel frames ``(B, T, n_mels)``, valid counts ``(B,)`` to logits ``(B, T', vocab)``,
        ``T'`` per utterance."""
        x, out_lengths = self.subsampling(feats, frames)
        T, d = x.shape[1:]
        x = self.dropout(x * math.sqrt(d))  # ESPnet's xscale before relative-position blocks
        pos_emb = self.dropout(relative_positions(T, d, x.device, x.dtype))
        valid = length_mask(out_lengths, T)
        for block in self.blocks:
            x = block(x, pos_emb, valid)
        return self.head(x), out_lengths


def ctc_greedy_decode(
    logits: torch.Tensor, lengths: torch.Tensor, blank: int = BLANK
) -> tuple[torch.Tensor, torch.Tensor]:
    """Best path per frame, repeats collapsed and blanks dropped, for the whole batch at once.

    Args:
        logits: ``(B, T, V)`` scores (any monotone transform of the posteriors).
        lengths: ``(B,)`` valid frames per utterance.

    Returns:
        Labels ``(B, T)`` left-aligned and padded with -1, and their counts ``(B,)``.
    """
    best = logits.argmax(-1)  # (B, T)
    B, T = best.shape
    previous = F.pad(best, (1, 0), value=blank)[:, :-1]
    keep = (best != blank) & (best != previous) & length_mask(lengths, T)
    slot = torch.where(keep, keep.cumsum(1) - 1, T)  # dropped frames go to an overflow column
    out = best.new_full((B, T + 1), -1).scatter_(1, slot, best)
    return out[:, :T], keep.sum(1)


class CTCWorkload(Workload):
    """Train: CTC loss of the characters; eval: greedy CTC decoding (labels, counts, best-path log-prob)."""

    def forward(self):
        logits, out_lengths = self.module(*self.inputs)
        if self.ctx.train:
            return logits, out_lengths
        log_probs = logits.log_softmax(-1)
        labels, counts = ctc_greedy_decode(log_probs, out_lengths)
        frame_best = log_probs.amax(-1) * length_mask(out_lengths, log_probs.size(1))
        return labels, counts, frame_best.sum(1)

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        logits, out_lengths = outputs
        targets, target_lengths = self.targets
        log_probs = logits.log_softmax(-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        return F.ctc_loss(log_probs.transpose(0, 1), targets, out_lengths, target_lengths, blank=BLANK)


def _create_conformer(ctx: BuildContext, seconds: float = 10.0, **kwargs) -> Workload:
    # Smoke: the same layers at toy width and depth on half-second clips.
    smoke = dict(d_model=32, n_layers=2) if ctx.smoke else {}
    cfg = replace(ConformerConfig(), **(smoke | kwargs))
    model = ConformerCTC(cfg)
    spec_gen = torch.Generator(device=ctx.device)
    spec_gen.manual_seed(ctx.seed)
    model.spec_augment.generator = spec_gen
    # LibriSpeech-like utterances of 5-10 s (the longest exactly 10 s), zero-padded to the longest.
    max_samples = int(ctx.pick(seconds, 0.5) * cfg.sample_rate)
    lengths = random_lengths(ctx, ctx.batch_size, max_samples, min_len=max_samples // 2)
    wave = ctx.randn(ctx.batch_size, max_samples, std=0.1) * length_mask(lengths, max_samples)
    # Transcripts of 40-60 % of the subsampled frames (10-15 characters a second, LibriSpeech's rate).
    out_frames = (((1 + lengths // cfg.hop_length) - 1) // 2 - 1) // 2
    target_lengths = (out_frames * (0.4 + 0.2 * ctx.rand(ctx.batch_size))).long().clamp_min(1)
    targets = ctx.randint(1, cfg.vocab_size, (ctx.batch_size, int(target_lengths.max())))
    opt = ctx.optimizer(model.parameters(), "adam", lr=1e-3, betas=(0.9, 0.98), eps=1e-9) if ctx.train else None
    return CTCWorkload(ctx, model, (wave, lengths), (targets, target_lengths), optimizer=opt)


@register_model(
    domain="speech",
    task="speech_recognition",
    batch_size=(8, 8),
    param_count=8_694_317,
    tags=("stft", "ctc"),
    source="Gulati et al. 2020, Conformer (S) encoder with a CTC head",
    notes="param_count: encoder (8.69 M) + CTC head; the paper's 10.3 M includes its LSTM decoder; "
    "eval = greedy CTC decoding",
)
def conformer_ctc(ctx: BuildContext, **kwargs) -> Workload:
    """Conformer(S) (d 144, 16 blocks, rel-pos MHSA) + CTC over 29 characters, log-mel front-end on 10 s clips."""
    return _create_conformer(ctx, **kwargs)
