"""LKIS: learning Koopman invariant subspaces for dynamic mode decomposition.

Takeishi, Kawahara & Yairi, "Learning Koopman Invariant Subspaces for Dynamic Mode
Decomposition", NeurIPS 2017 (arXiv:1710.04340). Reference implementation: Chainer,
github.com/n-takeishi/learning-kis (MIT), ``lkis.py`` / ``train.py`` / ``predict.py``; this is a
PyTorch rewrite from the paper and that code (no code copied).

Model (``lkis.Loss`` and ``lkis.Network``): a scalar series is cut into delay windows
``y_t = (y_{t-k+1} .. y_t)`` (``DelayPairDataset``: pairs of windows one step apart), a linear
delay embedder ``phi`` and a BatchNorm map each window to ``x``, the observable MLP ``g``
(Linear-PReLU-BatchNorm-Linear) maps ``x`` to ``n`` learned observables, and the reconstructor
``h`` (same shape) maps them back to the window's last sample. Inside every forward pass the
Koopman operator on the span of ``g`` is the least-squares fit over the batch of snapshot pairs,
``K = G1 G0^+`` (the paper's ``A = Y1 Y0^+``; the reference writes the full-rank pseudo-inverse
as ``(G0^T G0)^-1 G0^T``, here ``torch.linalg.pinv``), and the loss is
``mse(K g0, g1) + alpha (mse(h(g0), y0) + mse(h(g1), y1)) / 2`` (alpha 1e-2, ``train.py``).

Eval is the reference's post-training analysis (``lkis.dmd`` in ``train.py`` and the
prediction loop of ``predict.py``): exact DMD of the observable pairs (SVD of ``G0`` truncated
at singular values < 1e-6, eigen-decomposition of the projected operator with left and right
eigenvectors, modes normalised so ``w_i^H z_i = 1``), the continuous-time eigenvalues
``log(lambda) / dt`` (growth rates and angular frequencies), and a 10-step prediction in
observable space ``g <- W diag(lambda) Z^H g`` decoded by ``h``.

Full size = the reference's Lorenz experiment (``train.py lorenz --delay 7 --dimobs 5``; a
scalar series, delay k = 7, embedding p = k, n = 5 observables), trained full-batch on its 9,993
delay pairs. Parameters, from the architecture (``predict.py`` prints the Linear part): phi
7*7+7 = 56, BatchNorm(7) 14, g 7*6+6 + 1 + 12 + 6*5+5 = 96, h 5*3+3 + 1 + 6 + 3*1+1 = 29:
195 in all (the reference's printed 161 omits BatchNorm and PReLU).

Differs from the reference: Adam (lr 1e-3) instead of Chainer's SMORMS3 (not in torch); one
optimizer over phi and the network instead of two identical ones; PyTorch's default Linear
initialisation; left eigenvectors from ``inv(V)^H`` instead of LAPACK's ``geev`` left vectors
(the normalisation ``w_i^H z_i = 1`` makes them equal); DMD is fitted on the evaluated batch
itself rather than saved from training; the reconstructor-only second training stage of
``train.py`` is not modelled. Data: the Lorenz series is replaced by a seeded limit cycle
observed through a quadratic (see ``limit_cycle_series``), whose on-attractor Koopman
eigenvalues are known: ``1, exp(+-i w dt), exp(+-2i w dt)``, five of them, one per observable.

Performance note: the backward of ``torch.linalg.pinv`` (and of ``lstsq``) on the tall ``(N, n)``
``G0`` builds an ``(N, N)`` product; at N = 9,993 it takes ~4.7 s and ~1 GB on one CPU core where
the reference's normal-equation form takes ~2 ms. Kept: pinv is the paper's operator.
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
    "LKIS",
    "LKISConfig",
    "delay_pairs",
    "dmd",
    "dmd_predict",
    "koopman_operator",
    "limit_cycle_series",
]

# Chainer's BatchNormalization eps (its decay 0.9 is torch's default momentum 0.1).
BN_EPS = 2e-5
# Singular values of G0 below this are dropped before the DMD eigen-problem (lkis.dmd).
DMD_RANK_EPS = 1e-6
# Delay pairs of the smoke problem (the batch size is the number of pairs).
SMOKE_PAIRS = 64


@dataclass(frozen=True)
class LKISConfig:
    dim_y: int = 1  # observed series: the Lorenz x coordinate in the reference
    delay: int = 7  # k, delay-window length (--delay 7)
    dim_emb: int = 7  # p, delay-embedding size (default dim_y * delay)
    dim_obs: int = 5  # n, learned observables (--dimobs 5)
    alpha: float = 1e-2  # weight of the reconstruction loss (train.py default)
    horizon: int = 10  # prediction steps in eval (predict.py default)
    lr: float = 1e-3  # train.py default learning rate
    dt: float = 0.1  # sampling interval of the synthetic series
    omega: float = 1.0  # angular frequency of the limit cycle (period ~63 samples)


def delay_pairs(series: torch.Tensor, delay: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(T, d)`` series -> windows ``y0, y1`` ``(T - k, k, d)`` one step apart, oldest sample first."""
    windows = series.unfold(0, delay, 1).transpose(1, 2)  # (T - k + 1, k, d)
    return windows[:-1], windows[1:]


def koopman_operator(g0: torch.Tensor, g1: torch.Tensor) -> torch.Tensor:
    """Least-squares ``K`` ``(n, n)`` with ``g1_t ~ K g0_t`` from rows ``g0, g1`` ``(N, n)``: ``(G0^+ G1)^T``."""
    return (torch.linalg.pinv(g0) @ g1).T


def dmd(g0: torch.Tensor, g1: torch.Tensor, eps: float = DMD_RANK_EPS) -> tuple[torch.Tensor, ...]:
    """Exact DMD of snapshot rows ``(N, n)``: eigenvalues ``(r,)``, modes ``w`` and adjoint modes ``z`` ``(n, r)``."""
    y0, y1 = g0.T, g1.T  # (n, N) snapshots as columns
    u, s, vh = torch.linalg.svd(y0, full_matrices=False)
    r = int((s >= eps).sum())
    u, s, v = u[:, :r], s[:r], vh[:r].mH  # (n, r), (r,), (N, r)
    m = (y1 @ v) / s  # (n, r) = Y1 V S^-1
    a_tilde = u.mH @ m  # (r, r) operator projected on the POD modes
    lam, right = torch.linalg.eig(a_tilde)
    left = torch.linalg.inv(right).mH  # columns: left eigenvectors, z^H A = lam z^H
    w = (m.to(right.dtype) @ right) / lam  # (n, r) exact DMD modes
    z = u.to(left.dtype) @ left  # (n, r)
    z = z / (w.conj() * z).sum(0)  # so that w_i^H z_i = 1
    return lam, w, z


def dmd_predict(g: torch.Tensor, lam: torch.Tensor, w: torch.Tensor, z: torch.Tensor, horizon: int) -> torch.Tensor:
    """Iterate ``g <- W diag(lam) Z^H g`` from rows ``g`` ``(N, n)``: complex ``(horizon, N, n)``."""
    step = (w * lam) @ z.mH  # (n, n) complex
    preds, cur = [], g.to(step.dtype)
    for _ in range(horizon):
        cur = cur @ step.T
        preds.append(cur)
    return torch.stack(preds)


def limit_cycle_series(ctx: BuildContext, length: int, cfg: LKISConfig) -> torch.Tensor:
    """``(length, 1)``: a Stuart-Landau orbit ``r e^{i theta}`` observed as ``y = x + x^2 / 2``, ``x = r cos(theta)``.

    ``theta = theta0 + omega t`` and ``r(t) = (1 + (r0^-2 - 1) e^{-2t})^{-1/2}``, the closed-form
    radius of ``dz/dt = (1 + i omega) z - |z|^2 z``; once on the cycle (r = 1),
    ``y = 1/4 + cos(theta) + cos(2 theta) / 4`` spans the Koopman eigenfunctions of eigenvalues
    ``1, exp(+-i omega dt), exp(+-2i omega dt)``.
    """
    theta0 = 2 * math.pi * ctx.rand(1)
    r0 = 0.5 + ctx.rand(1)
    t = torch.arange(length, dtype=torch.float32, device=theta0.device) * cfg.dt
    r = (1 + (r0.pow(-2) - 1) * torch.exp(-2 * t)).rsqrt()
    x = r * torch.cos(theta0 + cfg.omega * t)
    return (x + 0.5 * x * x).unsqueeze(-1)


def _mlp(d_in: int, d_out: int) -> nn.Sequential:
    """The reference's Observable / Reconstructor: Linear-PReLU-BatchNorm-Linear, hidden (d_in + d_out) / 2."""
    hidden = round((d_in + d_out) * 0.5)  # Python's round, as the reference
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.PReLU(), nn.BatchNorm1d(hidden, eps=BN_EPS), nn.Linear(hidden, d_out)
    )


class LKIS(nn.Module):
    """Delay embedder ``phi``, BatchNorm, observables ``g`` and reconstructor ``h`` (lkis.Embedder + Network)."""

    def __init__(self, cfg: LKISConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.phi = nn.Linear(cfg.dim_y * cfg.delay, cfg.dim_emb)
        self.bn = nn.BatchNorm1d(cfg.dim_emb, eps=BN_EPS)
        self.g = _mlp(cfg.dim_emb, cfg.dim_obs)
        self.h = _mlp(cfg.dim_obs, cfg.dim_y)

    def observe(self, windows: torch.Tensor) -> torch.Tensor:
        """Delay windows ``(N, k, d)`` -> observables ``(N, n)``."""
        return self.g(self.bn(self.phi(windows.flatten(1))))

    def forward(self, series: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(T, d)`` -> ``g0, g1`` ``(N, n)``, reconstructions ``h0, h1`` and their targets ``(N, d)``, N = T - k."""
        y0, y1 = delay_pairs(series, self.cfg.delay)
        g0, g1 = self.observe(y0), self.observe(y1)  # BatchNorm statistics per half, as the reference
        return g0, g1, self.h(g0), self.h(g1), y0[:, -1], y1[:, -1]

    def loss(self, outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """``mse(K g0, g1) + alpha (mse(h0, y0) + mse(h1, y1)) / 2`` with ``K`` fitted on this batch."""
        g0, g1, h0, h1, t0, t1 = outputs
        k = koopman_operator(g0, g1)
        fit = F.mse_loss(F.linear(g0, k), g1)
        rec = 0.5 * (F.mse_loss(h0, t0) + F.mse_loss(h1, t1))
        return fit + self.cfg.alpha * rec

    def analyse(self, series: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """DMD of the observables: eigenvalues, ``log(lam) / dt`` (both ``(r,)``), decoded predictions ``(H, N, d)``."""
        g0, g1, *_ = self(series)
        lam, w, z = dmd(g0, g1)
        g_preds = dmd_predict(g0, lam, w, z, self.cfg.horizon)  # (H, N, n); step j predicts g_{t+j+1}
        y_preds = self.h(g_preds.real.flatten(0, 1)).unflatten(0, g_preds.shape[:2])
        return lam, torch.log(lam) / self.cfg.dt, y_preds


class LKISWorkload(Workload):
    """Input: one series ``(N + k, d)``; train: LKIS loss; eval: DMD analysis and prediction."""

    def forward(self) -> tuple[torch.Tensor, ...]:
        (series,) = self.inputs
        return self.module(series) if self.ctx.train else self.module.analyse(series)

    def compute_loss(self, outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.module.loss(outputs)


def _create_lkis(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(LKISConfig(), **kwargs)
    pairs = SMOKE_PAIRS if ctx.smoke and not ctx.batch_size_given else ctx.batch_size
    series = limit_cycle_series(ctx, pairs + cfg.delay, cfg)
    model = LKIS(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr) if ctx.train else None
    return LKISWorkload(ctx, model, (series,), optimizer=opt)


@register_model(
    domain="other",
    task="koopman_dmd",
    batch_size=(9993, 9993),
    tags=("linalg", "complex"),
    source="Takeishi, Kawahara & Yairi, Learning Koopman Invariant Subspaces for Dynamic Mode "
    "Decomposition, NeurIPS 2017; n-takeishi/learning-kis (Chainer)",
    param_count=195,  # phi 56 + BatchNorm 14 + g 96 + h 29, from the architecture (module docstring)
    unsupported_precisions=("fp16", "bf16", "amp"),
    notes="Batch size = delay pairs, full-batch as the reference (its Lorenz training series gives "
    "9,993). Synthetic data: a limit cycle seen through a quadratic, 5 known Koopman eigenvalues. "
    "Eval: exact DMD (SVD, complex eig) and a 10-step decoded prediction. fp16/bf16/amp "
    "unsupported: no half-precision pinv or SVD (amp hands pinv the half Linear outputs).",
)
def lkis_koopman(ctx: BuildContext, **kwargs) -> Workload:
    """LKIS (delay 7, 5 observables) on a scalar limit-cycle series, Koopman least-squares loss."""
    return _create_lkis(ctx, **kwargs)
