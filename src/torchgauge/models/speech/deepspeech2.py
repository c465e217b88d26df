"""DeepSpeech2: convolutions + bidirectional GRUs over a spectrogram, trained with CTC.

Amodei et al., "Deep Speech 2: End-to-End Speech Recognition in English and Mandarin", ICML 2016;
reference implementation github.com/SeanNaren/deepspeech.pytorch (MIT), ``model.py``,
``train.py``, ``decoder.py`` and ``data/data_loader.py`` of its 2019 release (the last with
``train.py`` defaults; later releases default to LSTMs of 1024).

Model as the reference with its defaults: 161-bin spectrograms (20 ms Hamming windows, 10 ms hop,
``log1p`` magnitude, per-utterance mean/std normalisation) as ``(B, 1, 161, T)``; two Conv2d
(32 channels, kernels 41x11 stride 2x2 and 21x11 stride 2x1) each with BatchNorm and
``Hardtanh(0, 20)``, the padded time steps zeroed after every layer (``MaskConv``); five
bidirectional GRUs of 800 units on packed sequences, the two directions summed, each but the first
preceded by a sequence-wise BatchNorm; a sequence-wise BatchNorm and a bias-free Linear to 29
characters (blank ``_`` first). Training: CTC loss summed over the batch and divided by the batch
size, SGD (lr 3e-4, momentum 0.9, Nesterov, weight decay 1e-5), gradients clipped to norm 400,
batch 20, utterances sorted by length (the reference's collate). Eval: softmax outputs and greedy
CTC decoding (argmax per frame, repeats collapsed, blanks dropped), as ``GreedyDecoder``; decoding
to strings is left out. The ``_lookahead`` variant is the reference's unidirectional model:
unidirectional GRUs and a depthwise lookahead convolution over 20 future frames with Hardtanh.

Differences: the reference trains with Baidu's warp-ctc (softmax inside the loss); here
``F.ctc_loss`` on log-softmax outputs, as the reference's later releases (``zero_infinity``).
Data: seeded synthetic speech-like waveforms (harmonic tones and noise) turned into spectrograms
at build time, and random character transcripts. Written from the paper and the description
above; no code copied. Parameters: 41,187,968, counted from the reference configuration
(conv 251,168; GRUs 10,147,200 + 4 x 7,691,200; head 24,800).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.padding import random_lengths
from .hifigan import synthetic_audio

__all__ = ["DeepSpeech2", "DeepSpeech2Config", "ctc_greedy_decode", "spectrogram"]

BLANK = 0  # '_' is the first of the reference's 29 labels


@dataclass(frozen=True)
class DeepSpeech2Config:
    sample_rate: int = 16_000
    window_size: float = 0.02  # seconds: n_fft = 320, 161 bins
    window_stride: float = 0.01
    hidden_size: int = 800
    hidden_layers: int = 5
    bidirectional: bool = True
    lookahead_context: int = 20  # unidirectional model only
    num_classes: int = 29
    max_frames: int = 500  # 5 s utterances, the longest of a batch
    max_transcript: int = 75  # characters, about 15 per second
    lr: float = 3e-4
    max_norm: float = 400.0

    @property
    def n_fft(self) -> int:
        return int(self.sample_rate * self.window_size)

    @property
    def hop_length(self) -> int:
        return int(self.sample_rate * self.window_stride)


class SequenceWise(nn.Module):
    """Apply ``module`` to ``(T, N, H)`` as ``(T * N, H)``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, n = x.shape[:2]
        return self.module(x.view(t * n, -1)).view(t, n, -1)


class MaskConv(nn.Module):
    """Run ``seq_module`` layer by layer on ``(B, C, F, T)``, zeroing time steps beyond each length."""

    def __init__(self, seq_module: nn.Sequential) -> None:
        super().__init__()
        self.seq_module = seq_module

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        for module in self.seq_module:
            x = module(x)
            pad = torch.arange(x.size(3), device=x.device) >= lengths.to(x.device)[:, None]  # (B, T)
            x = x.masked_fill(pad[:, None, None, :], 0)
        return x


class BatchRNN(nn.Module):
    """Optional sequence-wise BatchNorm, then a GRU over packed ``(T, N, H)``; directions summed."""

    def __init__(self, input_size: int, hidden_size: int, bidirectional: bool, batch_norm: bool = True) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.batch_norm = SequenceWise(nn.BatchNorm1d(input_size)) if batch_norm else None
        self.rnn = nn.GRU(input_size, hidden_size, bidirectional=bidirectional, bias=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        x = nn.utils.rnn.pack_padded_sequence(x, lengths)  # lengths sorted, longest first, on the CPU
        x, _ = self.rnn(x)
        x, _ = nn.utils.rnn.pad_packed_sequence(x)
        if self.bidirectional:
            x = x.view(x.size(0), x.size(1), 2, -1).sum(2)  # (T, N, 2H) -> (T, N, H)
        return x


class Lookahead(nn.Module):
    """Depthwise conv over the current and ``context - 1`` future frames: ``(T, N, H) -> (T, N, H)``."""

    def __init__(self, n_features: int, context: int) -> None:
        super().__init__()
        self.context = context
        self.conv = nn.Conv1d(n_features, n_features, kernel_size=context, groups=n_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x.permute(1, 2, 0), (0, self.context - 1))  # (N, H, T + context - 1)
        return self.conv(x).permute(2, 0, 1).contiguous()


class DeepSpeech2(nn.Module):
    """Spectrograms ``(B, 1, F, T)`` and lengths ``(B,)`` -> ``(B, T', classes)`` and ``T'`` per utterance."""

    def __init__(self, cfg: DeepSpeech2Config) -> None:
        super().__init__()
        self.conv = MaskConv(
            nn.Sequential(
                nn.Conv2d(1, 32, kernel_size=(41, 11), stride=(2, 2), padding=(20, 5)),
                nn.BatchNorm2d(32),
                nn.Hardtanh(0, 20, inplace=True),
                nn.Conv2d(32, 32, kernel_size=(21, 11), stride=(2, 1), padding=(10, 5)),
                nn.BatchNorm2d(32),
                nn.Hardtanh(0, 20, inplace=True),
            )
        )
        freq = cfg.n_fft // 2 + 1
        freq = (freq + 2 * 20 - 41) // 2 + 1
        freq = (freq + 2 * 10 - 21) // 2 + 1
        h = cfg.hidden_size
        self.rnns = nn.ModuleList(
            BatchRNN(32 * freq if i == 0 else h, h, cfg.bidirectional, batch_norm=i > 0)
            for i in range(cfg.hidden_layers)
        )
        self.lookahead = (
            None
            if cfg.bidirectional
            else nn.Sequential(Lookahead(h, cfg.lookahead_context), nn.Hardtanh(0, 20, inplace=True))
        )
        self.fc = SequenceWise(nn.Sequential(nn.BatchNorm1d(h), nn.Linear(h, cfg.num_classes, bias=False)))

    def get_seq_lens(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames left along time after the convolutions."""
        for m in self.conv.modules():
            if isinstance(m, nn.Conv2d):
                lengths = (lengths + 2 * m.padding[1] - m.dilation[1] * (m.kernel_size[1] - 1) - 1) // m.stride[1] + 1
        return lengths

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        output_lengths = self.get_seq_lens(lengths.cpu())
        x = self.conv(x, output_lengths)  # (B, 32, F', T')
        b, c, f, t = x.shape
        x = x.view(b, c * f, t).permute(2, 0, 1).contiguous()  # (T', B, 32 F')
        for rnn in self.rnns:
            x = rnn(x, output_lengths)
        if self.lookahead is not None:
            x = self.lookahead(x)
        x = self.fc(x).transpose(0, 1)  # (B, T', classes)
        if not self.training:  # InferenceBatchSoftmax
            x = F.softmax(x, dim=-1)
        return x, output_lengths


def ctc_greedy_decode(probs: torch.Tensor, lengths: torch.Tensor, blank: int = BLANK) -> list[torch.Tensor]:
    """Best path per utterance: argmax per frame, repeats collapsed, blanks dropped; ``(B, T, V) -> B x (L_b,)``."""
    ids = probs.argmax(-1)  # (B, T)
    prev = F.pad(ids[:, :-1], (1, 0), value=-1)
    frame = torch.arange(ids.size(1), device=ids.device)
    keep = (ids != blank) & (ids != prev) & (frame < lengths.to(ids.device)[:, None])
    return [row[mask] for row, mask in zip(ids, keep)]


def spectrogram(audio: torch.Tensor, cfg: DeepSpeech2Config) -> torch.Tensor:
    """Waveforms ``(B, T)`` to normalised ``log1p |STFT|`` ``(B, 1, n_fft // 2 + 1, frames)`` (the data loader)."""
    window = torch.hamming_window(cfg.n_fft, device=audio.device)
    spect = (
        torch.stft(
            audio, cfg.n_fft, cfg.hop_length, window=window, center=True, pad_mode="reflect", return_complex=True
        )
        .abs()
        .log1p()
    )
    mean, std = spect.mean(dim=(1, 2), keepdim=True), spect.std(dim=(1, 2), keepdim=True)
    return ((spect - mean) / std).unsqueeze(1)


class CTCWorkload(Workload):
    """Inputs ``(spectrograms, lengths)``; targets ``(concatenated transcripts, transcript lengths)``."""

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        out, output_lengths = outputs
        targets, target_lengths = self.targets
        log_probs = out.transpose(0, 1).float().log_softmax(-1)  # (T, B, V), fp32 for the loss
        loss = F.ctc_loss(
            log_probs, targets, output_lengths, target_lengths, blank=BLANK, reduction="sum", zero_infinity=True
        )
        return loss / out.size(0)  # averaged over the minibatch

    def forward(self) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        out, output_lengths = self.module(*self.inputs)
        if self.ctx.train:
            return out, output_lengths
        return out, ctc_greedy_decode(out, output_lengths)


_SMOKE = dict(
    window_size=0.004,
    window_stride=0.002,
    hidden_size=16,
    hidden_layers=2,
    lookahead_context=3,
    max_frames=40,
    max_transcript=6,
)


def _create_deepspeech2(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(DeepSpeech2Config(), **{**(_SMOKE if ctx.smoke else {}), **kwargs})
    b = ctx.batch_size
    samples = (cfg.max_frames - 1) * cfg.hop_length
    frames = random_lengths(ctx, b, cfg.max_frames, min_len=cfg.max_frames // 2)  # longest first
    audio = synthetic_audio(ctx, b, samples, cfg.sample_rate)
    spect = spectrogram(audio, cfg)  # (B, 1, F, max_frames)
    pad = torch.arange(cfg.max_frames, device=ctx.device) >= frames.to(ctx.device)[:, None]
    spect = spect.masked_fill(pad[:, None, None, :], 0.0)  # zero-padded batch, longest first
    target_lengths = random_lengths(ctx, b, cfg.max_transcript, min_len=1)
    target_lengths = torch.minimum(target_lengths, frames * cfg.max_transcript // cfg.max_frames).clamp_min(1)
    targets = ctx.randint(1, cfg.num_classes, (int(target_lengths.sum()),))  # concatenated, as the reference
    model = DeepSpeech2(cfg)
    workload = CTCWorkload(
        ctx,
        model,
        (spect, frames),
        (targets, target_lengths),
        optimizer=(
            torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9, nesterov=True, weight_decay=1e-5)
            if ctx.train
            else None
        ),
    )
    workload.max_grad_norm = cfg.max_norm
    return workload


_SOURCE = "Amodei et al., Deep Speech 2, ICML 2016; SeanNaren/deepspeech.pytorch (2019 defaults)"


@register_model(
    domain="speech",
    task="recognition",
    batch_size=(20, 20),
    tags=("ctc", "rnn"),
    param_count=41_187_968,
    source=_SOURCE,
    notes="eval = softmax + greedy CTC decoding; CTC loss in fp32",
)
def deepspeech2(ctx: BuildContext, **kwargs) -> Workload:
    """DeepSpeech2 (2 conv + 5 x bidirectional GRU 800, sequence-wise BatchNorm), CTC over 29 characters."""
    return _create_deepspeech2(ctx, **kwargs)


@register_model(
    domain="speech",
    task="recognition",
    batch_size=(20, 20),
    tags=("ctc", "rnn"),
    source=_SOURCE,
    notes="unidirectional GRUs + lookahead convolution (the reference's --no-bidirectional)",
)
def deepspeech2_lookahead(ctx: BuildContext, **kwargs) -> Workload:
    """DeepSpeech2 with unidirectional GRUs and a 20-frame lookahead convolution."""
    return _create_deepspeech2(ctx, **{"bidirectional": False, **kwargs})
