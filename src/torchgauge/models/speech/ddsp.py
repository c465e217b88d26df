"""DDSP autoencoder (solo instrument): a recurrent decoder driving differentiable synthesizers.

Engel, Hantrakul, Gu and Roberts, "DDSP: Differentiable Digital Signal Processing", ICLR 2020;
reference implementation github.com/magenta/ddsp (Apache-2.0), ``gin/models/solo_instrument.gin``,
``training/decoders.py`` (``RnnFcDecoder``), ``synths.py`` (``Harmonic``, ``FilteredNoise``),
``effects.py`` (``Reverb``), ``core.py``, ``losses.py`` (``SpectralLoss``) and
``spectral_ops.py`` (``compute_loudness``); PyTorch port for comparison: acids-ircam/ddsp_pytorch.

Model as ``solo_instrument.gin``: 4 s at 16 kHz (64,000 samples), features at 250 Hz (1,000
frames). F0 (Hz) and loudness (dB) are scaled as ``F0LoudnessPreprocessor`` (MIDI / 127,
dB / 80 + 1); each goes through its own stack of 3 x (Dense 512, LayerNorm, leaky ReLU 0.2), the
concatenation through a GRU (512), the GRU output concatenated with both stacks through a third
stack, then a Dense to 1 overall amplitude + 60 harmonic weights + 65 noise magnitudes.
Synthesis: ``exp_sigmoid`` scaling; the harmonic synthesizer zeroes harmonics at or above Nyquist,
normalises the distribution, upsamples frequencies linearly and amplitudes by overlapping Hann
windows (``upsample_with_windows``), accumulates phase by ``cumsum`` and sums the sinusoids; the
filtered-noise synthesizer turns the 65 magnitudes into zero-phase FIR filters (``irfft``,
Hann-windowed, ``fftshift`` to causal form) and convolves frames of uniform noise with them in the
frequency domain (``rfft``/``irfft``, overlap-add, delay compensation); a trainable 48,000-tap
reverb (dry tap masked, ``add_dry``) is applied by one long FFT convolution. Loss: the
multi-scale spectral loss (FFT sizes 2048 ... 64, 75% overlap, L1 of magnitudes plus L1 of
``log(max(mag, 1e-5))``). Adam, lr 3e-4, gradients clipped to global norm 3, batch 32
(``optimization/base.gin``).

Loudness is computed at build time, as the reference's dataset preparation does (A-weighted
power of a 512-point STFT, mean over bins, dB floored at -120), from a synthetic waveform: a
harmonic tone following a seeded vibrato f0 contour, with a loudness envelope and some noise.
Differences: linear resampling uses ``F.interpolate`` (half-pixel centres; TF1's resize,
which the reference calls, samples at ``i * in / out``); the reference's learning-rate decay is
outside the timed step. Written from the paper and the description above; no code copied.
4,849,150 parameters (counted from the configuration; the paper gives none for this model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = [
    "DDSPAutoencoder",
    "DDSPConfig",
    "a_weighting_db",
    "compute_loudness",
    "exp_sigmoid",
    "fft_convolve",
    "frequency_impulse_response",
    "harmonic_synthesis",
    "multiscale_spectral_loss",
    "overlap_and_add",
    "upsample_with_windows",
]

F0_RANGE = 127.0  # MIDI notes: f0_scaled = midi / 127
DB_RANGE = 80.0  # loudness scaling: ld / 80 + 1
LD_RANGE = 120.0  # compute_loudness floors dB here
LOG_EPS = 1e-5  # spectral_ops.safe_log
DIVIDE_EPS = 1e-7  # core.safe_divide


@dataclass(frozen=True)
class DDSPConfig:
    sample_rate: int = 16_000
    n_samples: int = 64_000  # 4 s
    frame_rate: int = 250  # feature frames per second (hop 64)
    ch: int = 512  # width of the Dense layers
    layers_per_stack: int = 3
    rnn_channels: int = 512
    n_harmonics: int = 60
    n_noise_magnitudes: int = 65  # filter size 2 * (65 - 1) = 128 taps
    noise_initial_bias: float = -5.0
    reverb_length: int = 48_000  # 3 s
    fft_sizes: tuple[int, ...] = (2048, 1024, 512, 256, 128, 64)
    loudness_n_fft: int = 512
    lr: float = 3e-4
    grad_clip_norm: float = 3.0

    @property
    def n_frames(self) -> int:
        return self.n_samples * self.frame_rate // self.sample_rate


# -- DSP building blocks (core.py) ----------------------------------------------------------------
def exp_sigmoid(
    x: torch.Tensor, exponent: float = 10.0, max_value: float = 2.0, threshold: float = 1e-7
) -> torch.Tensor:
    """``max_value * sigmoid(x) ** log(exponent) + threshold``: positive, with a slow tail."""
    return max_value * torch.sigmoid(x) ** math.log(exponent) + threshold


def hz_to_midi(hz: torch.Tensor) -> torch.Tensor:
    """``12 (log2 f - log2 440) + 69``, and 0 where ``f <= 0``."""
    notes = 12 * (torch.log2(hz.clamp_min(1e-7)) - math.log2(440.0)) + 69.0
    return torch.where(hz <= 0, torch.zeros_like(notes), notes)


def overlap_and_add(frames: torch.Tensor, hop: int) -> torch.Tensor:
    """``(..., N, L)`` frames summed at offsets ``0, hop, 2 hop, ...`` -> ``(..., (N - 1) hop + L)``."""
    *lead, n, length = frames.shape
    out_len = (n - 1) * hop + length
    x = frames.reshape(-1, n, length).transpose(1, 2)  # (M, L, N): fold's (C * kh * kw, blocks)
    out = F.fold(x, output_size=(1, out_len), kernel_size=(1, length), stride=(1, hop))
    return out.reshape(*lead, out_len)


def upsample_with_windows(x: torch.Tensor, n_timesteps: int) -> torch.Tensor:
    """Frames ``(B, N, C)`` to ``(B, n_timesteps, C)`` by overlapping Hann windows (``add_endpoint``)."""
    if n_timesteps % x.size(1):
        raise ValueError(f"{n_timesteps} samples are not a whole number of hops for {x.size(1)} frames")
    x = torch.cat([x, x[:, -1:]], dim=1)  # repeat the last frame: N intervals
    hop = n_timesteps // (x.size(1) - 1)
    window = torch.hann_window(2 * hop, dtype=x.dtype, device=x.device)
    windowed = x.transpose(1, 2)[..., None] * window  # (B, C, N + 1, 2 hop)
    return overlap_and_add(windowed, hop)[..., hop:-hop].transpose(1, 2)


def linear_resample(x: torch.Tensor, n_timesteps: int) -> torch.Tensor:
    """Frames ``(B, N, C)`` to ``(B, n_timesteps, C)`` by linear interpolation."""
    return F.interpolate(x.transpose(1, 2), size=n_timesteps, mode="linear", align_corners=False).transpose(1, 2)


def harmonic_synthesis(f0_hz: torch.Tensor, amplitudes: torch.Tensor, sample_rate: int, n_samples: int) -> torch.Tensor:
    """Sum of harmonics of ``f0_hz`` ``(B, N, 1)`` with per-harmonic amplitudes ``(B, N, K)`` -> ``(B, n_samples)``."""
    k = torch.arange(1, amplitudes.size(-1) + 1, dtype=f0_hz.dtype, device=f0_hz.device)
    frequency_envelopes = linear_resample(f0_hz * k, n_samples)  # (B, T, K) Hz
    amplitude_envelopes = upsample_with_windows(amplitudes, n_samples)
    # oscillator_bank: silence anything at or above Nyquist, then integrate the angular frequency
    amplitude_envelopes = torch.where(frequency_envelopes >= sample_rate / 2, 0.0, amplitude_envelopes)
    phases = torch.cumsum(2 * math.pi * frequency_envelopes / sample_rate, dim=1)
    return (amplitude_envelopes * torch.sin(phases)).sum(-1)


def frequency_impulse_response(magnitudes: torch.Tensor) -> torch.Tensor:
    """Zero-phase magnitudes ``(B, N, F)`` to causal Hann-windowed FIR filters ``(B, N, 2 (F - 1))``."""
    ir = torch.fft.irfft(torch.complex(magnitudes, torch.zeros_like(magnitudes)))  # zero-phase form
    window = torch.fft.fftshift(torch.hann_window(ir.size(-1), dtype=ir.dtype, device=ir.device))
    return torch.fft.fftshift(ir * window, dim=-1)  # causal form, delay (size - 1) // 2


def fft_convolve(audio: torch.Tensor, ir: torch.Tensor, delay_compensation: int = -1) -> torch.Tensor:
    """Convolve ``audio`` ``(B, T)`` framewise with ``ir`` ``(B, N, L)`` (one filter per frame), 'same' size."""
    b, n_samples = audio.shape
    n_frames, ir_size = ir.shape[1:]
    frame_size = math.ceil(n_samples / n_frames)
    frames = F.pad(audio, (0, n_frames * frame_size - n_samples)).view(b, n_frames, frame_size)
    fft_size = 2 ** math.ceil(math.log2(frame_size + ir_size - 1))
    out = torch.fft.irfft(torch.fft.rfft(frames, fft_size) * torch.fft.rfft(ir, fft_size), fft_size)
    out = overlap_and_add(out, frame_size)  # (B, (N - 1) frame + fft_size)
    start = (ir_size - 1) // 2 - 1 if delay_compensation < 0 else delay_compensation
    return out[:, start : start + n_samples]


# -- model --------------------------------------------------------------------------------------
def _fc_stack(in_features: int, ch: int, layers: int) -> nn.Sequential:
    """ddsp's ``fc_stack``: ``layers x (Dense, LayerNorm, leaky ReLU 0.2)``; Keras LayerNorm eps 1e-3."""
    mods: list[nn.Module] = []
    for i in range(layers):
        mods += [nn.Linear(in_features if i == 0 else ch, ch), nn.LayerNorm(ch, eps=1e-3), nn.LeakyReLU(0.2)]
    return nn.Sequential(*mods)


class DDSPAutoencoder(nn.Module):
    """``(f0_hz (B, N, 1), loudness_db (B, N, 1))`` -> audio ``(B, n_samples)``."""

    def __init__(self, cfg: DDSPConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.f0_stack = _fc_stack(1, cfg.ch, cfg.layers_per_stack)
        self.ld_stack = _fc_stack(1, cfg.ch, cfg.layers_per_stack)
        self.rnn = nn.GRU(2 * cfg.ch, cfg.rnn_channels, batch_first=True)
        self.out_stack = _fc_stack(2 * cfg.ch + cfg.rnn_channels, cfg.ch, cfg.layers_per_stack)
        self.dense_out = nn.Linear(cfg.ch, 1 + cfg.n_harmonics + cfg.n_noise_magnitudes)
        self.reverb_ir = nn.Parameter(torch.randn(cfg.reverb_length) * 1e-6)

    def decode(self, f0_hz: torch.Tensor, loudness_db: torch.Tensor) -> torch.Tensor:
        """Features to controls ``(B, N, 1 + n_harmonics + n_noise)`` (RnnFcDecoder)."""
        f0_scaled = hz_to_midi(f0_hz) / F0_RANGE
        ld_scaled = loudness_db / DB_RANGE + 1.0
        stacks = [self.f0_stack(f0_scaled), self.ld_stack(ld_scaled)]
        x, _ = self.rnn(torch.cat(stacks, dim=-1))
        return self.dense_out(self.out_stack(torch.cat(stacks + [x], dim=-1)))

    def forward(self, f0_hz: torch.Tensor, loudness_db: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        # the synthesizers run in fp32, as the reference's core functions cast with tf_float32
        controls = self.decode(f0_hz, loudness_db).float()
        amps, dist, noise = controls.split([1, cfg.n_harmonics, cfg.n_noise_magnitudes], dim=-1)
        f0_hz = f0_hz.float()
        # Harmonic: exp_sigmoid, drop harmonics above Nyquist, normalise the distribution
        k = torch.arange(1, cfg.n_harmonics + 1, device=f0_hz.device)
        dist = torch.where(f0_hz * k >= cfg.sample_rate / 2, 0.0, exp_sigmoid(dist))
        dist = dist / dist.sum(-1, keepdim=True).clamp_min(DIVIDE_EPS)
        harmonic = harmonic_synthesis(f0_hz, exp_sigmoid(amps) * dist, cfg.sample_rate, cfg.n_samples)
        # FilteredNoise: uniform noise through one FIR filter per frame
        magnitudes = exp_sigmoid(noise + cfg.noise_initial_bias)
        white = torch.rand(f0_hz.size(0), cfg.n_samples, device=f0_hz.device) * 2 - 1
        filtered = fft_convolve(white, frequency_impulse_response(magnitudes))
        dry = harmonic + filtered
        # Reverb: mask the dry tap of the learned impulse response, one long convolution, add the dry signal
        ir = torch.cat([self.reverb_ir.new_zeros(1), self.reverb_ir[1:]]).float().expand(dry.size(0), 1, -1)
        return dry + fft_convolve(dry, ir, delay_compensation=0)


def _magnitudes(audio: torch.Tensor, n_fft: int, overlap: float = 0.75) -> torch.Tensor:
    """|STFT| ``(B, F, frames)`` with a periodic Hann window and zero padding at the end (``pad_end``)."""
    hop = int(n_fft * (1 - overlap))
    n_frames = -(-audio.size(-1) // hop)
    audio = F.pad(audio, (0, (n_frames - 1) * hop + n_fft - audio.size(-1)))
    window = torch.hann_window(n_fft, dtype=audio.dtype, device=audio.device)
    return torch.stft(audio, n_fft, hop, window=window, center=False, return_complex=True).abs()


def multiscale_spectral_loss(target: torch.Tensor, audio: torch.Tensor, fft_sizes: tuple[int, ...]) -> torch.Tensor:
    """``sum_n mean|S_n(y) - S_n(x)| + mean|log S_n(y) - log S_n(x)|`` over FFT sizes ``n``."""
    loss = audio.new_zeros(())
    for n_fft in fft_sizes:
        t, v = _magnitudes(target, n_fft), _magnitudes(audio, n_fft)
        loss = loss + torch.mean(torch.abs(t - v))
        loss = loss + torch.mean(torch.abs(torch.log(t.clamp_min(LOG_EPS)) - torch.log(v.clamp_min(LOG_EPS))))
    return loss


# -- data (the reference's dataset preparation) ------------------------------------------------
def a_weighting_db(freqs: torch.Tensor, min_db: float = -80.0) -> torch.Tensor:
    """IEC 61672 A-weighting in dB (librosa.A_weighting), floored at ``min_db``."""
    c = torch.tensor([12194.217, 20.598997, 107.65265, 737.86223], dtype=freqs.dtype, device=freqs.device) ** 2
    f_sq = freqs**2
    db = 2.0 + 20.0 * (
        torch.log10(c[0])
        + 2 * torch.log10(f_sq)
        - torch.log10(f_sq + c[0])
        - torch.log10(f_sq + c[1])
        - 0.5 * torch.log10(f_sq + c[2])
        - 0.5 * torch.log10(f_sq + c[3])
    )
    return db.clamp_min(min_db)


def compute_loudness(audio: torch.Tensor, sample_rate: int, frame_rate: int, n_fft: int = 512) -> torch.Tensor:
    """A-weighted loudness in dB ``(B, T * frame_rate / sample_rate)`` of ``audio`` ``(B, T)``."""
    hop = sample_rate // frame_rate
    pad = (n_fft - hop) // 2  # centre each frame on its timestamp
    audio = F.pad(audio, (pad, pad))
    window = torch.hann_window(n_fft, dtype=audio.dtype, device=audio.device)
    power = torch.stft(audio, n_fft, hop, window=window, center=False, return_complex=True).abs() ** 2  # (B, F, N)
    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=audio.dtype, device=audio.device)
    weighted = power * 10 ** (a_weighting_db(freqs) / 10)[:, None]
    avg = weighted.mean(dim=1).clamp_min(10 ** (-LD_RANGE / 10))
    return (10 * torch.log10(avg)).clamp_min(-LD_RANGE)


def synthetic_note(ctx: BuildContext, cfg: DDSPConfig, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded f0 ``(B, N, 1)``, loudness ``(B, N, 1)`` and audio ``(B, T)``: vibrato notes with an envelope."""
    n, t = cfg.n_frames, torch.arange(cfg.n_frames, device=ctx.device) / cfg.frame_rate
    midi = 45 + 30 * ctx.rand(batch, 1)  # A2 .. D#5
    vibrato = 0.3 * torch.sin(2 * math.pi * (5 + ctx.rand(batch, 1)) * t)
    f0 = (440.0 * 2 ** ((midi + vibrato - 69) / 12)).unsqueeze(-1)  # (B, N, 1)
    envelope = torch.sin(math.pi * (t + 0.05) / (t[-1] + 0.1)) ** 2  # rises and decays over the clip
    partials = 12
    rolloff = torch.arange(1, partials + 1, device=ctx.device) ** 1.5
    amps = (envelope[None, :, None] / rolloff).expand(batch, n, partials)
    audio = 0.3 * harmonic_synthesis(f0, amps.contiguous(), cfg.sample_rate, cfg.n_samples)
    audio = audio + 0.01 * ctx.randn(batch, cfg.n_samples)
    loudness = compute_loudness(audio, cfg.sample_rate, cfg.frame_rate, cfg.loudness_n_fft).unsqueeze(-1)
    return f0, loudness, audio


class DDSPWorkload(Workload):
    """Multi-scale spectral loss; the reference clips the gradient norm at ``grad_clip_norm``."""

    @property
    def max_grad_norm(self) -> float:
        return self.module.cfg.grad_clip_norm

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return multiscale_spectral_loss(self.targets.float(), outputs, self.module.cfg.fft_sizes)


_SMOKE = dict(
    n_samples=1600, ch=16, rnn_channels=16, n_harmonics=8, n_noise_magnitudes=9, reverb_length=800, fft_sizes=(256, 64)
)


def _create_ddsp(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(DDSPConfig(), **{**(_SMOKE if ctx.smoke else {}), **kwargs})
    f0, loudness, audio = synthetic_note(ctx, cfg, ctx.batch_size)
    model = DDSPAutoencoder(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr) if ctx.train else None
    return DDSPWorkload(ctx, model, (f0, loudness), audio, optimizer=opt)


@register_model(
    domain="speech",
    task="audio_synthesis",
    batch_size=(32, 32),
    tags=("fft", "dsp"),
    source="Engel et al., DDSP, ICLR 2020; magenta/ddsp solo_instrument.gin",
    unsupported_precisions=("fp16",),
    notes="synthesizers and spectral loss run in fp32 (as the reference); loudness computed at build time. "
    "fp16 unsupported: pure-fp16 training goes non-finite within two smoke steps; amp works.",
)
def ddsp_autoencoder(ctx: BuildContext, **kwargs) -> Workload:
    """DDSP solo-instrument autoencoder: f0 + loudness -> GRU decoder -> harmonic + filtered noise + reverb."""
    return _create_ddsp(ctx, **kwargs)
