"""Demucs: waveform-to-waveform music source separation (a U-Net with a BiLSTM bottleneck).

Défossez, Usunier, Bottou and Bach, "Music Source Separation in the Waveform Domain" (2019), in
the configuration of the facebookresearch/demucs v2 release (MIT license): stereo 44.1 kHz input
upsampled x2 with a windowed-sinc filter (julius' ``resample_frac`` in the reference, written
here in plain PyTorch), 6 encoder layers (conv 8/4, ReLU, 1x1 conv, GLU) from 64 channels doubling
per layer, a 2-layer BiLSTM at 2048 channels, 6 decoder layers (conv 3 + GLU, transposed conv 8/4,
ReLU) with U-Net skips, output downsampled back and split into 4 stereo sources (drums, bass,
other, vocals); initial conv weights rescaled towards std 0.1; L1 loss against the sources,
centre-trimmed to the output length; Adam.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["Demucs", "SincResample", "center_trim"]


class SincResample(nn.Module):
    """Resample by the rational factor ``new_sr / old_sr`` with Hann-windowed sinc filters.

    One filter per output phase; the cutoff is ``rolloff`` times the lower Nyquist frequency and
    each filter spans ``zeros`` zero crossings on either side. Ends are padded by replication.
    """

    def __init__(self, old_sr: int, new_sr: int, zeros: int = 24, rolloff: float = 0.945) -> None:
        super().__init__()
        gcd = math.gcd(old_sr, new_sr)
        self.old_sr, self.new_sr = old_sr // gcd, new_sr // gcd
        cutoff = min(self.old_sr, self.new_sr) * rolloff  # in units of the input sample rate ratio
        self.width = math.ceil(zeros * self.old_sr / cutoff)
        taps = torch.arange(-self.width, self.width + self.old_sr, dtype=torch.float64) / self.old_sr
        phases = -torch.arange(self.new_sr, dtype=torch.float64)[:, None] / self.new_sr
        t = ((phases + taps) * cutoff).clamp(-zeros, zeros) * math.pi  # (new_sr, taps)
        window = torch.cos(t / zeros / 2) ** 2
        kernels = torch.where(t == 0, 1.0, torch.sin(t) / t) * window
        kernels = kernels / kernels.sum(dim=-1, keepdim=True)  # unit DC gain
        self.register_buffer("kernels", kernels[:, None].float(), persistent=False)  # (new_sr, 1, taps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., T)`` to ``(..., floor(T * new_sr / old_sr))``."""
        *batch, T = x.shape
        x = F.pad(x.reshape(-1, 1, T), (self.width, self.width + self.old_sr), mode="replicate")
        y = F.conv1d(x, self.kernels.to(x.dtype), stride=self.old_sr)  # (N, new_sr, T / old_sr + 1)
        y = y.transpose(1, 2).reshape(*batch, -1)  # interleave the phases
        return y[..., : self.new_sr * T // self.old_sr]


def center_trim(x: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Crop the last dimension of ``x`` to ``reference``'s length, removing equally on both sides."""
    delta = x.size(-1) - reference.size(-1)
    if delta < 0:
        raise ValueError(f"cannot trim {x.size(-1)} samples to {reference.size(-1)}")
    return x[..., delta // 2 : x.size(-1) - (delta - delta // 2)]


class BLSTM(nn.Module):
    """Bidirectional LSTM over time with a projection back to ``dim`` channels."""

    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(dim, dim, num_layers=layers, bidirectional=True)
        self.linear = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lstm(x.permute(2, 0, 1))[0]  # (T, B, 2C)
        return self.linear(x).permute(1, 2, 0)  # (B, C, T)


class Demucs(nn.Module):
    def __init__(
        self,
        sources: int = 4,
        audio_channels: int = 2,
        channels: int = 64,
        depth: int = 6,
        kernel_size: int = 8,
        stride: int = 4,
        growth: float = 2.0,
        lstm_layers: int = 2,
        context: int = 3,
        rescale: float = 0.1,
        resample: bool = True,
    ) -> None:
        super().__init__()
        self.sources, self.audio_channels = sources, audio_channels
        self.depth, self.kernel_size, self.stride, self.context = depth, kernel_size, stride, context
        self.upsample = SincResample(1, 2) if resample else None
        self.downsample = SincResample(2, 1) if resample else None
        self.encoder, self.decoder = nn.ModuleList(), nn.ModuleList()
        in_channels = audio_channels
        for index in range(depth):
            self.encoder.append(
                nn.Sequential(
                    nn.Conv1d(in_channels, channels, kernel_size, stride),
                    nn.ReLU(),
                    nn.Conv1d(channels, 2 * channels, 1),
                    nn.GLU(dim=1),
                )
            )
            out_channels = in_channels if index > 0 else sources * audio_channels
            decode = [
                nn.Conv1d(channels, 2 * channels, context),
                nn.GLU(dim=1),
                nn.ConvTranspose1d(channels, out_channels, kernel_size, stride),
            ]
            self.decoder.insert(0, nn.Sequential(*decode, *([nn.ReLU()] if index > 0 else [])))
            in_channels, channels = channels, int(growth * channels)
        self.lstm = BLSTM(in_channels, lstm_layers)
        for module in self.modules():  # the reference's rescale: std(weight) -> sqrt(std * rescale)
            if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):
                scale = (module.weight.std().detach() / rescale) ** 0.5
                module.weight.data /= scale
                module.bias.data /= scale

    def valid_length(self, length: int) -> int:
        """Smallest input length at least ``length`` for which every convolution divides evenly."""
        length = length * 2 if self.upsample is not None else length
        for _ in range(self.depth):
            length = max(1, math.ceil((length - self.kernel_size) / self.stride) + 1) + self.context - 1
        for _ in range(self.depth):
            length = (length - 1) * self.stride + self.kernel_size
        return math.ceil(length / 2) if self.upsample is not None else length

    def forward(self, mix: torch.Tensor) -> torch.Tensor:
        """Mixture ``(B, audio_channels, T)`` to sources ``(B, sources, audio_channels, T')``, ``T' < T``."""
        x = mix if self.upsample is None else self.upsample(mix)
        saved = []
        for encode in self.encoder:
            x = encode(x)
            saved.append(x)
        x = self.lstm(x)
        for decode in self.decoder:
            x = decode(x + center_trim(saved.pop(), x))  # the decoder's context conv shortens x
        x = x if self.downsample is None else self.downsample(x)
        return x.view(x.size(0), self.sources, self.audio_channels, x.size(-1))


def _separation_l1(estimates: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    return F.l1_loss(estimates, center_trim(sources, estimates))


def _create_demucs(ctx: BuildContext, seconds: float = 10.0, **kwargs) -> Workload:
    # Smoke: the same layers at toy width and depth (265M parameters would not fit a 2 s CPU budget).
    smoke = dict(channels=4, depth=4) if ctx.smoke else {}
    model = Demucs(**(smoke | kwargs))
    # 10 s stereo clips at 44.1 kHz, rounded up to a valid length (TorchBench feeds 426,888 samples).
    samples = model.valid_length(int(ctx.pick(seconds, 0.05) * 44_100))
    sources = ctx.randn(ctx.batch_size, model.sources, model.audio_channels, samples, std=0.1)
    opt = ctx.optimizer(model.parameters(), "adam", lr=3e-4) if ctx.train else None
    return Workload(ctx, model, (sources.sum(dim=1),), sources, loss_fn=_separation_l1, optimizer=opt)


@register_model(
    domain="speech",
    task="source_separation",
    batch_size=(4, 8),
    cpu_batch_size=(4, 1),
    param_count=265_679_496,
    source="Défossez et al. 2019; facebookresearch/demucs (v2)",
    notes="param_count: the reference at 64 initial channels; train batch 4, not the suite's 64: "
    "backward keeps about 12 GB of activations per 10 s clip",
)
def demucs(ctx: BuildContext, **kwargs) -> Workload:
    """Demucs v2 (6 layers from 64 channels, GLU, BiLSTM, x2 resampling), 4 stereo sources."""
    return _create_demucs(ctx, **kwargs)
