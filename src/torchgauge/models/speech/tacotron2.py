"""Tacotron 2: characters to mel spectrogram with location-sensitive attention.

Shen et al., "Natural TTS Synthesis by Conditioning WaveNet on Mel Spectrogram Predictions"
(ICASSP 2018), as implemented by NVIDIA/tacotron2 (BSD-3-Clause) with its default hparams, which
TorchBench runs: 148-symbol embedding (512), encoder of 3 conv(5) + BatchNorm layers and a
BiLSTM, location-sensitive attention (128 dims, 32 filters of width 31), prenet 2 x 256 with
always-on dropout, attention LSTM and decoder LSTM (1024 each), mel (80) and stop-gate
projections, 5-layer conv postnet; losses: MSE on the mel before and after the postnet plus BCE
on the gate. LJSpeech shapes: 22,050 Hz audio, 256-sample hop (86 frames/s).

``tacotron2`` is TorchBench's workload (``models/tacotron2/__init__.py``:131-144): train is the
teacher-forced forward (one decoder step per target frame), Tacotron2Loss, backward and
Adam(1e-3, weight decay 1e-6); eval is the same teacher-forced forward with the model in eval
mode (TorchBench runs it under AMP on CUDA by default; here precision is the run's setting).
TorchBench refuses CPU (its ``load_model`` assumes CUDA); the workload runs on CPU here too.
``tacotron2_inference`` keeps the synthesis path: the reference's ``inference`` (encoder
without packing, each step fed its own previous output) for a fixed number of frames, without
stopping at the gate, so the work does not depend on the random weights.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import length_mask, random_lengths

__all__ = ["Tacotron2", "tacotron2_loss"]

N_SYMBOLS = 148  # pad, punctuation, letters and ARPAbet of the reference's ``text/symbols.py``
N_MELS = 80


def _xavier(layer: nn.Module, gain: str = "linear") -> nn.Module:
    nn.init.xavier_uniform_(layer.weight, gain=nn.init.calculate_gain(gain))
    return layer


def _conv_bn(c_in: int, c_out: int, kernel: int, gain: str) -> nn.Sequential:
    return nn.Sequential(_xavier(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), gain), nn.BatchNorm1d(c_out))


class Encoder(nn.Module):
    def __init__(self, dim: int = 512, n_convolutions: int = 3, kernel: int = 5) -> None:
        super().__init__()
        self.convolutions = nn.ModuleList(_conv_bn(dim, dim, kernel, "relu") for _ in range(n_convolutions))
        self.lstm = nn.LSTM(dim, dim // 2, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        """``x (B, dim, L)`` to ``(B, L, dim)``; packed by ``lengths`` in training (sorted, longest first)."""
        for conv in self.convolutions:
            x = F.dropout(F.relu(conv(x)), 0.5, self.training)
        x = x.transpose(1, 2)
        if lengths is None:
            return self.lstm(x)[0]
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True)
        return pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=x.size(1))[0]


class LocationSensitiveAttention(nn.Module):
    def __init__(
        self, query_dim: int = 1024, memory_dim: int = 512, dim: int = 128, n_filters: int = 32, kernel: int = 31
    ) -> None:
        super().__init__()
        self.query_layer = _xavier(nn.Linear(query_dim, dim, bias=False), "tanh")
        self.memory_layer = _xavier(nn.Linear(memory_dim, dim, bias=False), "tanh")
        self.v = _xavier(nn.Linear(dim, 1, bias=False))
        self.location_conv = _xavier(nn.Conv1d(2, n_filters, kernel, padding=kernel // 2, bias=False))
        self.location_dense = _xavier(nn.Linear(n_filters, dim, bias=False), "tanh")

    def forward(
        self,
        query: torch.Tensor,
        memory: torch.Tensor,
        processed_memory: torch.Tensor,
        weights_cat: torch.Tensor,
        pad_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``query (B, q)``, ``weights_cat (B, 2, L)`` (previous and cumulative weights) to context and weights."""
        location = self.location_dense(self.location_conv(weights_cat).transpose(1, 2))  # (B, L, dim)
        energies = self.v(torch.tanh(self.query_layer(query)[:, None] + location + processed_memory)).squeeze(-1)
        if pad_mask is not None:
            energies = energies.masked_fill(pad_mask, float("-inf"))
        weights = F.softmax(energies, dim=1)  # (B, L)
        return torch.bmm(weights[:, None], memory).squeeze(1), weights


class Decoder(nn.Module):
    def __init__(
        self,
        memory_dim: int = 512,
        rnn_dim: int = 1024,
        prenet_dim: int = 256,
        attention_dim: int = 128,
        location_filters: int = 32,
        location_kernel: int = 31,
        p_dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.rnn_dim, self.p_dropout = rnn_dim, p_dropout
        self.prenet = nn.ModuleList(
            [_xavier(nn.Linear(N_MELS, prenet_dim, bias=False)), _xavier(nn.Linear(prenet_dim, prenet_dim, bias=False))]
        )
        self.attention_rnn = nn.LSTMCell(prenet_dim + memory_dim, rnn_dim)
        self.attention_layer = LocationSensitiveAttention(
            rnn_dim, memory_dim, attention_dim, location_filters, location_kernel
        )
        self.decoder_rnn = nn.LSTMCell(rnn_dim + memory_dim, rnn_dim)
        self.linear_projection = _xavier(nn.Linear(rnn_dim + memory_dim, N_MELS))
        self.gate_layer = _xavier(nn.Linear(rnn_dim + memory_dim, 1), "sigmoid")

    def run_prenet(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.prenet:  # dropout stays on at inference too: it gives the output variation
            x = F.dropout(F.relu(linear(x)), 0.5, training=True)
        return x

    def step(
        self,
        frame: torch.Tensor,
        state: tuple,
        memory: torch.Tensor,
        processed_memory: torch.Tensor,
        pad_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        """One frame: prenet output ``(B, prenet_dim)`` to mel ``(B, 80)``, gate ``(B, 1)`` and the next state."""
        att_h, att_c, dec_h, dec_c, weights, weights_cum, context = state
        att_h, att_c = self.attention_rnn(torch.cat((frame, context), -1), (att_h, att_c))
        att_h = F.dropout(att_h, self.p_dropout, self.training)
        weights_cat = torch.stack((weights, weights_cum), dim=1)
        context, weights = self.attention_layer(att_h, memory, processed_memory, weights_cat, pad_mask)
        dec_h, dec_c = self.decoder_rnn(torch.cat((att_h, context), -1), (dec_h, dec_c))
        dec_h = F.dropout(dec_h, self.p_dropout, self.training)
        out = torch.cat((dec_h, context), dim=1)
        state = (att_h, att_c, dec_h, dec_c, weights, weights_cum + weights, context)
        return self.linear_projection(out), self.gate_layer(out), state

    def initial_state(self, memory: torch.Tensor) -> tuple:
        B, L, D = memory.shape
        zeros = memory.new_zeros
        return (
            zeros(B, self.rnn_dim),
            zeros(B, self.rnn_dim),
            zeros(B, self.rnn_dim),
            zeros(B, self.rnn_dim),
            zeros(B, L),
            zeros(B, L),
            zeros(B, D),
        )

    def forward(
        self, memory: torch.Tensor, mels: torch.Tensor | None, pad_mask: torch.Tensor | None, n_frames: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Mels ``(B, 80, T)`` and gate logits ``(B, T)``; teacher-forced when target ``mels`` are given."""
        processed_memory = self.attention_layer.memory_layer(memory)  # (B, L, attention_dim)
        go = memory.new_zeros(memory.size(0), 1, N_MELS)
        teacher = None if mels is None else self.run_prenet(torch.cat((go, mels.transpose(1, 2)), dim=1))  # (B, T+1, p)
        state, frame, outputs, gates = self.initial_state(memory), go[:, 0], [], []
        for t in range(n_frames):
            prenet_out = self.run_prenet(frame) if teacher is None else teacher[:, t]
            frame, gate, state = self.step(prenet_out, state, memory, processed_memory, pad_mask)
            outputs.append(frame)
            gates.append(gate)
        return torch.stack(outputs, dim=2), torch.cat(gates, dim=1)


class Postnet(nn.Module):
    def __init__(self, dim: int = 512, kernel: int = 5, n_convolutions: int = 5) -> None:
        super().__init__()
        channels = [N_MELS] + [dim] * (n_convolutions - 1) + [N_MELS]
        gains = ["tanh"] * (n_convolutions - 1) + ["linear"]
        self.convolutions = nn.ModuleList(_conv_bn(a, b, kernel, g) for a, b, g in zip(channels, channels[1:], gains))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convolutions[:-1]:
            x = F.dropout(torch.tanh(conv(x)), 0.5, self.training)
        return F.dropout(self.convolutions[-1](x), 0.5, self.training)


class Tacotron2(nn.Module):
    def __init__(
        self,
        n_symbols: int = N_SYMBOLS,
        embedding_dim: int = 512,
        rnn_dim: int = 1024,
        prenet_dim: int = 256,
        attention_dim: int = 128,
        postnet_dim: int = 512,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(n_symbols, embedding_dim)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (n_symbols + embedding_dim))
        nn.init.uniform_(self.embedding.weight, -bound, bound)
        self.encoder = Encoder(embedding_dim)
        self.decoder = Decoder(embedding_dim, rnn_dim, prenet_dim, attention_dim)
        self.postnet = Postnet(postnet_dim)

    def forward(
        self, text: torch.Tensor, text_lens: torch.Tensor, mels: torch.Tensor, mel_lens: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Teacher-forced: mel ``(B, 80, T)`` before and after the postnet, gate logits ``(B, T)``."""
        memory = self.encoder(self.embedding(text).transpose(1, 2), text_lens)  # (B, L, 512)
        pad_mask = ~length_mask(text_lens, text.size(1))
        mel, gate = self.decoder(memory, mels, pad_mask, mels.size(2))
        mel_post = mel + self.postnet(mel)
        frame_pad = ~length_mask(mel_lens, mels.size(2))  # zero the padding frames, saturate their gate
        return (
            mel.masked_fill(frame_pad[:, None], 0.0),
            mel_post.masked_fill(frame_pad[:, None], 0.0),
            gate.masked_fill(frame_pad, 1e3),
        )

    def infer(self, text: torch.Tensor, n_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Autoregressive synthesis of ``n_frames``: mel after the postnet ``(B, 80, T)`` and gate logits."""
        memory = self.encoder(self.embedding(text).transpose(1, 2), None)
        mel, gate = self.decoder(memory, None, None, n_frames)
        return mel + self.postnet(mel), gate


def tacotron2_loss(outputs: tuple[torch.Tensor, ...], targets: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """MSE of both mel outputs against the target plus BCE of the stop gate."""
    mel, mel_post, gate = outputs
    mel_target, gate_target = targets
    return (
        F.mse_loss(mel, mel_target)
        + F.mse_loss(mel_post, mel_target)
        + F.binary_cross_entropy_with_logits(gate, gate_target)
    )


class SynthesisWorkload(Workload):
    """Autoregressive inference for as many frames as the target mels (tacotron2_inference)."""

    def forward(self):
        text, _, mels, _ = self.inputs
        return self.module.infer(text, mels.size(2))


# TorchBench times the first batch of its shuffled LJSpeech train filelist, which is in a data
# tarball, not in its repository, so the batch's lengths cannot be known. Stand-in: text lengths
# like the 600 LJSpeech transcripts its repository does hold (the Tacotron 2 val and test
# filelists through english_cleaners and its symbols: 15-182 symbols, mean 99; the longest of 64
# drawn from them is 164 at the median): uniform in [34, 164], the first 164. Each mel is as long
# as LJSpeech's published speaking rate makes its text (1,308,678 characters in 23:55:17 of audio,
# 15.2 per second; 86.13 frames per second at 22,050 Hz and hop 256), at most LJSpeech's longest
# clip (10.10 s, 870 frames); the mean comes out at 6.5 s (LJSpeech: 6.57 s).
TEXT_LENGTHS = (34, 164)
FRAMES_PER_SYMBOL = (22050 / 256) / 15.2
MAX_FRAMES = 870


def ljspeech_mel_lengths(text_lens: torch.Tensor) -> torch.Tensor:
    """Mel frames of each utterance from its text length (LJSpeech's rate, capped at its longest clip)."""
    return (text_lens * FRAMES_PER_SYMBOL).ceil().long().clamp(max=MAX_FRAMES)


def _create_tacotron2(ctx: BuildContext, workload: type[Workload] = Workload, **kwargs) -> Workload:
    # Smoke: the same layers at toy width (28M parameters and their Adam state take seconds on a CPU).
    smoke = dict(embedding_dim=64, rnn_dim=64, prenet_dim=32, attention_dim=16, postnet_dim=32) if ctx.smoke else {}
    model = Tacotron2(**(smoke | kwargs))
    if ctx.smoke:  # up to 12 symbols and 10 frames
        symbols, frames = 12, 10
        text_lens = random_lengths(ctx, ctx.batch_size, symbols, min_len=symbols // 2)
        mel_lens = random_lengths(ctx, ctx.batch_size, frames, min_len=frames // 2)
    else:  # sorted longest text first, as TorchBench's TextMelCollate orders the batch
        symbols = TEXT_LENGTHS[1]
        text_lens = random_lengths(ctx, ctx.batch_size, symbols, min_len=TEXT_LENGTHS[0])
        mel_lens = ljspeech_mel_lengths(text_lens)
        frames = min(math.ceil(symbols * FRAMES_PER_SYMBOL), MAX_FRAMES)  # the longest text's: padded to
    text = ctx.randint(1, model.embedding.num_embeddings, (ctx.batch_size, symbols)) * length_mask(text_lens, symbols)
    frame_valid = length_mask(mel_lens, frames)
    mels = ctx.randn(ctx.batch_size, N_MELS, frames) * frame_valid[:, None]
    gate_target = (torch.arange(frames, device=mels.device) >= (mel_lens - 1)[:, None]).float()
    opt = ctx.optimizer(model.parameters(), "adam", lr=1e-3, weight_decay=1e-6) if ctx.train else None
    return workload(
        ctx, model, (text, text_lens, mels, mel_lens), (mels, gate_target), loss_fn=tacotron2_loss, optimizer=opt
    )


@register_model(
    domain="speech",
    task="synthesis",
    batch_size=(64, 64),
    param_count=28_193_153,
    source="Shen et al. 2018; NVIDIA/tacotron2 as TorchBench runs it",
    notes="Train and eval are the teacher-forced forward (TorchBench's); TorchBench refuses CPU, it runs here.",
    torchbench_precision={"cuda": {"eval": "amp"}},  # TorchBench models/tacotron2/__init__.py:23
)
def tacotron2(ctx: BuildContext, **kwargs) -> Workload:
    """Tacotron 2 (NVIDIA hparams): text to 80-bin mel, teacher-forced in both modes."""
    return _create_tacotron2(ctx, **kwargs)


@register_model(
    domain="speech",
    task="synthesis",
    batch_size=64,
    modes=("eval",),
    param_count=28_193_153,
    source="Shen et al. 2018; NVIDIA/tacotron2",
    notes="eval = autoregressive inference for a fixed number of frames (no gate stop)",
)
def tacotron2_inference(ctx: BuildContext, **kwargs) -> Workload:
    """Tacotron 2 synthesis: as many autoregressive decoder steps as the batch's longest mel (870) from text."""
    return _create_tacotron2(ctx, SynthesisWorkload, **kwargs)
