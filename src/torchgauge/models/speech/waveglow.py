"""WaveGlow: a flow-based vocoder from mel-spectrograms to waveforms.

Prenger, Valle and Catanzaro, "WaveGlow: A Flow-based Generative Network for Speech Synthesis",
ICASSP 2019; reference implementation github.com/NVIDIA/waveglow (BSD-3-Clause), ``glow.py``,
``train.py``, ``inference.py``, ``mel2samp.py`` and ``config.json``.

Architecture as the reference: the mel ``(B, 80, frames)`` is upsampled to audio rate by
``ConvTranspose1d(80, 80, 1024, stride=256)``; audio and upsampled mel are squeezed into groups
of 8 samples (``(B, 8, T / 8)`` and ``(B, 640, T / 8)``). 12 flows, each an invertible 1x1
convolution (``Conv1d(c, c, 1)`` initialised to a random orthogonal matrix with determinant +1;
log-determinant ``B * T/8 * torch.logdet(W)``, in float32; its reverse convolves with ``W.float().inverse()``,
cached on first use as the reference's ``W_inverse``) then an affine coupling: the first half of
the channels goes through a WaveNet-like ``WN`` (weight-normalised 1x1 ``start``, 8 layers of
kernel-3 convs with dilation ``2^i``, a fused tanh * sigmoid gate added to a 1x1 conditioning
conv of the mel, weight-normalised res/skip 1x1 convs, a zero-initialised 1x1 ``end``) that gives
``(b, log s)``, and the second half becomes ``exp(log s) * x_1 + b``. Every 4 flows 2 channels
are output early (8 -> 6 -> 4 remaining). Train as ``train.py``: ``WaveGlowLoss`` (sigma 1.0)
``sum(z^2) / (2 sigma^2) - sum(log s) - sum(log det W)`` divided by the number of audio
samples, Adam lr 1e-4, 16000-sample segments at 22.05 kHz, batch 3 (``config.json``).
Eval as ``inference.py``: weight norm removed, ``infer(mel, sigma=0.6)``: Gaussian noise run
backward through the flows, early channels re-inserted as fresh noise, groups unsqueezed to
audio ``(B, frames * 256)``.

Size: ``config.json`` sets ``n_channels = 512`` (267,999,848 parameters after weight-norm
removal); the checkpoint NVIDIA publishes, and the paper's 87.88 M, are the 256-channel model,
which is the full size here: 87,879,272 parameters with the weight-norm gains (trained form),
87,731,816 after ``remove_weightnorm`` (the eval module the count is checked on, within 0.2%).
Counted from the architecture: upsample 80*80*1024 + 80; per flow with ``h`` input channels
(4, 3, 2 for flows 0-3, 4-7, 8-11) and C = 256: ``start`` C*h + C, ``end`` 2h*C + 2h, the fused
``cond_layer`` 640*2CL + 2CL, per layer ``in`` 6C^2 + 2C and ``res_skip`` 2C^2 + 2C (C^2 + C
for the last), plus the 1x1 conv's c^2; weight norm adds one gain per output channel.

Differences: ``glow.py`` at different commits spells the log-determinant ``torch.logdet(W)``
or ``torch.slogdet(W)[1]`` and conditions with one 1x1 conv per layer or one fused
``cond_layer`` sliced per layer (identical parameter counts); this follows ``torch.logdet`` and
the fused ``cond_layer``. ``W`` is cast to float32 for ``logdet`` (torch has no half-precision
``logdet``), as NVIDIA's DeepLearningExamples WaveGlow does and as the reference casts it for the
inverse; the reference trains fp16 with apex AMP (fp32 weights), so it never hit this. Weight
norm is ``torch.nn.utils.parametrizations.weight_norm`` (the reference uses the legacy hook; same
function); the gate is a plain function, not ``torch.jit.script``; the orthogonal init uses ``torch.linalg.qr`` (the
reference's ``torch.qr`` is deprecated). The affine coupling is its own module (the reference writes it inline in
``WaveGlow.forward``/``infer``). Data are synthetic: seeded harmonic tones (HiFi-GAN's helper),
their log-mel (Slaney filterbank, fmax 8 kHz, ``log(clamp(x, 1e-5))``) computed at build time
with HiFi-GAN's ``mel_spectrogram`` (``center=False`` with reflect padding: 62 frames for 16000
samples, the reference's Tacotron-2 STFT gives 63; the upsampled mel is cropped to the segment
either way). Written from the paper and the description above; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .hifigan import mel_spectrogram, slaney_mel_filterbank, synthetic_audio

__all__ = [
    "WN",
    "AffineCoupling",
    "Invertible1x1Conv",
    "WaveGlow",
    "WaveGlowConfig",
    "WaveGlowLoss",
    "fused_add_tanh_sigmoid_multiply",
    "squeeze_audio",
    "squeeze_mel",
    "unsqueeze_audio",
]


@dataclass(frozen=True)
class WaveGlowConfig:
    n_mel_channels: int = 80
    n_flows: int = 12
    n_group: int = 8  # audio samples squeezed into channels
    n_early_every: int = 4  # output channels early after every 4 flows
    n_early_size: int = 2  # channels output early each time
    n_layers: int = 8  # WN layers per coupling (dilations 1..128)
    n_channels: int = 256  # WN width: the published checkpoint (config.json: 512)
    kernel_size: int = 3
    upsample_kernel: int = 1024  # ConvTranspose1d kernel: 4 hops
    hop_length: int = 256  # ConvTranspose1d stride = the STFT hop
    filter_length: int = 1024  # n_fft
    win_length: int = 1024
    segment_length: int = 16_000  # training crop in samples
    sampling_rate: int = 22_050
    mel_fmin: float = 0.0
    mel_fmax: float = 8000.0
    sigma: float = 1.0  # prior std of WaveGlowLoss (train_config)
    infer_sigma: float = 0.6  # inference.py's default
    learning_rate: float = 1e-4


# -- squeezing audio into groups -------------------------------------------------------------------
def squeeze_audio(audio: torch.Tensor, n_group: int) -> torch.Tensor:
    """``(B, T)`` -> ``(B, n_group, T / n_group)``: channel ``j`` of group ``t`` is sample ``t * n_group + j``."""
    return audio.unfold(1, n_group, n_group).permute(0, 2, 1)


def squeeze_mel(spect: torch.Tensor, n_group: int) -> torch.Tensor:
    """``(B, M, T)`` -> ``(B, M g, T / g)``: channel ``m g + j`` of group ``t`` is ``(m, t g + j)``, ``g = n_group``."""
    spect = spect.unfold(2, n_group, n_group).permute(0, 2, 1, 3)  # (B, T / g, M, g)
    return spect.contiguous().view(spect.size(0), spect.size(1), -1).permute(0, 2, 1)


def unsqueeze_audio(audio: torch.Tensor) -> torch.Tensor:
    """``(B, n_group, T / n_group)`` -> ``(B, T)``, the inverse of :func:`squeeze_audio`."""
    return audio.permute(0, 2, 1).contiguous().view(audio.size(0), -1)


# -- flow layers -----------------------------------------------------------------------------------
class Invertible1x1Conv(nn.Module):
    """``z -> W z`` over channels with ``log|det W|`` per position; reverse convolves with ``W^-1``."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c, c, kernel_size=1, bias=False)
        w = torch.linalg.qr(torch.randn(c, c))[0]  # random orthogonal matrix: log|det W| = 0 at init
        if torch.det(w) < 0:
            w[:, 0] = -w[:, 0]  # determinant +1, not -1
        with torch.no_grad():
            self.conv.weight.copy_(w.view(c, c, 1))
        self.W_inverse: torch.Tensor | None = None  # computed on the first reverse, as the reference

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch_size, _, n_of_groups = z.shape
        w = self.conv.weight.squeeze()  # (c, c)
        log_det_w = batch_size * n_of_groups * torch.logdet(w.float())  # no half-precision logdet
        return self.conv(z), log_det_w

    def reverse(self, z: torch.Tensor) -> torch.Tensor:
        if self.W_inverse is None:
            w = self.conv.weight.squeeze()
            self.W_inverse = w.float().inverse()[..., None].to(z.dtype)  # (c, c, 1)
        return F.conv1d(z, self.W_inverse)


def fused_add_tanh_sigmoid_multiply(input_a: torch.Tensor, input_b: torch.Tensor, n_channels: int) -> torch.Tensor:
    """WaveNet's gate on ``a + b`` ``(B, 2C, T)``: ``tanh(first C channels) * sigmoid(last C)``."""
    in_act = input_a + input_b
    return torch.tanh(in_act[:, :n_channels]) * torch.sigmoid(in_act[:, n_channels:])


class WN(nn.Module):
    """Non-causal WaveNet: ``(x (B, h, N), mel (B, M g, N))`` -> ``(B, 2h, N)`` (``b`` then ``log s``)."""

    def __init__(
        self, n_in_channels: int, n_mel_channels: int, n_layers: int, n_channels: int, kernel_size: int
    ) -> None:
        super().__init__()
        assert kernel_size % 2 == 1 and n_channels % 2 == 0
        self.n_layers, self.n_channels = n_layers, n_channels
        self.start = weight_norm(nn.Conv1d(n_in_channels, n_channels, 1))
        # zero end: every coupling starts as the identity, for training stability
        self.end = nn.Conv1d(n_channels, 2 * n_in_channels, 1)
        nn.init.zeros_(self.end.weight)
        nn.init.zeros_(self.end.bias)
        # one 1x1 conv conditions all layers; layer i reads channels [2Ci, 2C(i+1))
        self.cond_layer = weight_norm(nn.Conv1d(n_mel_channels, 2 * n_channels * n_layers, 1))
        self.in_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()
        for i in range(n_layers):
            dilation = 2**i
            padding = (kernel_size * dilation - dilation) // 2
            self.in_layers.append(
                weight_norm(nn.Conv1d(n_channels, 2 * n_channels, kernel_size, dilation=dilation, padding=padding))
            )
            res_skip = 2 * n_channels if i < n_layers - 1 else n_channels  # the last layer has no residual
            self.res_skip_layers.append(weight_norm(nn.Conv1d(n_channels, res_skip, 1)))

    def forward(self, audio: torch.Tensor, spect: torch.Tensor) -> torch.Tensor:
        c = self.n_channels
        audio = self.start(audio)  # (B, C, N)
        output = torch.zeros_like(audio)
        spect = self.cond_layer(spect)  # (B, 2 C L, N)
        for i, (in_layer, res_skip_layer) in enumerate(zip(self.in_layers, self.res_skip_layers)):
            acts = fused_add_tanh_sigmoid_multiply(in_layer(audio), spect[:, 2 * c * i : 2 * c * (i + 1)], c)
            res_skip_acts = res_skip_layer(acts)
            if i < self.n_layers - 1:
                audio = audio + res_skip_acts[:, :c]
                output = output + res_skip_acts[:, c:]
            else:
                output = output + res_skip_acts
        return self.end(output)


class AffineCoupling(nn.Module):
    """``(x_0, x_1) -> (x_0, exp(log s) x_1 + b)`` with ``(b, log s) = WN(x_0, mel)``; ``(B, 2h, N)``."""

    def __init__(self, n_half: int, n_cond: int, cfg: WaveGlowConfig) -> None:
        super().__init__()
        self.wn = WN(n_half, n_cond, cfg.n_layers, cfg.n_channels, cfg.kernel_size)

    def forward(self, audio: torch.Tensor, spect: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n_half = audio.size(1) // 2
        audio_0, audio_1 = audio[:, :n_half], audio[:, n_half:]
        output = self.wn(audio_0, spect)
        b, log_s = output[:, :n_half], output[:, n_half:]
        return torch.cat([audio_0, torch.exp(log_s) * audio_1 + b], 1), log_s

    def reverse(self, audio: torch.Tensor, spect: torch.Tensor) -> torch.Tensor:
        n_half = audio.size(1) // 2
        audio_0, audio_1 = audio[:, :n_half], audio[:, n_half:]
        output = self.wn(audio_0, spect)
        b, s = output[:, :n_half], output[:, n_half:]
        return torch.cat([audio_0, (audio_1 - b) / torch.exp(s)], 1)


class WaveGlow(nn.Module):
    """Train: ``(mel (B, M, frames), audio (B, T))`` -> ``(z (B, g, T / g), [log s], [log det W])``."""

    def __init__(self, cfg: WaveGlowConfig) -> None:
        super().__init__()
        assert cfg.n_group % 2 == 0
        self.cfg = cfg
        m, g = cfg.n_mel_channels, cfg.n_group
        self.upsample = nn.ConvTranspose1d(m, m, cfg.upsample_kernel, stride=cfg.hop_length)
        self.convinv = nn.ModuleList()
        self.couplings = nn.ModuleList()
        n_remaining = g
        for k in range(cfg.n_flows):
            if k % cfg.n_early_every == 0 and k > 0:
                n_remaining -= cfg.n_early_size
            self.convinv.append(Invertible1x1Conv(n_remaining))
            self.couplings.append(AffineCoupling(n_remaining // 2, m * g, cfg))
        self.n_remaining_channels = n_remaining  # channels left after the last early output

    def _is_early(self, k: int) -> bool:
        return k % self.cfg.n_early_every == 0 and k > 0

    def forward(self, spect: torch.Tensor, audio: torch.Tensor) -> tuple[torch.Tensor, list, list]:
        g = self.cfg.n_group
        spect = self.upsample(spect)  # (B, M, (frames - 1) hop + kernel)
        assert spect.size(2) >= audio.size(1)
        spect = squeeze_mel(spect[:, :, : audio.size(1)], g)  # (B, M g, T / g)
        audio = squeeze_audio(audio, g)  # (B, g, T / g)
        output_audio, log_s_list, log_det_w_list = [], [], []
        for k, (convinv, coupling) in enumerate(zip(self.convinv, self.couplings)):
            if self._is_early(k):
                output_audio.append(audio[:, : self.cfg.n_early_size])
                audio = audio[:, self.cfg.n_early_size :]
            audio, log_det_w = convinv(audio)
            audio, log_s = coupling(audio, spect)
            log_det_w_list.append(log_det_w)
            log_s_list.append(log_s)
        output_audio.append(audio)
        return torch.cat(output_audio, 1), log_s_list, log_det_w_list

    def infer(self, spect: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
        """Mel ``(B, M, frames)`` -> audio ``(B, frames * hop)`` sampled at temperature ``sigma``."""
        spect = self.upsample(spect)
        time_cutoff = self.upsample.kernel_size[0] - self.upsample.stride[0]  # trim the transposed conv's tail
        spect = squeeze_mel(spect[:, :, :-time_cutoff], self.cfg.n_group)  # (B, M g, N)
        b, n = spect.size(0), spect.size(2)
        audio = sigma * torch.randn(b, self.n_remaining_channels, n, device=spect.device, dtype=spect.dtype)
        for k in reversed(range(self.cfg.n_flows)):
            audio = self.couplings[k].reverse(audio, spect)
            audio = self.convinv[k].reverse(audio)
            if self._is_early(k):
                z = torch.randn(b, self.cfg.n_early_size, n, device=spect.device, dtype=spect.dtype)
                audio = torch.cat((sigma * z, audio), 1)
        return unsqueeze_audio(audio)

    def remove_weightnorm(self) -> None:
        """Fold ``g v / |v|`` into plain weights, as ``inference.py`` does before synthesis."""
        for m in self.modules():
            if parametrize.is_parametrized(m, "weight"):
                parametrize.remove_parametrizations(m, "weight")


class WaveGlowLoss(nn.Module):
    """Negative log-likelihood per audio sample: ``(sum z^2 / 2 sigma^2 - sum log s - sum log det W) / numel(z)``."""

    def __init__(self, sigma: float = 1.0) -> None:
        super().__init__()
        self.sigma = sigma

    def forward(self, model_output: tuple[torch.Tensor, list, list]) -> torch.Tensor:
        z, log_s_list, log_det_w_list = model_output
        log_s_total = sum(torch.sum(log_s) for log_s in log_s_list)
        log_det_w_total = sum(log_det_w_list)
        loss = torch.sum(z * z) / (2 * self.sigma * self.sigma) - log_s_total - log_det_w_total
        return loss / (z.size(0) * z.size(1) * z.size(2))


class WaveGlowWorkload(Workload):
    """Train inputs ``(mel, audio)`` into the flow, loss = WaveGlowLoss; eval inputs ``(mel,)`` into ``infer``."""

    def __init__(self, ctx: BuildContext, model: WaveGlow, inputs: tuple) -> None:
        opt = torch.optim.Adam(model.parameters(), lr=model.cfg.learning_rate) if ctx.train else None
        super().__init__(ctx, model, inputs, optimizer=opt)
        self.criterion = WaveGlowLoss(model.cfg.sigma)

    def forward(self):
        if self.ctx.train:
            return self.module(*self.inputs)
        return self.module.infer(*self.inputs, sigma=self.module.cfg.infer_sigma)

    def compute_loss(self, outputs) -> torch.Tensor:
        return self.criterion(outputs)


# Smoke: the same flow (early outputs included) at toy width, 4 flows, 256-sample segments.
_SMOKE = dict(
    n_mel_channels=8,
    n_flows=4,
    n_early_every=2,
    n_layers=2,
    n_channels=8,
    upsample_kernel=64,
    hop_length=16,
    filter_length=64,
    win_length=64,
    segment_length=256,
    mel_fmax=None,
)


def _create_waveglow(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(WaveGlowConfig(), **{**(_SMOKE if ctx.smoke else {}), **kwargs})
    audio = synthetic_audio(ctx, ctx.batch_size, cfg.segment_length, cfg.sampling_rate)  # (B, T) in [-1, 1]
    basis = slaney_mel_filterbank(cfg.sampling_rate, cfg.filter_length, cfg.n_mel_channels, cfg.mel_fmin, cfg.mel_fmax)
    window = torch.hann_window(cfg.win_length, device=ctx.device)
    mel = mel_spectrogram(audio, basis.float().to(ctx.device), window, cfg.filter_length, cfg.hop_length)
    model = WaveGlow(cfg)
    if ctx.train:
        return WaveGlowWorkload(ctx, model, (mel, audio))
    model.remove_weightnorm()
    return WaveGlowWorkload(ctx, model, (mel,))


@register_model(
    domain="speech",
    task="vocoder",
    batch_size=(3, 1),
    tags=("flow", "generation"),
    param_count=87_879_272,
    source="Prenger et al., WaveGlow, ICASSP 2019; NVIDIA/waveglow glow.py (BSD-3-Clause)",
    notes="param count: the 256-channel published model with weight-norm gains (paper 87.88 M), "
    "computed from the architecture; the eval module (weight norm removed) has 87,731,816. "
    "config.json's n_channels=512 would be 268.0 M. Eval: infer(mel, sigma=0.6), W^-1 cached "
    "on the first call as the reference. fp16 unsupported: pure-fp16 training goes NaN within "
    "13 smoke steps (Adam on half weights; the reference trains fp16 with apex AMP); amp and bf16 "
    "work.",
    unsupported_precisions=("fp16",),
)
def waveglow(ctx: BuildContext, **kwargs) -> Workload:
    """WaveGlow (12 flows, groups of 8, WN 8 x 256 channels) trained by its flow NLL; eval samples audio."""
    return _create_waveglow(ctx, **kwargs)
