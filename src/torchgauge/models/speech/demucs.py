"""Demucs: waveform-to-waveform music source separation (a U-Net with a BiLSTM bottleneck).

Défossez, Usunier, Bottou and Bach, "Music Source Separation in the Waveform Domain" (2019),
facebookresearch/demucs (MIT license): stereo 44.1 kHz mixtures, 6 encoder layers (conv 8/4,
ReLU, 1x1 conv, GLU) from 64 channels doubling per layer, a 2-layer BiLSTM at 2048 channels, 6
decoder layers (conv 3 + GLU, transposed conv 8/4, ReLU) with U-Net skips, split into 4 stereo
sources (drums, bass, other, vocals); initial conv weights rescaled towards std 0.1; L1 loss
against the sources, centre-trimmed to the output length; Adam (lr 3e-4).

* ``demucs`` is TorchBench's (``torchbenchmark/models/demucs/__init__.py``, the repository at
  commit 3e5ea549): no resampling around the U-Net, and its ``DemucsWrapper`` step. The input
  is ``rand(B, 5, 2, 426888)`` streams (stream 0 stands for the mixture and is dropped); the
  timed step augments the 4 source streams (random sign flip, left/right swap, a random time
  shift of up to 1 s that crops 44,100 samples, and a remix shuffling sources within groups of
  4 clips; in eval only the crop), sums them into the mixture, separates it and takes the L1
  loss (eval computes it too). TorchBench trains 64 clips per step: about 40 GiB, declared
  (``full_memory_gib``) so that a full-size run on a smaller machine is ``unsupported``.
* ``demucs_v2`` is the v2 release's configuration: the mixture upsampled x2 with a
  windowed-sinc filter before the U-Net and downsampled after (julius' ``resample_frac`` in
  the reference, written here in plain PyTorch), fed plain 10 s mixtures (no augmentation)
  at batch 4 to train.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = [
    "AugmentedSeparation",
    "Demucs",
    "FlipChannels",
    "FlipSign",
    "Remix",
    "SincResample",
    "TimeShift",
    "center_trim",
]


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


# -- TorchBench's augmentation of (B, sources, channels, T) stems; active in train mode only -----
class FlipSign(nn.Module):
    """Multiply each source of each clip by a random sign."""

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return wav
        signs = torch.randint(2, (*wav.shape[:2], 1, 1), device=wav.device, dtype=wav.dtype)
        return wav * (2 * signs - 1)


class FlipChannels(nn.Module):
    """Swap left and right of each stereo source at random."""

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        if not self.training or wav.size(2) != 2:
            return wav
        left = torch.randint(2, (*wav.shape[:2], 1, 1), device=wav.device).expand(-1, -1, -1, wav.size(-1))
        return torch.cat([wav.gather(2, left), wav.gather(2, 1 - left)], dim=2)


class TimeShift(nn.Module):
    """Crop ``shift`` samples: at a random offset per source in train mode, from the start in eval."""

    def __init__(self, shift: int) -> None:
        super().__init__()
        self.shift = shift

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        batch, sources, channels, time = wav.shape
        length = time - self.shift
        if not self.training:
            return wav[..., :length]
        offsets = torch.randint(self.shift, (batch, sources, 1, 1), device=wav.device)
        return wav.gather(3, torch.arange(length, device=wav.device) + offsets.expand(-1, -1, channels, -1))


class Remix(nn.Module):
    """Shuffle each source across the clips of a group of ``group_size`` clips (new mixtures)."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = group_size

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return wav
        batch, sources, channels, time = wav.shape
        groups = wav.view(batch // self.group_size, self.group_size, sources, channels, time)
        order = torch.argsort(torch.rand(*groups.shape[:3], 1, 1, device=wav.device), dim=1)
        return groups.gather(1, order.expand(-1, -1, -1, channels, time)).view(batch, sources, channels, time)


class AugmentedSeparation(nn.Module):
    """TorchBench's DemucsWrapper: streams ``(B, 1 + sources, C, T)`` -> (augmented sources, estimates)."""

    def __init__(self, model: Demucs, augment: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.augment = augment

    def forward(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sources = self.augment(streams[:, 1:])  # stream 0 (the mixture) is dropped
        return sources, self.model(sources.sum(dim=1))


class AugmentedSeparationWorkload(Workload):
    """L1 loss of the estimates against the centre-trimmed augmented sources; eval computes it too."""

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        sources, estimates = outputs
        return _separation_l1(estimates, sources)

    def eval_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = super().eval_step()
        self.compute_loss(outputs)  # TorchBench's eval takes the loss and drops it
        return outputs


# TorchBench's inputs and its demucs parser's defaults (samplerate 44100, data_stride 44100,
# remix_group_size 4, lr 3e-4).
STREAM_SAMPLES = 426_888  # rand(B, 5, 2, 426888)
SHIFT_SAMPLES = 44_100  # Shift(data_stride): up to 1 s, cropped from every stream
REMIX_GROUP_SIZE = 4
SMOKE_STREAM_SAMPLES, SMOKE_SHIFT_SAMPLES = 2_646, 441  # 60 ms and 10 ms
# Full-size memory need (GiB). Train at 64 clips: autograd saves ~0.42 GiB of activations per
# clip (27 GiB; counted with saved-tensor hooks on the meta device, and ~1.7 GiB at 4 clips
# matches a CPU run's 5.1 GB peak RSS with the 4 GiB of weights, gradients and Adam state),
# plus those 4 GiB, the 1 GiB of input streams and the backward's transient gradients.
# Eval at 8 clips: the weights and one layer's activations at a time.
FULL_TRAIN_GIB, FULL_EVAL_GIB = 40, 3


def _create_torchbench_demucs(ctx: BuildContext, **kwargs) -> Workload:
    group = ctx.pick(REMIX_GROUP_SIZE, ctx.batch_size)  # smoke batches of 2 form one group
    if ctx.train and ctx.batch_size % group:
        raise ValueError(
            f"demucs trains on groups of {group} clips (Remix shuffles sources within a group): "
            f"the batch size must be a multiple of {group}, got {ctx.batch_size}"
        )
    # Smoke: the same layers at toy width and depth (265M parameters would not fit a 2 s CPU budget).
    model = Demucs(resample=False, **(ctx.pick({}, dict(channels=4, depth=4)) | kwargs))
    shift = ctx.pick(SHIFT_SAMPLES, SMOKE_SHIFT_SAMPLES)
    augment = nn.Sequential(FlipSign(), FlipChannels(), TimeShift(shift), Remix(group))
    streams = ctx.rand(
        ctx.batch_size, 1 + model.sources, model.audio_channels, ctx.pick(STREAM_SAMPLES, SMOKE_STREAM_SAMPLES)
    )
    opt = ctx.optimizer(model.parameters(), "adam", lr=3e-4) if ctx.train else None
    return AugmentedSeparationWorkload(ctx, AugmentedSeparation(model, augment), (streams,), optimizer=opt)


def _create_demucs_v2(ctx: BuildContext, seconds: float = 10.0, **kwargs) -> Workload:
    smoke = dict(channels=4, depth=4) if ctx.smoke else {}
    model = Demucs(**(smoke | kwargs))
    # 10 s stereo clips at 44.1 kHz, rounded up to a valid length.
    samples = model.valid_length(int(ctx.pick(seconds, 0.05) * 44_100))
    sources = ctx.randn(ctx.batch_size, model.sources, model.audio_channels, samples, std=0.1)
    opt = ctx.optimizer(model.parameters(), "adam", lr=3e-4) if ctx.train else None
    return Workload(ctx, model, (sources.sum(dim=1),), sources, loss_fn=_separation_l1, optimizer=opt)


_SOURCE = "Défossez et al. 2019; facebookresearch/demucs"


@register_model(
    domain="speech", task="source_separation", batch_size=(64, 8), cpu_batch_size=(64, 1),
    param_count=265_679_496, source=_SOURCE + " as TorchBench's demucs (no resampling, augmented streams)",
    full_memory_gib=(FULL_TRAIN_GIB, FULL_EVAL_GIB),
    notes=f"TorchBench's batch of 64 clips needs ~{FULL_TRAIN_GIB} GiB to train at full size "
    f"(~{FULL_EVAL_GIB} GiB to evaluate 8); smaller machines report unsupported",
)  # fmt: skip
def demucs(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's Demucs (64 channels, 6 layers, GLU, BiLSTM), its 4-stream augmentation inside the step."""
    return _create_torchbench_demucs(ctx, **kwargs)


@register_model(
    domain="speech", task="source_separation", batch_size=(4, 8), cpu_batch_size=(4, 1),
    param_count=265_679_496, source=_SOURCE + " (v2 release: x2 sinc resampling)",
    notes="train batch 4: backward keeps about 12 GB of activations per 10 s clip",
)  # fmt: skip
def demucs_v2(ctx: BuildContext, **kwargs) -> Workload:
    """Demucs v2 (6 layers from 64 channels, GLU, BiLSTM, x2 resampling), plain 10 s mixtures."""
    return _create_demucs_v2(ctx, **kwargs)
