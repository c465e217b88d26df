"""Convolutional sequence-to-sequence translation (ConvS2S; Gehring, Auli, Grangier, Yarats & Dauphin 2017).

"Convolutional Sequence to Sequence Learning", ICML 2017, as fairseq's ``fconv`` model
(facebookresearch/fairseq, MIT) in its ``fconv_iwslt_de_en`` configuration, written again
here from the paper and that implementation's structure:

- Encoder: token + learned position embeddings (256), ``fc1``, four residual blocks of
  [dropout, time-major convolution ``ConvTBC`` (``torch.conv_tbc``, kernel 3, 256 -> 2 x 256,
  "same" padding), GLU], ``fc2``; padded source positions are zeroed before each convolution.
  The output ``z`` gets its gradient scaled by ``1 / (2 * attention layers)`` (fairseq's
  ``GradMultiply``), and the attention values are ``(z + e) / sqrt 2`` with ``e`` the input
  embedding.
- Decoder: the same embeddings, three residual blocks of [dropout, causal convolution
  (``LinearizedConvolution``: ``conv_tbc`` padded by ``k - 1`` with the future steps cut off),
  GLU, multi-step attention over the encoder], ``fc2`` (256), dropout, ``fc3`` to the vocabulary.
  Attention: ``d = (W h + g) / sqrt 2`` with ``g`` the target embedding, softmax of
  ``d z^T`` over the unpadded source, context ``a (z + e)`` scaled by ``S sqrt(1 / S)``
  (``S`` = unpadded source length), projected back and added residually, ``/ sqrt 2``.
- Every linear and convolution is weight-normalised (``nn.utils.parametrizations.weight_norm``,
  the current spelling of fairseq's ``nn.utils.weight_norm``; convolutions over the output
  dimension ``dim=2``), initialised as fairseq (normal with std ``sqrt(4 (1 - p) / (k C_in))``
  for the GLU convolutions, ``sqrt((1 - p) / C_in)`` for linears, embeddings ``N(0, 0.1)``).

Training as fairseq's IWSLT'14 de-en recipe: ``--optimizer nag --lr 0.25 --clip-norm 0.1
--dropout 0.2 --max-tokens 4000 --criterion label_smoothed_cross_entropy --label-smoothing 0.1``.
fairseq's NAG equals ``torch.optim.SGD(momentum=0.99, nesterov=True)`` at a fixed learning
rate (its buffer stores ``-lr`` times torch's), so that is used; the summed label-smoothed loss
over non-pad target tokens is divided by their number (fairseq divides the gradients by the
same ``sample_size``) and clipped with ``clip_grad_norm_``. Batch = 125 sentence pairs of
32 tokens (= 4000 tokens), sources left-padded and targets right-padded to random lengths in
[24, 32], dictionaries of the binarised IWSLT'14 de-en data (8,848 German, 6,632 English types).

Eval = ``fairseq-generate`` with the weight norm folded into plain weights first (fairseq's
``make_generation_fast_``), encoder once, then incremental decoding: each step feeds only the
newest token, every decoder convolution keeps a ``(B, k, C)`` input buffer and runs as one
linear layer over it (``LinearizedConvolution``'s incremental path), the transposed encoder
output is computed once. Differences: greedy search (beam 1; the recipe uses beam 5) for a
fixed 32 steps with no early stop at end-of-sentence, so the work per step is constant.
Only the residual-from-the-previous-layer connection of fairseq's layer spec is modelled
(every ``fconv_*`` preset uses it). Token ids are random.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths

__all__ = [
    "ConvS2S", "ConvS2SConfig", "ConvTBC", "LinearizedConvolution", "label_smoothed_nll_loss", "make_positions",
]  # fmt: skip

# fairseq's Dictionary: <s> 0, <pad> 1, </s> 2, <unk> 3, then the words.
PAD, EOS, FIRST_WORD = 1, 2, 4
# Binarised IWSLT'14 de-en (examples/translation/prepare-iwslt14.sh + fairseq-preprocess).
IWSLT14_DE_VOCAB, IWSLT14_EN_VOCAB = 8_848, 6_632


@dataclass(frozen=True)
class ConvS2SConfig:
    src_vocab: int = IWSLT14_DE_VOCAB
    tgt_vocab: int = IWSLT14_EN_VOCAB
    embed_dim: int = 256  # encoder and decoder embeddings
    encoder_layers: tuple[tuple[int, int], ...] = ((256, 3),) * 4  # (channels, kernel) per block
    decoder_layers: tuple[tuple[int, int], ...] = ((256, 3),) * 3
    decoder_out_embed_dim: int = 256  # fc2
    max_positions: int = 1024  # learned position table rows
    dropout: float = 0.2  # also scales the init stds
    label_smoothing: float = 0.1
    lr: float = 0.25  # NAG
    momentum: float = 0.99  # fairseq NAG's momentum
    clip_norm: float = 0.1
    src_len: int = 32  # tokens per source sentence (incl. </s>), before padding
    tgt_len: int = 32  # tokens per target sentence; also the greedy decoding steps
    min_len: int = 24  # shortest sentence in the batch


def _embedding(num: int, dim: int) -> nn.Embedding:
    m = nn.Embedding(num, dim, padding_idx=PAD)
    nn.init.normal_(m.weight, 0, 0.1)
    nn.init.zeros_(m.weight[PAD])
    return m


def _linear(in_features: int, out_features: int, dropout: float = 0.0) -> nn.Linear:
    """Weight-normalised linear, fairseq's init."""
    m = nn.Linear(in_features, out_features)
    nn.init.normal_(m.weight, 0, math.sqrt((1 - dropout) / in_features))
    nn.init.zeros_(m.bias)
    return weight_norm(m)


class GradMultiply(torch.autograd.Function):
    """Identity forward; the gradient is multiplied by ``scale``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


def make_positions(tokens: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` positions ``PAD + 1, PAD + 2, ...`` counted over the non-pad tokens; ``PAD`` at pads."""
    mask = tokens.ne(PAD).int()
    return (torch.cumsum(mask, dim=1) * mask).long() + PAD


class ConvTBC(nn.Module):
    """1-D convolution over time-major input ``(T, B, C_in) -> (T', B, C_out)``; weight ``(k, C_in, C_out)``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int, dropout: float) -> None:
        super().__init__()
        self.kernel_size, self.padding = kernel_size, padding
        self.in_channels, self.out_channels = in_channels, out_channels
        std = math.sqrt(4 * (1.0 - dropout) / (kernel_size * in_channels))  # GLU halves the output
        self.weight = nn.Parameter(torch.randn(kernel_size, in_channels, out_channels) * std)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.conv_tbc(x.contiguous(), self.weight, self.bias, self.padding)


class LinearizedConvolution(ConvTBC):
    """Causal ``ConvTBC`` (padding ``k - 1``, future steps cut) with an incremental one-step path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)  # (T + k - 1, B, C_out)
        return out[: -self.padding] if self.kernel_size > 1 else out

    def incremental_forward(self, x: torch.Tensor, buffer: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Newest input ``(B, 1, C_in)`` -> output ``(B, 1, C_out)`` and the updated ``(B, k, C_in)`` buffer."""
        bsz, k = x.size(0), self.kernel_size
        if buffer is None:
            buffer = x.new_zeros(bsz, k, x.size(2))
        else:
            buffer[:, :-1, :] = buffer[:, 1:, :].clone()  # shift the window one step
        buffer[:, -1, :] = x[:, -1, :]
        # (k, C_in, C_out) -> (C_out, k, C_in) -> (C_out, k * C_in), matching the buffer's layout
        weight = self.weight.transpose(2, 1).transpose(1, 0).contiguous().view(self.out_channels, -1)
        return F.linear(buffer.view(bsz, -1), weight, self.bias).view(bsz, 1, -1), buffer


def _conv(
    cls: type[ConvTBC], in_channels: int, out_channels: int, kernel_size: int, padding: int, dropout: float
) -> ConvTBC:
    return weight_norm(cls(in_channels, out_channels, kernel_size, padding, dropout), dim=2)  # g: (1, 1, C_out)


class Encoder(nn.Module):
    """Source ids ``(B, S)`` (left-padded) -> ``z (B, S, E)``, ``z + e`` and the padding mask ``(B, S)``."""

    def __init__(self, cfg: ConvS2SConfig, num_attention_layers: int) -> None:
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.grad_scale = 1.0 / (2.0 * num_attention_layers)
        self.embed_tokens = _embedding(cfg.src_vocab, cfg.embed_dim)
        self.embed_positions = _embedding(cfg.max_positions, cfg.embed_dim)
        channels = cfg.encoder_layers[0][0]
        self.fc1 = _linear(cfg.embed_dim, channels, dropout=cfg.dropout)
        self.projections, self.convolutions = nn.ModuleList(), nn.ModuleList()
        for out_channels, k in cfg.encoder_layers:
            self.projections.append(_linear(channels, out_channels) if channels != out_channels else nn.Identity())
            self.convolutions.append(_conv(ConvTBC, channels, 2 * out_channels, k, k // 2, cfg.dropout))
            channels = out_channels
        self.fc2 = _linear(channels, cfg.embed_dim)

    def forward(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.dropout(self.embed_tokens(src) + self.embed_positions(make_positions(src)))  # (B, S, E)
        input_embedding = x
        pad_mask = src.eq(PAD)  # (B, S)
        x = self.fc1(x).transpose(0, 1)  # (S, B, C)
        for proj, conv in zip(self.projections, self.convolutions):
            residual = proj(x)
            x = self.dropout(x.masked_fill(pad_mask.t().unsqueeze(-1), 0))
            x = F.glu(conv(x), dim=2)  # (S, B, 2C) -> (S, B, C)
            x = (x + residual) * math.sqrt(0.5)
        x = self.fc2(x.transpose(1, 0)).masked_fill(pad_mask.unsqueeze(-1), 0)  # (B, S, E)
        x = GradMultiply.apply(x, self.grad_scale)
        return x, (x + input_embedding) * math.sqrt(0.5), pad_mask


class AttentionLayer(nn.Module):
    """One decoder block's attention: ``(B, T, C)`` queries over the encoder -> ``(B, T, C)``."""

    def __init__(self, conv_channels: int, embed_dim: int) -> None:
        super().__init__()
        self.in_projection = _linear(conv_channels, embed_dim)
        self.out_projection = _linear(embed_dim, conv_channels)

    def forward(
        self,
        x: torch.Tensor,
        target_embedding: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        pad_mask: torch.Tensor,
    ) -> torch.Tensor:
        """``keys (B, E, S)`` (pre-transposed z), ``values (B, S, E)`` (z + e), ``pad_mask (B, S)``."""
        residual = x
        x = (self.in_projection(x) + target_embedding) * math.sqrt(0.5)
        x = torch.bmm(x, keys)  # (B, T, S)
        x = x.float().masked_fill(pad_mask.unsqueeze(1), float("-inf")).type_as(x)
        attn = F.softmax(x, dim=-1)
        x = torch.bmm(attn, values)  # (B, T, E)
        s = (values.size(1) - pad_mask.type_as(x).sum(dim=1, keepdim=True)).unsqueeze(-1)  # (B, 1, 1) source lengths
        x = x * (s * s.rsqrt())
        return (self.out_projection(x) + residual) * math.sqrt(0.5)


class Decoder(nn.Module):
    """Previous target ids ``(B, T)`` + encoder output -> logits ``(B, T, V)``."""

    def __init__(self, cfg: ConvS2SConfig) -> None:
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.embed_tokens = _embedding(cfg.tgt_vocab, cfg.embed_dim)
        self.embed_positions = _embedding(cfg.max_positions, cfg.embed_dim)
        channels = cfg.decoder_layers[0][0]
        self.fc1 = _linear(cfg.embed_dim, channels, dropout=cfg.dropout)
        self.projections, self.convolutions, self.attention = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for out_channels, k in cfg.decoder_layers:
            self.projections.append(_linear(channels, out_channels) if channels != out_channels else nn.Identity())
            self.convolutions.append(_conv(LinearizedConvolution, channels, 2 * out_channels, k, k - 1, cfg.dropout))
            self.attention.append(AttentionLayer(out_channels, cfg.embed_dim))
            channels = out_channels
        self.fc2 = _linear(channels, cfg.decoder_out_embed_dim)
        self.fc3 = _linear(cfg.decoder_out_embed_dim, cfg.tgt_vocab, dropout=cfg.dropout)

    def forward(self, prev_tokens: torch.Tensor, encoder_out: tuple[torch.Tensor, ...]) -> torch.Tensor:
        z, values, pad_mask = encoder_out
        keys = z.transpose(1, 2).contiguous()  # (B, E, S), once for all layers
        x = self.dropout(self.embed_tokens(prev_tokens) + self.embed_positions(make_positions(prev_tokens)))
        target_embedding = x  # (B, T, E)
        x = self.fc1(x).transpose(0, 1)  # (T, B, C)
        for proj, conv, attention in zip(self.projections, self.convolutions, self.attention):
            residual = proj(x)
            x = F.glu(conv(self.dropout(x)), dim=2)  # (T, B, C)
            x = attention(x.transpose(0, 1), target_embedding, keys, values, pad_mask).transpose(0, 1)
            x = (x + residual) * math.sqrt(0.5)
        return self.fc3(self.dropout(self.fc2(x.transpose(0, 1))))  # (B, T, V)

    def incremental_forward(
        self,
        token: torch.Tensor,
        step: int,
        keys: torch.Tensor,
        values: torch.Tensor,
        pad_mask: torch.Tensor,
        buffers: list,
    ) -> torch.Tensor:
        """Newest token ``(B, 1)`` at 0-based ``step`` -> logits ``(B, 1, V)``; ``buffers`` updated in place."""
        positions = torch.full_like(token, PAD + 1 + step)
        x = self.embed_tokens(token) + self.embed_positions(positions)  # (B, 1, E)
        target_embedding = x
        x = self.fc1(x)  # batch-major throughout
        for i, (proj, conv, attention) in enumerate(zip(self.projections, self.convolutions, self.attention)):
            residual = proj(x)
            x, buffers[i] = conv.incremental_forward(x, buffers[i])
            x = attention(F.glu(x, dim=2), target_embedding, keys, values, pad_mask)
            x = (x + residual) * math.sqrt(0.5)
        return self.fc3(self.fc2(x))


class ConvS2S(nn.Module):
    def __init__(self, cfg: ConvS2SConfig) -> None:
        super().__init__()
        self.decoder = Decoder(cfg)
        self.encoder = Encoder(cfg, num_attention_layers=len(self.decoder.attention))

    def forward(self, src: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder(prev_tokens, self.encoder(src))

    def greedy_decode(self, src: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens ``(B, steps)`` and their summed log-probabilities ``(B,)``, starting from ``</s>``."""
        z, values, pad_mask = self.encoder(src)
        keys = z.transpose(1, 2).contiguous()
        buffers: list = [None] * len(self.decoder.convolutions)
        token = torch.full((src.size(0), 1), EOS, dtype=torch.long, device=src.device)
        tokens, score = [], torch.zeros(src.size(0), device=src.device)
        for step in range(steps):
            logits = self.decoder.incremental_forward(token, step, keys, values, pad_mask, buffers)
            lprobs = F.log_softmax(logits[:, -1].float(), dim=-1)  # (B, V), fairseq's get_normalized_probs
            lprobs[:, PAD] = float("-inf")
            best, token = lprobs.max(dim=-1, keepdim=True)
            score = score + best.squeeze(1)
            tokens.append(token)
        return torch.cat(tokens, dim=1), score


def label_smoothed_nll_loss(lprobs: torch.Tensor, target: torch.Tensor, epsilon: float) -> torch.Tensor:
    """fairseq's label-smoothed NLL summed over non-pad targets: ``lprobs (N, V)``, ``target (N,)``."""
    target = target.unsqueeze(-1)
    nll = -lprobs.gather(dim=-1, index=target)
    smooth = -lprobs.sum(dim=-1, keepdim=True)
    pad = target.eq(PAD)
    nll, smooth = nll.masked_fill(pad, 0.0).sum(), smooth.masked_fill(pad, 0.0).sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    return (1.0 - epsilon - eps_i) * nll + eps_i * smooth


class Translation(Workload):
    """Inputs ``(src, prev_output_tokens)``, target ids; eval decodes ``tgt_len`` tokens greedily."""

    @property
    def max_grad_norm(self) -> float:
        return self.cfg.clip_norm

    def __init__(
        self, ctx: BuildContext, module: ConvS2S, inputs: tuple, targets: torch.Tensor, cfg: ConvS2SConfig, **kwargs
    ) -> None:
        super().__init__(ctx, module, inputs, targets, **kwargs)
        self.cfg = cfg

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        src, prev_tokens = self.inputs
        if self.ctx.train:
            return self.module(src, prev_tokens)
        return self.module.greedy_decode(src, self.cfg.tgt_len)

    def compute_loss(self, logits: torch.Tensor) -> torch.Tensor:
        lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, logits.size(-1))
        loss = label_smoothed_nll_loss(lprobs, self.targets.view(-1), self.cfg.label_smoothing)
        return loss / self.targets.ne(PAD).sum()  # per target token (fairseq's sample_size)


def _fold_weight_norm(module: nn.Module) -> None:
    """Replace every weight-norm parametrisation by its current weight (fairseq's make_generation_fast_)."""
    for m in list(module.modules()):
        if parametrize.is_parametrized(m, "weight"):
            parametrize.remove_parametrizations(m, "weight")


def _sentences(ctx: BuildContext, vocab: int, batch: int, length: int, min_len: int, left_pad: bool) -> torch.Tensor:
    """``(B, length)`` ids: words then ``</s>``, padded to ``length`` on the left or the right."""
    lengths = random_lengths(ctx, batch, length, min_len)
    tokens = ctx.randint(FIRST_WORD, vocab, (batch, length))
    valid = length_mask(lengths, length)  # (B, L), True on the first len positions
    tokens = torch.where(valid, tokens, PAD)
    tokens.scatter_(1, (lengths - 1).unsqueeze(1), EOS)
    if left_pad:  # move the padding to the front: a right-aligned copy
        shift = (torch.arange(length, device=tokens.device) - (length - lengths).unsqueeze(1)) % length
        tokens = tokens.gather(1, shift)
    return tokens


def _create_convs2s(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(
        src_vocab=64,
        tgt_vocab=48,
        embed_dim=16,
        encoder_layers=((16, 3),) * 2,
        decoder_layers=((16, 3),) * 2,
        decoder_out_embed_dim=16,
        src_len=8,
        tgt_len=8,
        min_len=5,
    )
    cfg = replace(ConvS2SConfig(), **{**(smoke if ctx.smoke else {}), **kwargs})
    src = _sentences(ctx, cfg.src_vocab, ctx.batch_size, cfg.src_len, cfg.min_len, left_pad=True)
    target = _sentences(ctx, cfg.tgt_vocab, ctx.batch_size, cfg.tgt_len, cfg.min_len, left_pad=False)
    # prev_output_tokens: </s> moved to the front, the rest shifted right (fairseq's collate)
    prev_tokens = torch.cat([torch.full_like(target[:, :1], EOS), target[:, :-1]], dim=1)
    prev_tokens = prev_tokens.masked_fill(prev_tokens.eq(EOS) & (torch.arange(cfg.tgt_len, device=src.device) > 0), PAD)
    model = ConvS2S(cfg)
    opt = None
    if ctx.train:
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=True)
    else:
        _fold_weight_norm(model)
    return Translation(ctx, model, (src, prev_tokens), target, cfg, optimizer=opt)


@register_model(
    domain="nlp",
    task="translation",
    batch_size=(125, 128),
    tags=("seq2seq", "generation"),
    source="Gehring et al., Convolutional Sequence to Sequence Learning, 2017; fairseq fconv_iwslt_de_en (MIT)",
    param_count=9_618_384,  # counted from fconv_iwslt_de_en on the 8,848 / 6,632-type dictionaries
    notes="Train batch = 125 sentence pairs of up to 32 tokens (--max-tokens 4000); eval = weight norm "
    "folded, incremental greedy decoding of 32 tokens for 128 sentences (fairseq-generate's "
    "--batch-size 128; beam 1 instead of 5). Synthetic token ids.",
)
def convs2s_iwslt_de_en(ctx: BuildContext, **kwargs) -> Workload:
    """fconv_iwslt_de_en: 4 + 3 GLU conv blocks of 256, multi-step attention, label smoothing 0.1."""
    return _create_convs2s(ctx, **kwargs)
