"""Fourier Neural Operator (FNO-2D) learning the Darcy-flow map from coefficient to solution.

Li, Kovachki, Azizzadenesheli, Liu, Bhattacharya, Stuart and Anandkumar, "Fourier Neural
Operator for Parametric Partial Differential Equations", ICLR 2021; the reference script is
``fourier_2d.py`` of github.com/zongyi-li/fourier_neural_operator (MIT). The Darcy problem
is ``-div(a(x) grad u(x)) = 1`` on the unit square with ``u = 0`` on the boundary; the
network maps the coefficient ``a`` (sampled on an ``s x s`` grid) to ``u`` on the same grid.

Architecture as the reference: ``(a, x, y)`` lifted by ``Linear(3, 32)``, zero-padded by 9
cells on the right and bottom (the solution is not periodic), four Fourier layers
``u' = K(u) + W u`` (``K``: rfft2, the lowest 12 x 12 modes of both the ``k1 >= 0`` and
``k1 < 0`` halves multiplied by complex ``(in, out)`` matrices, irfft2; ``W``: a 1x1
convolution) with GELU between them, crop, then ``Linear(32, 128) -> GELU -> Linear(128, 1)``.
Training as the reference: resolution 85 (``r = 5`` subsampling of the 421 x 421 data),
batch 20, Adam lr 1e-3 with weight decay 1e-4, the relative L2 loss summed over the batch,
the output decoded by the per-pixel Gaussian normalizer fitted to the training solutions.

Data are synthetic and seeded. The coefficient is the dataset's: a Gaussian random field
with covariance ``(-Laplacian + 9)^-2`` (cosine series, zero Neumann conditions, no constant
mode) thresholded to 12 where positive and 3 elsewhere. The target is *not* a PDE solve: a
smooth field vanishing on the boundary with the magnitude of the Darcy solutions; the timed
step does not depend on the values. Written from the paper and the description above; no code
copied.

FNO-3D (``fno3d_navier_stokes``): the reference's ``fourier_3d.py`` (torch.fft version) for 2-D
Navier-Stokes (viscosity 1e-3, 64 x 64) with time as the third dimension: the vorticity of the first
10 steps, repeated along the 40 output steps, plus the ``(x, y, t)`` grid (13 channels) lifted by
``Linear(13, 20)``, zero-padded by 6 steps in time only, four layers of rfftn over the last three dims
with 8 x 8 x 8 modes in each of the four ``(+-k1, +-k2)`` corners and a 1x1x1 Conv3d, GELU, crop,
``Linear(20, 128) -> GELU -> Linear(128, 1)``; batch 10, Adam lr 1e-3 with weight decay 1e-4, the
relative L2 loss (summed) on outputs decoded by the per-point normalizer. Synthetic vorticity: a
cosine-series field decaying as the heat equation does (no Navier-Stokes solve); the normalizers are
fitted on 50 such samples rather than the reference's 1000 (build-time cost only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = [
    "FNO2d",
    "FNO3d",
    "FNO3dConfig",
    "FNOConfig",
    "SpectralConv2d",
    "SpectralConv3d",
    "darcy_coefficients",
    "relative_l2_loss",
]

# The reference's r = 5 subsampling of the 421 x 421 Darcy data: s = (421 - 1) / 5 + 1.
DARCY_RESOLUTION = 85
# The reference fits its normalizers on ntrain = 1000 samples; so do we (at build time).
NORMALIZER_SAMPLES = 1000
# UnitGaussianNormalizer's eps: the solution is 0 on the boundary, so its std is too.
NORMALIZER_EPS = 1e-5
# Coefficient values of the piecewise-constant Darcy permeability.
A_HIGH, A_LOW = 12.0, 3.0
# Cosine modes per dimension of the random field: beyond 8 the (k^2 pi^2 + 9)^-1 amplitudes are < 3% of the first.
FIELD_MODES = 8
# Navier-Stokes samples the FNO-3D normalizers are fitted on (the reference: its 1000 training samples).
NS_NORMALIZER_SAMPLES = 50
# Viscosity of the reference's ns_data_V1e-3 dataset; sets the decay of the synthetic vorticity.
NS_VISCOSITY = 1e-3


@dataclass(frozen=True)
class FNOConfig:
    modes: int = 12  # Fourier modes kept per dimension (modes1 = modes2), as the reference
    width: int = 32  # channels of the Fourier layers
    layers: int = 4  # Fourier layers
    padding: int = 9  # zero cells appended on the right and bottom: u is not periodic
    projection: int = 128  # hidden width of the output MLP
    resolution: int = DARCY_RESOLUTION  # grid points per side


class SpectralConv2d(nn.Module):
    """The Fourier integral operator ``K``: ``(B, Cin, H, W) -> (B, Cout, H, W)``.

    Keeps the modes ``k1 in [0, m1) and [-m1, 0)`` (rows of the FFT), ``k2 in [0, m2)``
    (rfft columns); everything else is zeroed. The FFT is unnormalized and its inverse
    divides by ``H W``, so the layer computes the same function on any grid fine enough
    to hold the kept modes (``H >= 2 m1``, ``W // 2 + 1 >= m2``).
    """

    def __init__(self, in_channels: int, out_channels: int, modes1: int, modes2: int) -> None:
        super().__init__()
        self.out_channels, self.modes1, self.modes2 = out_channels, modes1, modes2
        scale = 1 / (in_channels * out_channels)  # the reference's init: uniform [0, scale) real and imaginary
        # Complex weights stored as real (..., 2) pairs and viewed with view_as_complex in forward.
        # Not complex Parameters because (1) the harness casts modules with module.to(dtype), which
        # silently drops the imaginary part of complex parameters (fp64 accuracy reference, fp16/bf16),
        # and real pairs cast correctly; (2) every optimizer handles real tensors, while complex support
        # came late (the reference shipped its own Adam for it); torch's Adam views complex parameters
        # as real pairs anyway, so the update is the same; (3) numel() then counts real scalars, as the
        # reference's count_params does (a complex weight counts 2).
        self.weights1 = nn.Parameter(scale * torch.rand(in_channels, out_channels, modes1, modes2, 2))  # k1 >= 0
        self.weights2 = nn.Parameter(scale * torch.rand(in_channels, out_channels, modes1, modes2, 2))  # k1 < 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        m1, m2 = self.modes1, self.modes2
        if 2 * m1 > h or m2 > w // 2 + 1:
            raise ValueError(f"{m1}x{m2} modes need a grid of at least {2 * m1}x{2 * (m2 - 1)}, got {h}x{w}")
        # torch has no half-precision rfft on CPU, and cuFFT's needs power-of-two sizes: the
        # spectral part runs in at least fp32 (as autocast does for precision-sensitive ops).
        dtype = torch.promote_types(x.dtype, torch.float32)
        x_ft = torch.fft.rfft2(x.to(dtype))  # (B, Cin, H, W // 2 + 1) complex
        w1 = torch.view_as_complex(self.weights1.to(dtype))  # (Cin, Cout, m1, m2)
        w2 = torch.view_as_complex(self.weights2.to(dtype))
        out_ft = x_ft.new_zeros(b, self.out_channels, h, w // 2 + 1)
        out_ft[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m1, :m2], w1)
        out_ft[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m1:, :m2], w2)
        return torch.fft.irfft2(out_ft, s=(h, w)).to(x.dtype)


class FNO2d(nn.Module):
    """Coefficient ``a`` ``(B, S, S, 1)`` -> normalized solution ``(B, S, S, 1)``, any ``S``."""

    def __init__(self, cfg: FNOConfig) -> None:
        super().__init__()
        self.padding = cfg.padding
        self.lift = nn.Linear(3, cfg.width)  # (a, x, y) per grid point
        self.spectral = nn.ModuleList(
            SpectralConv2d(cfg.width, cfg.width, cfg.modes, cfg.modes) for _ in range(cfg.layers)
        )
        self.pointwise = nn.ModuleList(nn.Conv2d(cfg.width, cfg.width, 1) for _ in range(cfg.layers))
        self.project = nn.Sequential(nn.Linear(cfg.width, cfg.projection), nn.GELU(), nn.Linear(cfg.projection, 1))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        b, sx, sy, _ = a.shape
        # grid coordinates in [0, 1], x along dim 1 and y along dim 2
        gx = torch.linspace(0, 1, sx, dtype=a.dtype, device=a.device).view(1, sx, 1, 1).expand(b, sx, sy, 1)
        gy = torch.linspace(0, 1, sy, dtype=a.dtype, device=a.device).view(1, 1, sy, 1).expand(b, sx, sy, 1)
        x = self.lift(torch.cat([a, gx, gy], dim=-1)).permute(0, 3, 1, 2)  # (B, C, S, S)
        x = F.pad(x, [0, self.padding, 0, self.padding])  # (B, C, S + p, S + p)
        last = len(self.spectral) - 1
        for i, (spectral, pointwise) in enumerate(zip(self.spectral, self.pointwise)):
            x = spectral(x) + pointwise(x)
            if i < last:
                x = F.gelu(x)
        x = x[..., :sx, :sy].permute(0, 2, 3, 1)  # (B, S, S, C)
        return self.project(x)


@dataclass(frozen=True)
class FNO3dConfig:
    modes: int = 8  # Fourier modes kept per dimension (modes1 = modes2 = modes3), as the reference
    width: int = 20  # channels of the Fourier layers
    layers: int = 4  # Fourier layers
    padding: int = 6  # zero steps appended in time only: the solution is not periodic in t
    projection: int = 128  # hidden width of the output MLP
    resolution: int = 64  # grid points per spatial side
    in_steps: int = 10  # T_in: vorticity steps given as input
    out_steps: int = 40  # T: steps predicted at once


class SpectralConv3d(nn.Module):
    """``K`` over the last three dims: ``(B, Cin, X, Y, T) -> (B, Cout, X, Y, T)``.

    Keeps ``k1 in [0, m1) and [-m1, 0)``, ``k2 in [0, m2) and [-m2, 0)`` (the four corners, one
    complex ``(in, out)`` weight block each) and ``k3 in [0, m3)`` (rfft axis); zeroes the rest.
    Complex weights are real ``(..., 2)`` pairs, as in :class:`SpectralConv2d` (same reasons).
    """

    def __init__(self, in_channels: int, out_channels: int, modes1: int, modes2: int, modes3: int) -> None:
        super().__init__()
        self.out_channels, self.modes = out_channels, (modes1, modes2, modes3)
        scale = 1 / (in_channels * out_channels)  # the reference's init: uniform [0, scale) real and imaginary
        shape = (in_channels, out_channels, modes1, modes2, modes3, 2)
        self.weights1 = nn.Parameter(scale * torch.rand(shape))  # k1 >= 0, k2 >= 0
        self.weights2 = nn.Parameter(scale * torch.rand(shape))  # k1 < 0, k2 >= 0
        self.weights3 = nn.Parameter(scale * torch.rand(shape))  # k1 >= 0, k2 < 0
        self.weights4 = nn.Parameter(scale * torch.rand(shape))  # k1 < 0, k2 < 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, d1, d2, d3 = x.shape
        m1, m2, m3 = self.modes
        if 2 * m1 > d1 or 2 * m2 > d2 or m3 > d3 // 2 + 1:
            raise ValueError(f"{m1}x{m2}x{m3} modes do not fit a {d1}x{d2}x{d3} grid")
        dtype = torch.promote_types(x.dtype, torch.float32)  # as SpectralConv2d: no half rfftn on CPU
        x_ft = torch.fft.rfftn(x.to(dtype), dim=[-3, -2, -1])  # (B, Cin, X, Y, T // 2 + 1) complex
        out_ft = x_ft.new_zeros(b, self.out_channels, d1, d2, d3 // 2 + 1)
        corners = (
            (slice(None, m1), slice(None, m2)),
            (slice(-m1, None), slice(None, m2)),
            (slice(None, m1), slice(-m2, None)),
            (slice(-m1, None), slice(-m2, None)),
        )
        for weights, (s1, s2) in zip((self.weights1, self.weights2, self.weights3, self.weights4), corners):
            w = torch.view_as_complex(weights.to(dtype))  # (Cin, Cout, m1, m2, m3)
            out_ft[:, :, s1, s2, :m3] = torch.einsum("bixyz,ioxyz->boxyz", x_ft[:, :, s1, s2, :m3], w)
        return torch.fft.irfftn(out_ft, s=(d1, d2, d3)).to(x.dtype)


class FNO3d(nn.Module):
    """First ``T_in`` vorticity steps ``(B, S, S, T, T_in)`` -> normalized next ``T`` steps ``(B, S, S, T, 1)``."""

    def __init__(self, cfg: FNO3dConfig) -> None:
        super().__init__()
        self.padding = cfg.padding
        self.lift = nn.Linear(cfg.in_steps + 3, cfg.width)  # (u_1..u_T_in, x, y, t) per grid point
        self.spectral = nn.ModuleList(
            SpectralConv3d(cfg.width, cfg.width, cfg.modes, cfg.modes, cfg.modes) for _ in range(cfg.layers)
        )
        self.pointwise = nn.ModuleList(nn.Conv3d(cfg.width, cfg.width, 1) for _ in range(cfg.layers))
        self.project = nn.Sequential(nn.Linear(cfg.width, cfg.projection), nn.GELU(), nn.Linear(cfg.projection, 1))

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        b, sx, sy, st, _ = a.shape
        axes = [torch.linspace(0, 1, n, dtype=a.dtype, device=a.device) for n in (sx, sy, st)]
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).expand(b, sx, sy, st, 3)
        x = self.lift(torch.cat([a, grid], dim=-1)).permute(0, 4, 1, 2, 3)  # (B, C, S, S, T)
        x = F.pad(x, [0, self.padding])  # (B, C, S, S, T + p): time only
        last = len(self.spectral) - 1
        for i, (spectral, pointwise) in enumerate(zip(self.spectral, self.pointwise)):
            x = spectral(x) + pointwise(x)
            if i < last:
                x = F.gelu(x)
        x = x[..., :st].permute(0, 2, 3, 4, 1)  # (B, S, S, T, C)
        return self.project(x)


def relative_l2_loss(pred: torch.Tensor, target: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
    """Per-sample ``||pred_b - target_b|| / ||target_b||``, summed (the reference's ``LpLoss(size_average=False)``)
    or averaged over the batch (``reduction="mean"``: ``LpLoss()``, which FourCastNet reuses)."""
    pred, target = pred.flatten(1), target.flatten(1)
    per_sample = torch.linalg.vector_norm(pred - target, dim=1) / torch.linalg.vector_norm(target, dim=1)
    if reduction == "sum":
        return per_sample.sum()
    if reduction == "mean":
        return per_sample.mean()
    raise ValueError(f"unknown reduction {reduction!r}; accepted: sum, mean")


def _random_field(ctx: BuildContext, samples: int, resolution: int) -> torch.Tensor:
    """``(N, S, S)`` draws of the Gaussian field with covariance ``(-Laplacian + 9)^-2`` (cosine series)."""
    k = torch.arange(FIELD_MODES, dtype=torch.float32)
    std = 1 / (math.pi**2 * (k[:, None] ** 2 + k[None, :] ** 2) + 9)  # sqrt of the eigenvalues (lambda + 9)^-2
    std[0, 0] = 0.0  # no constant mode: the field has mean zero
    coef = ctx.randn(samples, FIELD_MODES, FIELD_MODES) * std.to(ctx.device)
    grid = torch.linspace(0, 1, resolution, device=ctx.device)
    basis = torch.cos(math.pi * k.to(ctx.device)[:, None] * grid[None, :])  # (K, S)
    return torch.einsum("nkl,kx,ly->nxy", coef, basis, basis)


def darcy_coefficients(ctx: BuildContext, samples: int, resolution: int) -> torch.Tensor:
    """``(N, S, S)`` piecewise-constant permeabilities: 12 where the random field is >= 0, 3 elsewhere."""
    field = _random_field(ctx, samples, resolution)
    return torch.where(field >= 0, A_HIGH, A_LOW)


def _smooth_solutions(ctx: BuildContext, coeff: torch.Tensor) -> torch.Tensor:
    """``(N, S, S)`` smooth stand-ins for the solutions: 0 on the boundary, ~1 / (2 pi^2 mean(a)) inside."""
    n, s, _ = coeff.shape
    grid = torch.linspace(0, 1, s, device=coeff.device)
    bump = torch.sin(math.pi * grid)[:, None] * torch.sin(math.pi * grid)[None, :]  # (S, S)
    wiggle = _random_field(ctx, n, s)
    wiggle = wiggle / wiggle.flatten(1).std(dim=1).clamp_min(1e-6).view(n, 1, 1)
    return bump * (1 + 0.25 * wiggle) / (2 * math.pi**2 * coeff.mean(dim=(1, 2), keepdim=True))


def _vorticity(ctx: BuildContext, samples: int, resolution: int, steps: int) -> torch.Tensor:
    """``(N, S, S, T)`` smooth periodic fields decaying in time as ``exp(-nu |2 pi k|^2 t)``, t = 1..T."""
    k = torch.arange(-FIELD_MODES // 2, FIELD_MODES // 2 + 1, dtype=torch.float32, device=ctx.device)  # (K,)
    k2 = k[:, None] ** 2 + k[None, :] ** 2
    coef = ctx.randn(samples, 2, k.numel(), k.numel()) / (1 + k2)  # cos and sin amplitudes
    grid = torch.arange(resolution, dtype=torch.float32, device=ctx.device) / resolution
    phase = (
        2 * math.pi * (k[:, None, None, None] * grid[:, None] + k[None, :, None, None] * grid[None, :])
    )  # (K, K, S, S)
    t = torch.arange(1, steps + 1, dtype=torch.float32, device=ctx.device)
    decay = torch.exp(-NS_VISCOSITY * (2 * math.pi) ** 2 * k2[..., None] * t)  # (K, K, T)
    return torch.einsum("nkl,klt,klxy->nxyt", coef[:, 0], decay, torch.cos(phase)) + torch.einsum(
        "nkl,klt,klxy->nxyt", coef[:, 1], decay, torch.sin(phase)
    )


class DarcyWorkload(Workload):
    """Inputs ``(a_encoded, y_mean, y_scale)``; the output is decoded as the reference does."""

    def forward(self) -> torch.Tensor:
        a, y_mean, y_scale = self.inputs
        return self.module(a).squeeze(-1) * y_scale + y_mean  # (B, S, S)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return relative_l2_loss(outputs, self.targets)


def _create_fno(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(resolution=16, width=8, modes=4, padding=2) if ctx.smoke else {}
    cfg = replace(FNOConfig(), **{**smoke, **kwargs})
    # The reference fits per-pixel normalizers on its 1000 training samples; the batch is their first B.
    samples = max(NORMALIZER_SAMPLES, ctx.batch_size)
    coeff = darcy_coefficients(ctx, samples, cfg.resolution)
    sol = _smooth_solutions(ctx, coeff)
    a_mean, a_scale = coeff.mean(0), coeff.std(0) + NORMALIZER_EPS
    y_mean, y_scale = sol.mean(0), sol.std(0) + NORMALIZER_EPS
    a = ((coeff[: ctx.batch_size] - a_mean) / a_scale).unsqueeze(-1)  # (B, S, S, 1), encoded once, as the reference
    targets = sol[: ctx.batch_size].contiguous()  # (B, S, S), raw: loss against decoded outputs
    model = FNO2d(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4) if ctx.train else None
    return DarcyWorkload(ctx, model, (a, y_mean, y_scale), targets, optimizer=opt)


_SOURCE = (
    "Li et al., Fourier Neural Operator for Parametric PDEs, ICLR 2021; zongyi-li/fourier_neural_operator fourier_2d.py"
)


@register_model(
    domain="other",
    task="pde_surrogate",
    source=_SOURCE,
    batch_size=(20, 20),
    tags=("fft", "complex"),
    param_count=2_368_001,  # real scalars: a complex weight counts 2, as the reference's count_params
    notes="Synthetic Darcy data (thresholded Gaussian random field; smooth stand-in targets, no PDE "
    "solve). fp16/bf16/amp: the FFTs and spectral products run in fp32 (no half rfft on CPU; "
    "cuFFT half needs power-of-two sizes, the padded grid is 94).",
)
def fno_darcy(ctx: BuildContext, **kwargs) -> Workload:
    """FNO-2D (12 modes, width 32, 4 Fourier layers) on 85x85 Darcy flow, relative L2 loss."""
    return _create_fno(ctx, **kwargs)


def _create_fno3d(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(resolution=8, in_steps=4, out_steps=4, width=4, modes=2, padding=2) if ctx.smoke else {}
    cfg = replace(FNO3dConfig(), **{**smoke, **kwargs})
    s, t_in, t = cfg.resolution, cfg.in_steps, cfg.out_steps
    samples = max(NS_NORMALIZER_SAMPLES, ctx.batch_size)
    u = _vorticity(ctx, samples, s, t_in + t)  # (N, S, S, T_in + T)
    a_raw, y_raw = u[..., :t_in], u[..., t_in:]
    a = (a_raw - a_raw.mean(0)) / (a_raw.std(0) + NORMALIZER_EPS)
    y_mean, y_scale = y_raw.mean(0), y_raw.std(0) + NORMALIZER_EPS  # (S, S, T)
    # as the reference's preprocessing: the T_in input steps repeated along the T output steps
    a = a[: ctx.batch_size].reshape(-1, s, s, 1, t_in).repeat(1, 1, 1, t, 1)  # (B, S, S, T, T_in)
    targets = y_raw[: ctx.batch_size].contiguous()  # (B, S, S, T), raw: loss against decoded outputs
    model = FNO3d(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4) if ctx.train else None
    return DarcyWorkload(ctx, model, (a, y_mean, y_scale), targets, optimizer=opt)


@register_model(
    domain="other",
    task="pde_surrogate",
    batch_size=(10, 10),
    tags=("fft", "complex"),
    source="Li et al., Fourier Neural Operator for Parametric PDEs, ICLR 2021; "
    "neuraloperator/neuraloperator (MIT) fourier_3d.py",
    # from the reference definition, complex weights counted as 2 real scalars (its count_params):
    # 4 layers x 4 corners x 20*20*8*8*8*2 + 4 x (20*20 + 20) + (13*20 + 20) + (20*128 + 128) + 129
    param_count=6_558_377,
    notes="Synthetic vorticity (decaying cosine series, no Navier-Stokes solve). FFTs and spectral "
    "products run in at least fp32, as fno_darcy.",
)
def fno3d_navier_stokes(ctx: BuildContext, **kwargs) -> Workload:
    """FNO-3D (8 modes, width 20) on 64x64 Navier-Stokes, 10 steps in, 40 out; relative L2 loss."""
    return _create_fno3d(ctx, **kwargs)
