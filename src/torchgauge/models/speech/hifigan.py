"""HiFi-GAN V1: a GAN vocoder from mel-spectrograms to waveforms.

Kong, Kim and Bae, "HiFi-GAN: Generative Adversarial Networks for Efficient and High Fidelity
Speech Synthesis", NeurIPS 2020; reference implementation github.com/jik876/hifi-gan (MIT),
``models.py``, ``meldataset.py``, ``train.py`` and ``config_v1.json``.

Generator V1 as the reference: a weight-normalised ``Conv1d(80, 512, 7)``, four transposed-conv
upsamplings (rates 8, 8, 2, 2, kernels 16, 16, 4, 4, channels halving from 512), each followed
by a multi-receptive-field fusion (MRF) block averaging three ``ResBlock1`` (kernels 3, 7, 11,
dilations 1, 3, 5; two weight-normalised convs per dilation, leaky ReLU 0.1), then leaky ReLU
(slope 0.01, the reference's default), ``Conv1d(32, 1, 7)`` and tanh. Discriminators as the
reference: the multi-period discriminator (periods 2, 3, 5, 7, 11; the waveform reflect-padded
to a multiple of the period and reshaped to ``(B, 1, T / p, p)`` for ``(5, 1)`` Conv2d stacks)
and the multi-scale discriminator (three grouped Conv1d stacks on the raw, x2 and x4
average-pooled waveform; the first spectral-normalised, the others weight-normalised).

Training step as ``train.py``: generate from the mel, compute the generated audio's log-mel
(``torch.stft`` with the reference's reflect padding and ``center=False``, magnitude, a Slaney
mel filterbank built here as librosa's, ``log(clamp(x, 1e-5))``), one discriminator update
(LSGAN: ``mean((1 - D(y))^2) + mean(D(G(x))^2)`` summed over all sub-discriminators), then one
generator update (LSGAN adversarial + 2 x feature-matching L1 + 45 x mel L1 against the log-mel
of the real audio with ``fmax_for_loss = None``), both AdamW (lr 2e-4, betas 0.8/0.99) as the
reference. Segments of 8192 samples at 22.05 kHz, batch 16. Eval = the generator on a mel with
weight norm removed, as ``inference.py`` (``remove_weight_norm``).

Differences: weight norm and spectral norm are ``torch.nn.utils.parametrizations`` (the
reference uses the legacy hooks; same function). The reference's ``init_weights`` (normal, std
0.01) writes into the derived ``weight`` of modules already weight-normalised, which the next
forward overwrites, so it has no effect; it is left out and the default init used. The
reference's learning-rate decay per epoch is outside the timed step. Data are synthetic: seeded
sums of harmonic sinusoids plus noise; the input mel and the loss target are computed from them
at build time, as the reference's data loader does. Written from the paper and the description
above; no code copied. Parameters: 13,926,017 in the generator without weight norm, the paper's
13.92 M (Table 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.adversarial import GeneratorDiscriminator

__all__ = [
    "Generator",
    "HiFiGANConfig",
    "MultiPeriodDiscriminator",
    "MultiScaleDiscriminator",
    "discriminator_loss",
    "feature_loss",
    "generator_loss",
    "mel_spectrogram",
    "slaney_mel_filterbank",
]

LRELU_SLOPE = 0.1  # the reference's slope inside the generator and every discriminator
LOG_CLIP = 1e-5  # dynamic_range_compression_torch: log(clamp(x, min=1e-5))
MAG_EPS = 1e-9  # added to the squared STFT magnitude before the sqrt


@dataclass(frozen=True)
class HiFiGANConfig:
    num_mels: int = 80
    upsample_rates: tuple[int, ...] = (8, 8, 2, 2)  # product = hop_size
    upsample_kernel_sizes: tuple[int, ...] = (16, 16, 4, 4)
    upsample_initial_channel: int = 512
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    periods: tuple[int, ...] = (2, 3, 5, 7, 11)
    mpd_channels: tuple[int, ...] = (32, 128, 512, 1024, 1024)  # DiscriminatorP's five convs
    msd_channels: tuple[int, ...] = (128, 128, 256, 512, 1024, 1024, 1024)  # DiscriminatorS's seven convs
    msd_groups: tuple[int, ...] = (1, 4, 16, 16, 16, 16, 1)
    segment_size: int = 8192  # training crop in samples (32 mel frames)
    sampling_rate: int = 22_050
    n_fft: int = 1024
    hop_size: int = 256
    win_size: int = 1024
    fmin: float = 0.0
    fmax: float = 8000.0  # of the generator's input mel
    fmax_for_loss: float | None = None  # of the loss mel: Nyquist
    lr: float = 2e-4
    betas: tuple[float, float] = (0.8, 0.99)
    mel_weight: float = 45.0


# -- mel-spectrogram ------------------------------------------------------------------------------
def _hz_to_mel_slaney(hz: torch.Tensor) -> torch.Tensor:
    """librosa's default (Slaney) mel scale: linear below 1 kHz, logarithmic above."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(hz >= min_log_hz, min_log_mel + torch.log(hz / min_log_hz) / logstep, hz / f_sp)


def _mel_to_hz_slaney(mel: torch.Tensor) -> torch.Tensor:
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(mel >= min_log_mel, min_log_hz * torch.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def slaney_mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> torch.Tensor:
    """``(n_mels, n_fft // 2 + 1)`` float64: librosa.filters.mel(htk=False, norm='slaney')."""
    fmax = sr / 2 if fmax is None else fmax
    fft_freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, dtype=torch.float64)
    lo, hi = _hz_to_mel_slaney(torch.tensor([fmin, fmax], dtype=torch.float64))
    edges = _mel_to_hz_slaney(torch.linspace(lo.item(), hi.item(), n_mels + 2, dtype=torch.float64))
    widths = edges.diff()  # (n_mels + 1,)
    ramps = edges[:, None] - fft_freqs[None, :]  # (n_mels + 2, F)
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = torch.clamp(torch.minimum(lower, upper), min=0)
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]  # equal area per filter


def mel_spectrogram(
    y: torch.Tensor, mel_basis: torch.Tensor, window: torch.Tensor, n_fft: int, hop_size: int
) -> torch.Tensor:
    """Waveforms ``(B, T)`` to log-mel ``(B, n_mels, T // hop)``, as the reference's ``mel_spectrogram``."""
    pad = (n_fft - hop_size) // 2
    y = F.pad(y.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(
        y,
        n_fft,
        hop_length=hop_size,
        win_length=window.numel(),
        window=window.to(y.dtype),
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )  # (B, F, frames)
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + MAG_EPS)
    return torch.log(torch.clamp(torch.matmul(mel_basis.to(mag.dtype), mag), min=LOG_CLIP))


# -- generator ------------------------------------------------------------------------------------
def _get_padding(kernel_size: int, dilation: int = 1) -> int:
    return (kernel_size * dilation - dilation) // 2


class ResBlock1(nn.Module):
    """Per dilation: ``x + conv2(lrelu(conv1_d(lrelu(x))))``; ``(B, C, T) -> (B, C, T)``."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(
            weight_norm(nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=_get_padding(kernel_size, d)))
            for d in dilations
        )
        self.convs2 = nn.ModuleList(
            weight_norm(nn.Conv1d(channels, channels, kernel_size, padding=_get_padding(kernel_size)))
            for _ in dilations
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
            x = xt + x
        return x


class Generator(nn.Module):
    """Mel ``(B, n_mels, frames)`` -> waveform ``(B, 1, frames * prod(upsample_rates))`` in [-1, 1]."""

    def __init__(self, cfg: HiFiGANConfig) -> None:
        super().__init__()
        ch = cfg.upsample_initial_channel
        self.num_kernels = len(cfg.resblock_kernel_sizes)
        self.conv_pre = weight_norm(nn.Conv1d(cfg.num_mels, ch, 7, padding=3))
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for i, (u, k) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernel_sizes)):
            self.ups.append(weight_norm(nn.ConvTranspose1d(ch // 2**i, ch // 2 ** (i + 1), k, u, padding=(k - u) // 2)))
            self.resblocks.extend(
                ResBlock1(ch // 2 ** (i + 1), k2, d)
                for k2, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes)
            )
        self.conv_post = weight_norm(nn.Conv1d(ch // 2 ** len(cfg.upsample_rates), 1, 7, padding=3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU_SLOPE))  # (B, C / 2, T * u)
            blocks = self.resblocks[i * self.num_kernels : (i + 1) * self.num_kernels]
            x = sum(block(x) for block in blocks) / self.num_kernels  # MRF: mean of the three ResBlocks
        x = self.conv_post(F.leaky_relu(x))  # default slope 0.01, as the reference
        return torch.tanh(x)

    def remove_weight_norm(self) -> None:
        """Fold ``g v / |v|`` into plain weights, as the reference does before inference."""
        for m in self.modules():
            if parametrize.is_parametrized(m, "weight"):
                parametrize.remove_parametrizations(m, "weight")


# -- discriminators -------------------------------------------------------------------------------
class DiscriminatorP(nn.Module):
    """Waveform ``(B, 1, T)`` viewed as ``(B, 1, T / p, p)``; returns flat scores and feature maps."""

    def __init__(self, period: int, channels: tuple[int, ...], kernel_size: int = 5, stride: int = 3) -> None:
        super().__init__()
        self.period = period
        pad = (_get_padding(kernel_size), 0)
        ins = (1, *channels[:-1])
        strides = (stride,) * (len(channels) - 1) + (1,)
        self.convs = nn.ModuleList(
            weight_norm(nn.Conv2d(i, o, (kernel_size, 1), (s, 1), padding=pad))
            for i, o, s in zip(ins, channels, strides)
        )
        self.conv_post = weight_norm(nn.Conv2d(channels[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        b, c, t = x.shape
        if t % self.period:
            n_pad = self.period - t % self.period
            x = F.pad(x, (0, n_pad), "reflect")
            t += n_pad
        x = x.view(b, c, t // self.period, self.period)
        fmap = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class DiscriminatorS(nn.Module):
    """Grouped strided Conv1d stack on a waveform ``(B, 1, T)``."""

    _KERNELS = (15, 41, 41, 41, 41, 41, 5)
    _STRIDES = (1, 2, 2, 4, 4, 1, 1)

    def __init__(self, channels: tuple[int, ...], groups: tuple[int, ...], use_spectral_norm: bool = False) -> None:
        super().__init__()
        norm = spectral_norm if use_spectral_norm else weight_norm
        ins = (1, *channels[:-1])
        self.convs = nn.ModuleList(
            norm(nn.Conv1d(i, o, k, s, groups=g, padding=k // 2))
            for i, o, k, s, g in zip(ins, channels, self._KERNELS, self._STRIDES, groups)
        )
        self.conv_post = norm(nn.Conv1d(channels[-1], 1, 3, 1, padding=1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        fmap = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


_Scores = tuple[list[torch.Tensor], list[torch.Tensor], list[list[torch.Tensor]], list[list[torch.Tensor]]]


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, cfg: HiFiGANConfig) -> None:
        super().__init__()
        self.discriminators = nn.ModuleList(DiscriminatorP(p, cfg.mpd_channels) for p in cfg.periods)

    def forward(self, y: torch.Tensor, y_hat: torch.Tensor) -> _Scores:
        """Scores and feature maps of every sub-discriminator on real ``y`` and generated ``y_hat``."""
        out: _Scores = ([], [], [], [])
        for d in self.discriminators:
            _append_scores(out, d(y), d(y_hat))
        return out


def _append_scores(out: _Scores, real: tuple, fake: tuple) -> None:
    """Append one sub-discriminator's ``(score, feature maps)`` on real and generated audio to ``out``."""
    for lists, (score, fmap) in zip(((out[0], out[2]), (out[1], out[3])), (real, fake)):
        lists[0].append(score)
        lists[1].append(fmap)


class MultiScaleDiscriminator(nn.Module):
    def __init__(self, cfg: HiFiGANConfig) -> None:
        super().__init__()
        self.discriminators = nn.ModuleList(
            DiscriminatorS(cfg.msd_channels, cfg.msd_groups, use_spectral_norm=i == 0) for i in range(3)
        )
        self.meanpools = nn.ModuleList(nn.AvgPool1d(4, 2, padding=2) for _ in range(2))

    def forward(self, y: torch.Tensor, y_hat: torch.Tensor) -> _Scores:
        out: _Scores = ([], [], [], [])
        for i, d in enumerate(self.discriminators):
            if i:
                y, y_hat = self.meanpools[i - 1](y), self.meanpools[i - 1](y_hat)
            _append_scores(out, d(y), d(y_hat))
        return out


class Discriminators(nn.Module):
    def __init__(self, cfg: HiFiGANConfig) -> None:
        super().__init__()
        self.mpd = MultiPeriodDiscriminator(cfg)
        self.msd = MultiScaleDiscriminator(cfg)


# -- losses ---------------------------------------------------------------------------------------
def feature_loss(fmap_r: list[list[torch.Tensor]], fmap_g: list[list[torch.Tensor]]) -> torch.Tensor:
    """``2 * sum`` over sub-discriminators and layers of ``mean|D_l(y) - D_l(G(x))|``."""
    return 2 * sum(torch.mean(torch.abs(r - g)) for dr, dg in zip(fmap_r, fmap_g) for r, g in zip(dr, dg))


def discriminator_loss(real: list[torch.Tensor], fake: list[torch.Tensor]) -> torch.Tensor:
    """LSGAN: ``sum_k mean((1 - D_k(y))^2) + mean(D_k(G(x))^2)``."""
    return sum(torch.mean((1 - dr) ** 2) + torch.mean(dg**2) for dr, dg in zip(real, fake))


def generator_loss(fake: list[torch.Tensor]) -> torch.Tensor:
    """LSGAN: ``sum_k mean((1 - D_k(G(x)))^2)``."""
    return sum(torch.mean((1 - dg) ** 2) for dg in fake)


class HiFiGANWorkload(Workload):
    """Inputs ``(mel,)``; targets ``(audio (B, 1, T), loss log-mel (B, n_mels, frames))``."""

    needs_optimizer = False

    def __init__(
        self,
        ctx: BuildContext,
        cfg: HiFiGANConfig,
        generator: Generator,
        discriminators: Discriminators | None,
        inputs: tuple,
        targets: tuple,
    ) -> None:
        module = generator if discriminators is None else GeneratorDiscriminator(generator, discriminators)
        super().__init__(ctx, module, inputs, targets)
        self.cfg = cfg
        self.generator = generator
        self.discriminators = discriminators
        loss_basis = slaney_mel_filterbank(cfg.sampling_rate, cfg.n_fft, cfg.num_mels, cfg.fmin, cfg.fmax_for_loss)
        self.mel_basis = loss_basis.float().to(ctx.device)
        self.window = torch.hann_window(cfg.win_size, device=ctx.device)
        if discriminators is not None:
            self.optim_g = torch.optim.AdamW(generator.parameters(), cfg.lr, betas=cfg.betas)
            self.optim_d = torch.optim.AdamW(discriminators.parameters(), cfg.lr, betas=cfg.betas)

    def train_step(self) -> torch.Tensor:
        (x,), (y, y_mel) = self.inputs, self.targets
        mpd, msd = self.discriminators.mpd, self.discriminators.msd
        with self.autocast():
            y_g_hat = self.generator(x)  # (B, 1, T)
            # the STFT runs in fp32: no half-precision stft on CPU
            y_g_hat_mel = mel_spectrogram(
                y_g_hat.squeeze(1).float(), self.mel_basis, self.window, self.cfg.n_fft, self.cfg.hop_size
            )
        # discriminators
        self.optim_d.zero_grad(set_to_none=True)
        with self.autocast():
            y_df_r, y_df_g, _, _ = mpd(y, y_g_hat.detach())
            y_ds_r, y_ds_g, _, _ = msd(y, y_g_hat.detach())
            loss_disc = discriminator_loss(y_df_r, y_df_g) + discriminator_loss(y_ds_r, y_ds_g)
        loss_disc.backward()
        self.optim_d.step()
        # generator
        self.optim_g.zero_grad(set_to_none=True)
        with self.autocast():
            loss_mel = F.l1_loss(y_mel.float(), y_g_hat_mel) * self.cfg.mel_weight
            _, y_df_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
            _, y_ds_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
            loss_gen = (
                generator_loss(y_ds_g)
                + generator_loss(y_df_g)
                + feature_loss(fmap_s_r, fmap_s_g)
                + feature_loss(fmap_f_r, fmap_f_g)
                + loss_mel
            )
        loss_gen.backward()
        self.optim_g.step()
        return torch.stack([loss_disc.detach().float(), loss_gen.detach().float()])

    def forward(self) -> torch.Tensor:
        return self.generator(*self.inputs)


def synthetic_audio(ctx: BuildContext, batch: int, samples: int, sr: int, partials: int = 8) -> torch.Tensor:
    """``(B, T)`` seeded harmonic tones (f0 80-400 Hz, decaying partials) plus noise, peak 0.95."""
    t = torch.arange(samples, device=ctx.device) / sr
    f0 = 80 + 320 * ctx.rand(batch, 1, 1)
    k = torch.arange(1, partials + 1, device=ctx.device).view(1, partials, 1)
    amp = ctx.rand(batch, partials, 1) / k
    phase = 2 * math.pi * ctx.rand(batch, partials, 1)
    wave = (amp * torch.sin(2 * math.pi * f0 * k * t + phase)).sum(1) + 0.02 * ctx.randn(batch, samples)
    return 0.95 * wave / wave.abs().amax(dim=1, keepdim=True)  # librosa.util.normalize(audio) * 0.95


# Smoke: the same networks at toy width, one period (3: the reflect-padding path) of five, 256-sample segments.
_SMOKE = dict(
    num_mels=16,
    periods=(3,),
    upsample_rates=(4, 4),
    upsample_kernel_sizes=(8, 8),
    upsample_initial_channel=16,
    resblock_kernel_sizes=(3, 5),
    resblock_dilation_sizes=((1, 3), (1, 3)),
    mpd_channels=(4, 8, 16, 16, 16),
    msd_channels=(16,) * 7,
    msd_groups=(1, 4, 16, 16, 16, 16, 1),
    segment_size=256,
    n_fft=64,
    hop_size=16,
    win_size=64,
    fmax=None,
)


def _create_hifigan(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(HiFiGANConfig(), **{**(_SMOKE if ctx.smoke else {}), **kwargs})
    audio = synthetic_audio(ctx, ctx.batch_size, cfg.segment_size, cfg.sampling_rate)
    window = torch.hann_window(cfg.win_size, device=ctx.device)
    input_basis = slaney_mel_filterbank(cfg.sampling_rate, cfg.n_fft, cfg.num_mels, cfg.fmin, cfg.fmax)
    loss_basis = slaney_mel_filterbank(cfg.sampling_rate, cfg.n_fft, cfg.num_mels, cfg.fmin, cfg.fmax_for_loss)
    mel = mel_spectrogram(audio, input_basis.float().to(ctx.device), window, cfg.n_fft, cfg.hop_size)
    generator = Generator(cfg)
    if not ctx.train:
        generator.remove_weight_norm()
        return HiFiGANWorkload(ctx, cfg, generator, None, (mel,), ())
    y_mel = mel_spectrogram(audio, loss_basis.float().to(ctx.device), window, cfg.n_fft, cfg.hop_size)
    return HiFiGANWorkload(ctx, cfg, generator, Discriminators(cfg), (mel,), (audio.unsqueeze(1), y_mel))


@register_model(
    domain="speech",
    task="vocoder",
    batch_size=(16, 16),
    tags=("gan", "stft"),
    param_count=13_920_000,
    source="Kong et al., HiFi-GAN, NeurIPS 2020; jik876/hifi-gan config_v1",
    unsupported_precisions=("fp16",),
    notes="param count: the generator (eval module, weight norm removed), paper Table 1; train also "
    "holds the MPD and MSD. The mel loss's STFT runs in fp32. fp16 unsupported: pure-fp16 "
    "training goes non-finite within two smoke steps (AdamW on half weights); amp works.",
)
def hifigan_v1(ctx: BuildContext, **kwargs) -> Workload:
    """HiFi-GAN V1 generator (512 ch, upsampling 8x8x2x2, MRF 3/7/11) with MPD + MSD, LSGAN + FM + 45 x mel L1."""
    return _create_hifigan(ctx, **kwargs)
