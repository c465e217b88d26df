"""Glow: a multi-scale normalizing flow with invertible 1x1 convolutions, on 32x32 RGB images.

Kingma and Dhariwal, "Glow: Generative Flow with Invertible 1x1 Convolutions" (NeurIPS 2018),
in its CIFAR-10 configuration (openai/glow, MIT license): L=3 levels of K=32 steps, coupling
networks 512 wide. Each level squeezes space into channels (2x2 -> 4x channels), runs K steps
of ActNorm (data-dependent init), an invertible 1x1 convolution in the LU parametrisation
(``W = P L (U + diag(sign(s) exp(log|s|)))``, P fixed, log-det ``H W sum(log|s|)``) and an
affine coupling (conv3x3-ReLU-conv1x1-ReLU-zero-initialised conv3x3; ``y2 = (x2 + t) *
sigmoid(s + 2)``), then factors out half of the channels under a Gaussian whose mean and log-std
a zero-initialised conv computes from the kept half. The last level's latent has a learned
per-channel prior (openai's ``learntop``, written as parameters rather than a conv on zeros).

Train: negative log-likelihood in bits per dimension of 8-bit images with uniform
dequantisation noise (``n_bins = 256``), Adam(1e-3). Eval: sampling, i.e. the flow run in
reverse from the priors at temperature 0.7, which uses the inverses (triangular solves for the
1x1 convolutions). Zero-initialised convs keep openai's per-channel ``exp(3 * logs)`` output
scale. Parameters: 44,053,968 (:func:`glow_param_count` gives the formula; per step with C
channels: ActNorm 2C, LU factors 2C^2 + C, coupling 9*512*C/2 + 512 + 512^2 + 512 + 9*512*C + 2C,
C = 12, 24, 48); L and U are stored as full matrices under triangular masks, as openai/glow does,
so 99,456 of those are inert (43,954,512 free). Written from the paper; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["ActNorm", "AffineCoupling", "FlowStep", "Glow", "GlowConfig", "InvConv1x1LU", "glow_param_count"]

LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class GlowConfig:
    image_size: int = 32  # CIFAR-10
    channels: int = 3
    levels: int = 3  # L
    steps: int = 32  # K, flow steps per level
    hidden: int = 512  # coupling network width
    n_bins: int = 256  # 8-bit images
    temperature: float = 0.7  # sampling temperature of eval


def glow_param_count(cfg: GlowConfig) -> int:
    """Parameters of :class:`Glow` by formula (L and U are stored as full C x C matrices)."""
    h, total, c = cfg.hidden, 0, cfg.channels
    for level in range(cfg.levels):
        c *= 4
        step = 2 * c + (2 * c * c + c)  # ActNorm; LU factors and log|s|
        step += (c // 2) * h * 9 + h + h * h + h + h * c * 9 + 2 * c  # coupling NN, zero conv + its logs
        total += cfg.steps * step
        if level < cfg.levels - 1:
            total += (c // 2) * c * 9 + 2 * c  # split prior (zero conv)
            c //= 2
    return total + 2 * c  # top prior: mean and log-std per channel


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Per-sample ``(B,)`` log-density of ``x`` under a diagonal Gaussian."""
    return (-0.5 * (LOG_2PI + 2 * log_std + (x - mean).square() * torch.exp(-2 * log_std))).flatten(1).sum(1)


class ZeroConv2d(nn.Module):
    """3x3 conv initialised to zero, output scaled by ``exp(3 * logs)`` per channel: the flow starts as identity."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, 3, padding=1)
        self.logs = nn.Parameter(torch.zeros(1, out_ch, 1, 1))
        nn.init.zeros_(self.conv.weight)
        nn.init.zeros_(self.conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * torch.exp(3 * self.logs)


class ActNorm(nn.Module):
    """Per-channel affine ``(x + bias) * exp(logs)``; the first batch seen sets zero mean, unit variance."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.initialized = False  # a Python flag, not a buffer: the check must not sync a device

    @torch.no_grad()
    def _initialize(self, x: torch.Tensor) -> None:
        self.bias.copy_(-x.mean(dim=(0, 2, 3), keepdim=True))
        self.logs.copy_(-torch.log(x.std(dim=(0, 2, 3), keepdim=True) + 1e-6))
        self.initialized = True

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.initialized:
            self._initialize(x)
        return (x + self.bias) * torch.exp(self.logs), x[0, 0].numel() * self.logs.sum()

    def reverse(self, y: torch.Tensor) -> torch.Tensor:
        return y * torch.exp(-self.logs) - self.bias


class InvConv1x1LU(nn.Module):
    """Invertible 1x1 conv ``W = P L (U + diag(sign * exp(log_s)))`` from a random rotation's LU factors."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        w = torch.linalg.qr(torch.randn(channels, channels, dtype=torch.float64))[0]
        p, lower, upper = torch.linalg.lu(w)
        s = torch.diagonal(upper)
        self.register_buffer("p", p.float())
        self.register_buffer("sign_s", torch.sign(s).float())
        self.register_buffer("lower_mask", torch.tril(torch.ones(channels, channels), -1))
        self.lower = nn.Parameter(lower.float())
        self.upper = nn.Parameter(torch.triu(upper, 1).float())
        self.log_s = nn.Parameter(torch.log(s.abs()).float())

    def _factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit lower-triangular L and upper-triangular U (with the diagonal s), each ``(C, C)``."""
        eye = torch.eye(self.p.size(0), dtype=self.lower.dtype, device=self.lower.device)
        lower = self.lower * self.lower_mask + eye
        upper = self.upper * self.lower_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))
        return lower, upper

    def weight(self) -> torch.Tensor:
        lower, upper = self._factors()
        return self.p @ lower @ upper

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.weight()
        return F.conv2d(x, w[..., None, None]), x[0, 0].numel() * self.log_s.sum()

    def reverse(self, y: torch.Tensor) -> torch.Tensor:
        lower, upper = self._factors()
        dtype = torch.promote_types(lower.dtype, torch.float32)  # no half-precision triangular solves
        eye = torch.eye(lower.size(0), dtype=dtype, device=lower.device)
        lower_inv = torch.linalg.solve_triangular(lower.to(dtype), eye, upper=False, unitriangular=True)
        upper_inv = torch.linalg.solve_triangular(upper.to(dtype), eye, upper=True)
        w_inv = upper_inv @ lower_inv @ self.p.to(dtype).T  # W^-1 = U^-1 L^-1 P^T
        return F.conv2d(y, w_inv.to(y.dtype)[..., None, None])


class AffineCoupling(nn.Module):
    """``y1 = x1``, ``y2 = (x2 + t) * sigmoid(s + 2)`` with ``(s, t) = NN(x1)``; log-det ``sum log sigmoid(s + 2)``."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels // 2, hidden, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(hidden, hidden, 1),
            nn.ReLU(),
            ZeroConv2d(hidden, channels),
        )

    def _scale_shift(self, x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s, t = self.net(x1).chunk(2, dim=1)
        return torch.sigmoid(s + 2.0), t

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x1, x2 = x.chunk(2, dim=1)
        scale, shift = self._scale_shift(x1)
        return torch.cat((x1, (x2 + shift) * scale), dim=1), torch.log(scale).flatten(1).sum(1)

    def reverse(self, y: torch.Tensor) -> torch.Tensor:
        y1, y2 = y.chunk(2, dim=1)
        scale, shift = self._scale_shift(y1)
        return torch.cat((y1, y2 / scale - shift), dim=1)


class FlowStep(nn.Module):
    """ActNorm, invertible 1x1 conv, affine coupling; returns the output and its log-det ``(B,)``."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.actnorm = ActNorm(channels)
        self.invconv = InvConv1x1LU(channels)
        self.coupling = AffineCoupling(channels, hidden)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, ld_act = self.actnorm(x)
        x, ld_conv = self.invconv(x)
        x, ld_coupling = self.coupling(x)
        return x, ld_act + ld_conv + ld_coupling

    def reverse(self, y: torch.Tensor) -> torch.Tensor:
        return self.actnorm.reverse(self.invconv.reverse(self.coupling.reverse(y)))


class Glow(nn.Module):
    """Images ``(B, C, H, W)`` in [-0.5, 0.5] to latents (one per level), log-det and prior log-density."""

    def __init__(self, cfg: GlowConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.levels, self.priors = nn.ModuleList(), nn.ModuleList()
        c = cfg.channels
        for level in range(cfg.levels):
            c *= 4
            self.levels.append(nn.ModuleList(FlowStep(c, cfg.hidden) for _ in range(cfg.steps)))
            if level < cfg.levels - 1:
                self.priors.append(ZeroConv2d(c // 2, c))  # mean and log-std of the factored-out half
                c //= 2
        self.top_mean = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.top_log_std = nn.Parameter(torch.zeros(1, c, 1, 1))

    def latent_shapes(self, batch: int) -> list[tuple[int, ...]]:
        """Shapes of the latents :meth:`forward` returns, first level first."""
        c, s, shapes = self.cfg.channels, self.cfg.image_size, []
        for level in range(self.cfg.levels):
            c, s = c * 4, s // 2
            if level < self.cfg.levels - 1:
                c //= 2
            shapes.append((batch, c, s, s))
        return shapes

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        logdet = x.new_zeros(x.size(0))
        log_p = x.new_zeros(x.size(0))
        latents = []
        for level, steps in enumerate(self.levels):
            x = F.pixel_unshuffle(x, 2)  # squeeze: (B, C, H, W) -> (B, 4C, H/2, W/2)
            for step in steps:
                x, ld = step(x)
                logdet = logdet + ld
            if level < len(self.priors):
                x, z = x.chunk(2, dim=1)
                mean, log_std = self.priors[level](x).chunk(2, dim=1)
            else:
                z, mean, log_std = x, self.top_mean, self.top_log_std
            log_p = log_p + gaussian_log_prob(z, mean, log_std)
            latents.append(z)
        return latents, logdet, log_p

    def reverse(self, latents: list[torch.Tensor], temperature: float | None = None) -> torch.Tensor:
        """Images from latents (one per level); with ``temperature``, latents are standard normal noise
        scaled by it around the priors' means (sampling), otherwise the latents themselves (reconstruction)."""
        x = None
        for level in reversed(range(len(self.levels))):
            z = latents[level]
            if level < len(self.priors):
                mean, log_std = self.priors[level](x).chunk(2, dim=1)
            else:
                mean, log_std = self.top_mean, self.top_log_std
            if temperature is not None:
                z = mean + torch.exp(log_std) * temperature * z
            x = z if x is None else torch.cat((x, z), dim=1)
            for step in reversed(self.levels[level]):
                x = step.reverse(x)
            x = F.pixel_shuffle(x, 2)  # unsqueeze
        return x


class GlowWorkload(Workload):
    """Train: NLL in bits/dim of dequantised images; eval: samples at the configured temperature."""

    def __init__(
        self,
        ctx: BuildContext,
        module: Glow,
        images: torch.Tensor,
        *,
        generator: torch.Generator,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        super().__init__(ctx, module, (images,), optimizer=optimizer)
        self.generator = generator  # dequantisation (train) and prior (eval) noise, seeded

    def forward(self):
        (images,) = self.inputs
        cfg = self.module.cfg
        if not self.ctx.train:
            noise = [
                torch.randn(shape, generator=self.generator, device=images.device).to(images.dtype)
                for shape in self.module.latent_shapes(images.size(0))
            ]
            return self.module.reverse(noise, cfg.temperature) + 0.5
        u = torch.rand(images.shape, generator=self.generator, device=images.device).to(images.dtype)
        return self.module(images - 0.5 + u / cfg.n_bins)

    def compute_loss(self, outputs) -> torch.Tensor:
        _, logdet, log_p = outputs
        dims = self.inputs[0][0].numel()
        log_likelihood = log_p + logdet - dims * math.log(self.module.cfg.n_bins)  # of the discrete image
        return (-log_likelihood / (dims * math.log(2.0))).mean()


def _create_glow(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(image_size=8, levels=2, steps=2, hidden=16) if ctx.smoke else {}
    cfg = replace(GlowConfig(), **(smoke | kwargs))
    model = Glow(cfg).to(ctx.device)
    b, s = ctx.batch_size, cfg.image_size
    # 8-bit images (random pixel values) in [0, 1), as k / n_bins
    images = ctx.randint(0, cfg.n_bins, (b, cfg.channels, s, s)).float() / cfg.n_bins
    generator = torch.Generator(device=ctx.device)
    generator.manual_seed(ctx.seed)
    with torch.no_grad():  # ActNorm's data-dependent init at build time, so every timed step is alike
        model(images - 0.5 + ctx.rand(*images.shape) / cfg.n_bins)
    opt = ctx.optimizer(model.parameters(), "adam", lr=1e-3) if ctx.train else None
    return GlowWorkload(ctx, model, images, generator=generator, optimizer=opt)


@register_model(
    domain="vision",
    task="image_generation",
    batch_size=(64, 64),
    param_count=44_053_968,
    tags=("normalizing_flow",),
    source="Kingma & Dhariwal 2018, Glow; openai/glow (CIFAR-10 configuration)",
    notes="param_count: L and U of the 1x1 convs stored as full matrices (masked), 99,456 of them "
    "inert (43,954,512 free); eval = sampling at temperature 0.7 (the flow in reverse)",
)
def glow(ctx: BuildContext, **kwargs) -> Workload:
    """Glow on 32x32x3 (L=3, K=32, width 512, LU 1x1 convs, affine coupling), NLL in bits/dim."""
    return _create_glow(ctx, **kwargs)
