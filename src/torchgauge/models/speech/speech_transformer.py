"""Speech-Transformer: an encoder-decoder Transformer for character-level ASR.

Dong, Xu and Xu, "Speech-Transformer: A No-Recurrence Sequence-to-Sequence Model for Speech
Recognition" (ICASSP 2018), as implemented by kaituoxu/Speech-Transformer (MIT license) and run by
TorchBench. Input: 80-dim filterbank frames (10 ms) stacked at a low frame rate (4 frames every
3, 320 dims), a Linear + LayerNorm front-end instead of an embedding, sinusoidal positions,
6 + 6 post-LN layers (d_model 512, 8 heads, d_ff 2048, with biases), character decoder over
AISHELL-1's 4,233 symbols with the output projection tied to the embedding, label-smoothed
(0.1) cross-entropy. The layers are ``common.transformer_layers``' (those of ``nlp.transformer``).

Train is TorchBench's ``train()`` (its ``config.py`` ``SpeechTransformerTrainConfig.train``): one
training pass over its single prefetched batch with the model in train mode, then its
"cross-validation" pass with the model in eval mode, which also steps the optimizer (its
``cross_valid`` is False): two Adam(betas (0.9, 0.98), eps 1e-9) steps per call, at the Noam
learning rate ``k * d_model^-0.5 * min(n^-0.5, n * warmup^-1.5)`` (k 0.2, warmup 1).

Eval: the reference runs beam search (beam 5) on one utterance until <eos>; here eval is greedy
decoding of a fixed 100 steps for the whole batch (no early stop), so the work does not depend
on what random weights predict. Like the reference, each step re-runs the decoder on the prefix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths
from ..common.transformer_layers import DecoderLayer, EncoderLayer, causal_mask, sinusoid_table

__all__ = ["SpeechTransformer", "stack_low_frame_rate"]

IGNORE_ID = -1  # padding of the decoder targets
NOAM_K, NOAM_WARMUP = 0.2, 1  # TorchBench's TransformerOptimizer settings (k, warmup_steps)


def stack_low_frame_rate(feats: torch.Tensor, m: int = 4, n: int = 3) -> torch.Tensor:
    """``(B, T, F)`` frames to ``(B, ceil(T / n), m * F)``: every n-th frame stacked with the next m - 1.

    The last frame is repeated where a window runs past the end, as the reference's ``build_LFR_features``.
    """
    T = feats.size(1)
    t_lfr = -(-T // n)
    missing = (t_lfr - 1) * n + m - T
    if missing > 0:
        feats = torch.cat((feats, feats[:, -1:].expand(-1, missing, -1)), dim=1)
    windows = feats.unfold(1, m, n)  # (B, t_lfr, F, m)
    return windows.transpose(2, 3).flatten(2)  # (B, t_lfr, m * F): frames in time order


class SpeechTransformer(nn.Module):
    def __init__(
        self,
        d_input: int = 320,
        vocab_size: int = 4233,
        d_model: int = 512,
        d_inner: int = 2048,
        n_layers_enc: int = 6,
        n_layers_dec: int = 6,
        n_head: int = 8,
        d_k: int = 64,
        d_v: int = 64,
        dropout: float = 0.1,
        pe_maxlen: int = 5000,
    ) -> None:
        super().__init__()
        self.sos_id, self.eos_id = vocab_size - 2, vocab_size - 1  # the dictionary ends with <sos>, <eos>
        self.d_model = d_model
        self.linear_in = nn.Linear(d_input, d_model)  # replaces an input embedding
        self.layer_norm_in = nn.LayerNorm(d_model)
        self.register_buffer("position", sinusoid_table(pe_maxlen, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)
        layer_args = (d_model, d_inner, n_head, d_k, d_v, dropout, True, 1e-5)  # biases, LayerNorm eps 1e-5
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(n_layers_enc))
        self.embedding = nn.Embedding(vocab_size, d_model)  # also the output projection
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(n_layers_dec))
        nn.init.xavier_normal_(self.embedding.weight)

    def encode(self, feats: torch.Tensor, feat_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``feats (B, T, d_input)`` to encoder states ``(B, T, d_model)`` and the key mask ``(B, 1, 1, T)``."""
        T = feats.size(1)
        valid = length_mask(feat_lens, T)
        x = self.dropout(self.layer_norm_in(self.linear_in(feats)) + self.position[:T])
        key_mask, keep = valid[:, None, None, :], valid[..., None].to(x.dtype)
        for layer in self.encoder_layers:
            x = layer(x, key_mask, keep)
        return x, key_mask

    def decode(
        self, ys_in: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor, ys_valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Decoder inputs ``(B, U)`` (<sos> first) to logits ``(B, U, V)``; ``ys_valid`` marks non-padding."""
        U = ys_in.size(1)
        self_mask = causal_mask(U, ys_in.device)
        keep = None
        if ys_valid is not None:
            self_mask = self_mask & ys_valid[:, None, None, :]
            keep = ys_valid[..., None].to(memory.dtype)
        x = self.dropout(self.embedding(ys_in) * self.d_model**0.5 + self.position[:U])
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, memory_mask, keep)
        return F.linear(x, self.embedding.weight)

    def forward(
        self, feats: torch.Tensor, feat_lens: torch.Tensor, ys_in: torch.Tensor, ys_valid: torch.Tensor
    ) -> torch.Tensor:
        """Teacher-forced logits ``(B, U, V)``."""
        memory, memory_mask = self.encode(feats, feat_lens)
        return self.decode(ys_in, memory, memory_mask, ys_valid)

    def recognize(self, feats: torch.Tensor, feat_lens: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding of ``steps`` characters; returns ids ``(B, steps + 1)`` and their log-probs summed."""
        memory, memory_mask = self.encode(feats, feat_lens)
        ys = torch.full((feats.size(0), 1), self.sos_id, dtype=torch.long, device=feats.device)
        score = memory.new_zeros(feats.size(0))
        for _ in range(steps):
            log_probs = F.log_softmax(self.decode(ys, memory, memory_mask)[:, -1], dim=-1)  # (B, V)
            best, next_id = log_probs.max(dim=-1)
            score = score + best
            ys = torch.cat((ys, next_id[:, None]), dim=1)
        return ys, score


class RecognitionWorkload(Workload):
    """Train: two teacher-forced steps (train mode, then eval mode); eval: greedy decoding of fixed length."""

    def __init__(
        self,
        ctx: BuildContext,
        module: SpeechTransformer,
        inputs: tuple,
        targets: torch.Tensor,
        *,
        decode_steps: int,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        super().__init__(ctx, module, inputs, targets, optimizer=optimizer)
        self.decode_steps = decode_steps
        self.noam_steps = 0

    def forward(self):
        if self.ctx.train:
            return self.module(*self.inputs)
        feats, feat_lens = self.inputs[:2]
        return self.module.recognize(feats, feat_lens, self.decode_steps)

    def train_step(self) -> torch.Tensor:
        """A step in train mode, then one in eval mode (dropout off), each at its Noam learning rate."""
        d_model = self.module.d_model
        for training in (True, False):
            self.module.train(training)
            self.noam_steps += 1
            lr = NOAM_K * d_model**-0.5 * min(self.noam_steps**-0.5, self.noam_steps * NOAM_WARMUP**-1.5)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss = super().train_step()
        return loss

    def compute_loss(self, logits: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            logits.flatten(0, 1), self.targets.flatten(), ignore_index=IGNORE_ID, label_smoothing=0.1
        )


def _transcripts(ctx: BuildContext, sos_id: int, eos_id: int, max_len: int) -> tuple[torch.Tensor, ...]:
    """Decoder inputs ``<sos> y <eos>...``, their validity mask and targets ``y <eos> -1...``, each
    ``(B, max_len + 1)``."""
    lengths = random_lengths(ctx, ctx.batch_size, max_len, min_len=max_len // 2)
    chars = ctx.randint(1, sos_id, (ctx.batch_size, max_len))  # 0 is <blank> in the dictionary
    inside = length_mask(lengths, max_len)
    ys_in = torch.cat((torch.full_like(chars[:, :1], sos_id), chars.masked_fill(~inside, eos_id)), dim=1)
    ys_valid = length_mask(lengths + 1, max_len + 1)
    ys_out = torch.cat((chars.masked_fill(~inside, IGNORE_ID), torch.full_like(chars[:, :1], IGNORE_ID)), dim=1)
    ys_out = ys_out.scatter(1, lengths[:, None], eos_id)
    return ys_in, ys_valid, ys_out


def _create_speech_transformer(ctx: BuildContext, **kwargs) -> Workload:
    # Smoke: the same layers at toy width (46M parameters and their Adam state take seconds on a CPU).
    smoke = (
        dict(vocab_size=64, d_model=64, d_inner=128, n_layers_enc=2, n_layers_dec=2, n_head=2, d_k=32, d_v=32)
        if ctx.smoke
        else {}
    )
    model = SpeechTransformer(**(smoke | kwargs))
    # AISHELL utterances: about 6 s of 10 ms frames (600 frames, 200 after stacking), up to 24 characters.
    frames = ctx.pick(600, 30)
    frame_lens = random_lengths(ctx, ctx.batch_size, frames, min_len=frames // 2)
    fbank = ctx.randn(ctx.batch_size, frames, 80) * length_mask(frame_lens, frames)[..., None]
    feats = stack_low_frame_rate(fbank)
    feat_lens = -(-frame_lens // 3)
    ys_in, ys_valid, ys_out = _transcripts(ctx, model.sos_id, model.eos_id, ctx.pick(24, 5))
    opt = ctx.optimizer(model.parameters(), "adam", lr=1e-4, betas=(0.9, 0.98), eps=1e-9) if ctx.train else None
    return RecognitionWorkload(
        ctx, model, (feats, feat_lens, ys_in, ys_valid), ys_out, decode_steps=ctx.pick(100, 3), optimizer=opt
    )


@register_model(
    domain="speech",
    task="recognition",
    batch_size=(32, 1),
    param_count=46_471_168,
    source="Dong et al. 2018; kaituoxu/Speech-Transformer",
    notes="param_count: the reference implementation with AISHELL-1's 4,233 characters; "
    "eval = greedy decoding of 100 steps (the reference: beam 5 until <eos>)",
)
def speech_transformer(ctx: BuildContext, **kwargs) -> Workload:
    """Speech-Transformer (6 + 6 layers, d_model 512) on low-frame-rate filterbank features."""
    return _create_speech_transformer(ctx, **kwargs)
