"""WaveNet: an autoregressive model of raw audio over 256 mu-law classes, unconditioned.

van den Oord et al., "WaveNet: A Generative Model for Raw Audio", 2016. The configuration and
training recipe follow github.com/ibab/tensorflow-wavenet (MIT; ``wavenet_params.json``,
``wavenet/model.py``, ``wavenet/ops.py``, ``generate.py``), a widely used open implementation of
the paper's mu-law model: the waveform is mu-law companded and quantised to 256 classes
(``sign(x) log1p(mu |x|) / log1p(mu)``, mu = 255), one-hot encoded, fed to a causal width-2
convolution (256 -> 32 channels, no bias), then 50 gated residual layers with dilations
1, 2, ..., 512 repeated 5 times (separate filter and gate convs of width 2, ``tanh(f) *
sigmoid(g)``, a 1x1 dense conv added to the residual, a 1x1 skip conv to 512 channels), and the
summed skips go through ReLU, 1x1 conv 512, ReLU, 1x1 conv 256. Convolutions are "valid", so
the output covers the samples after the receptive field (5,117 samples); the loss is softmax
cross-entropy of each output against the next quantised sample, averaged. Adam, lr 1e-3,
batch 1, 100,000-sample pieces (plus the receptive field), as ``train.py``.

Eval is ``generate.py``'s fast generation (Paine et al., "Fast Wavenet Generation Algorithm",
2016): each layer keeps a FIFO queue of its last ``dilation`` inputs, so one new sample costs one
matrix product per tap and layer; the next sample is drawn from the softmax (temperature 1) and
the generated classes are mu-law decoded to [-1, 1]. Here the queues are Python deques of
``(B, C)`` tensors (the reference uses ``tf.FIFOQueue``), and ``torch.multinomial`` replaces
``np.random.choice``. Differences: the reference trims silence from its VCTK clips and can add
global (speaker) conditioning; neither is used. Written from the paper and the description
above; no code copied. 1,515,968 parameters (counted from the configuration; the reference
publishes none).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .hifigan import synthetic_audio

__all__ = ["WaveNet", "WaveNetConfig", "mu_law_decode", "mu_law_encode"]

SAMPLE_RATE = 16_000  # the reference's wavenet_params.json


@dataclass(frozen=True)
class WaveNetConfig:
    dilations: tuple[int, ...] = tuple(2**i for i in range(10)) * 5  # 1..512, five stacks
    filter_width: int = 2  # fast generation needs width 2, as the reference's
    residual_channels: int = 32
    dilation_channels: int = 32
    skip_channels: int = 512
    quantization_channels: int = 256  # 8-bit mu-law
    use_biases: bool = True
    sample_size: int = 100_000  # training piece length, plus the receptive field
    generate_samples: int = 512  # eval: samples drawn one at a time (32 ms at 16 kHz)


def mu_law_encode(audio: torch.Tensor, channels: int) -> torch.Tensor:
    """Waveform in [-1, 1] to integer classes ``[0, channels)``: ``sign(x) log1p(mu |x|) / log1p(mu)``."""
    mu = channels - 1
    magnitude = torch.log1p(mu * torch.clamp(torch.abs(audio), max=1.0)) / math.log1p(mu)
    signal = torch.sign(audio) * magnitude
    return ((signal + 1) / 2 * mu + 0.5).long()


def mu_law_decode(output: torch.Tensor, channels: int) -> torch.Tensor:
    """Classes back to [-1, 1]: the inverse of :func:`mu_law_encode` up to quantisation."""
    mu = channels - 1
    signal = 2 * (output.float() / mu) - 1
    magnitude = ((1 + mu) ** torch.abs(signal) - 1) / mu
    return torch.sign(signal) * magnitude


def _tap(conv: nn.Conv1d, past: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """One output sample of a width-2 conv from its two inputs ``(B, Cin)``: ``W0 past + W1 current + b``."""
    return F.linear(past, conv.weight[:, :, 0]) + F.linear(current, conv.weight[:, :, 1], conv.bias)


class ResidualLayer(nn.Module):
    """Gated dilated layer: ``(B, R, T) -> skip (B, S, W), residual (B, R, T - dilation)``."""

    def __init__(self, cfg: WaveNetConfig, dilation: int) -> None:
        super().__init__()
        r, d, s, k, bias = (
            cfg.residual_channels,
            cfg.dilation_channels,
            cfg.skip_channels,
            cfg.filter_width,
            cfg.use_biases,
        )
        self.dilation = dilation
        self.filter = nn.Conv1d(r, d, k, dilation=dilation, bias=bias)
        self.gate = nn.Conv1d(r, d, k, dilation=dilation, bias=bias)
        self.dense = nn.Conv1d(d, r, 1, bias=bias)
        self.skip = nn.Conv1d(d, s, 1, bias=bias)

    def forward(self, x: torch.Tensor, output_width: int) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.tanh(self.filter(x)) * torch.sigmoid(self.gate(x))  # "valid": (B, D, T - dilation)
        skip = self.skip(out[:, :, -output_width:])
        return skip, x[:, :, -out.size(2) :] + self.dense(out)

    def step(self, x: torch.Tensor, past: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One time step: current input and the one ``dilation`` steps back, both ``(B, R)``."""
        out = torch.tanh(_tap(self.filter, past, x)) * torch.sigmoid(_tap(self.gate, past, x))  # (B, D)
        return F.linear(out, self.skip.weight[:, :, 0], self.skip.bias), x + F.linear(
            out, self.dense.weight[:, :, 0], self.dense.bias
        )


class WaveNet(nn.Module):
    def __init__(self, cfg: WaveNetConfig) -> None:
        super().__init__()
        if cfg.filter_width != 2:
            raise ValueError("fast generation (FIFO queues of one past input per layer) needs filter_width 2")
        self.cfg = cfg
        q = cfg.quantization_channels
        self.causal = nn.Conv1d(q, cfg.residual_channels, cfg.filter_width, bias=False)
        self.layers = nn.ModuleList(ResidualLayer(cfg, d) for d in cfg.dilations)
        self.postprocess1 = nn.Conv1d(cfg.skip_channels, cfg.skip_channels, 1, bias=cfg.use_biases)
        self.postprocess2 = nn.Conv1d(cfg.skip_channels, q, 1, bias=cfg.use_biases)
        self.receptive_field = (cfg.filter_width - 1) * (sum(cfg.dilations) + 1) + 1

    def forward(self, encoded: torch.Tensor) -> torch.Tensor:
        """Classes ``(B, T)`` -> logits ``(B, Q, T - receptive_field)`` for classes ``[receptive_field, T)``."""
        x = F.one_hot(encoded[:, :-1], self.cfg.quantization_channels).transpose(1, 2).to(self.causal.weight.dtype)
        output_width = x.size(2) - self.receptive_field + 1
        h = self.causal(x)
        skips = 0
        for layer in self.layers:
            skip, h = layer(h, output_width)
            skips = skips + skip
        return self.postprocess2(F.relu(self.postprocess1(F.relu(skips))))

    def loss(self, audio: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of each prediction against the next mu-law class of ``audio`` ``(B, T)``."""
        encoded = mu_law_encode(audio, self.cfg.quantization_channels)
        logits = self(encoded)
        return F.cross_entropy(logits, encoded[:, self.receptive_field :])

    def init_queues(self, batch: int, like: torch.Tensor) -> list[deque[torch.Tensor]]:
        """Empty generation state: for the causal layer and each residual layer, ``dilation`` zero inputs."""
        zeros = lambda c: like.new_zeros(batch, c, dtype=self.causal.weight.dtype)
        return [deque([zeros(self.cfg.quantization_channels)])] + [
            deque(zeros(self.cfg.residual_channels) for _ in range(layer.dilation)) for layer in self.layers
        ]

    def step(self, current: torch.Tensor, queues: list[deque[torch.Tensor]]) -> torch.Tensor:
        """Feed one class per sequence ``(B,)``; returns the logits ``(B, Q)`` of the next sample."""
        x = F.one_hot(current, self.cfg.quantization_channels).to(self.causal.weight.dtype)  # (B, Q)
        queues[0].append(x)
        h = _tap(self.causal, queues[0].popleft(), x)  # (B, R)
        skips = 0
        for layer, queue in zip(self.layers, queues[1:]):
            queue.append(h)
            skip, h = layer.step(h, queue.popleft())  # the input `dilation` steps back leaves the queue
            skips = skips + skip
        hidden = F.relu(F.linear(F.relu(skips), self.postprocess1.weight[:, :, 0], self.postprocess1.bias))
        return F.linear(hidden, self.postprocess2.weight[:, :, 0], self.postprocess2.bias)

    def generate(self, first: torch.Tensor, samples: int) -> torch.Tensor:
        """Draw ``samples`` classes after the seed classes ``first`` ``(B,)``; returns them decoded ``(B, samples)``."""
        queues = self.init_queues(first.size(0), first)
        current, out = first, []
        for _ in range(samples):
            logits = self.step(current, queues)
            current = torch.multinomial(F.softmax(logits.float(), dim=-1), 1).squeeze(1)  # (B,)
            out.append(current)
        return mu_law_decode(torch.stack(out, dim=1), self.cfg.quantization_channels)


class WaveNetWorkload(Workload):
    """Train: inputs ``(audio (B, T),)``; eval: inputs ``(seed classes (B,),)``."""

    def forward(self) -> torch.Tensor:
        if self.ctx.train:
            return self.module.loss(*self.inputs)
        return self.module.generate(*self.inputs, self.module.cfg.generate_samples)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs


_SMOKE = dict(
    dilations=(1, 2, 4) * 2,
    residual_channels=8,
    dilation_channels=8,
    skip_channels=16,
    sample_size=64,
    generate_samples=8,
)


def _create_wavenet(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(WaveNetConfig(), **{**(_SMOKE if ctx.smoke else {}), **kwargs})
    model = WaveNet(cfg)
    if ctx.train:
        audio = synthetic_audio(ctx, ctx.batch_size, cfg.sample_size + model.receptive_field, SAMPLE_RATE)
        inputs = (audio,)
    else:  # generate.py without a seed file: one random first sample
        inputs = (ctx.randint(0, cfg.quantization_channels, (ctx.batch_size,)),)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if ctx.train else None
    return WaveNetWorkload(ctx, model, inputs, optimizer=opt)


@register_model(
    domain="speech",
    task="audio_generation",
    batch_size=(1, 1),
    tags=("autoregressive", "generation"),
    source="van den Oord et al., WaveNet, 2016; ibab/tensorflow-wavenet wavenet_params.json",
    unsupported_precisions=("fp16",),
    notes="eval = fast generation of 512 samples with per-layer FIFO queues, multinomial sampling. fp16 "
    "unsupported: pure-fp16 training goes non-finite within two smoke steps; amp works.",
)
def wavenet(ctx: BuildContext, **kwargs) -> Workload:
    """WaveNet, 256 mu-law classes, 5 x dilations 1..512 (32 residual, 512 skip channels), unconditioned."""
    return _create_wavenet(ctx, **kwargs)
