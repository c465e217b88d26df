"""Bayesian optimisation's inner loop as BoTorch runs it: qLogEI maximised by Adam over restarts.

BoTorch (Balandat et al., "BoTorch: A Framework for Efficient Monte-Carlo Bayesian
Optimization", NeurIPS 2020; MIT) with the LogEI acquisition functions of Ament et al.,
"Unexpected Improvements to Expected Improvement for Bayesian Optimization", NeurIPS 2023,
written in plain PyTorch from the descriptions in ``botorch/acquisition/logei.py``,
``botorch/acquisition/analytic.py`` (``_log_ei_helper``), ``botorch/utils/safe_math.py``
(``log_fatplus``, ``fatmax``, ``logmeanexp``, ``log1mexp``),
``botorch/utils/probability/utils.py`` (``ndtr``, ``phi``, ``log_phi``),
``botorch/sampling/qmc.py`` (``NormalQMCEngine``) and ``botorch/generation/gen.py``
(``gen_candidates_torch``). No code copied; botorch is not imported.

The surrogate is BoTorch's ``SingleTaskGP``: a constant mean, ``ScaleKernel(MaternKernel(nu=2.5,
ard_num_dims=D))`` with GPyTorch's distance computation (inputs centred, squared distances by
the quadratic expansion, ``clamp_min(1e-30).sqrt()``), a Gaussian likelihood, and the
``Standardize`` outcome transform (posteriors are un-standardised). Its posterior over ``f`` at
a q-batch ``X`` is ``N(mu + K_xX K^-1 r, K_xx - K_xX K^-1 K_Xx)`` through the Cholesky factor
of the training covariance, which (like GPyTorch's prediction cache) is computed once, since
the hyperparameters are fixed during acquisition optimisation.

qLogEI (``qLogExpectedImprovement``, ``fat=True``): posterior samples
``mu + L z`` with ``L = chol(Sigma)`` (GPyTorch's ``psd_safe_cholesky``: retried with growing
jitter on failure) and fixed base samples ``z`` from a scrambled Sobol sequence mapped through
the normal inverse CDF (``SobolQMCNormalSampler`` -> ``draw_sobol_normal_samples`` ->
``NormalQMCEngine(inv_transform=True)``, which uses ``erfinv``); the log of the fat-tailed
softplus of the improvement ``Y - best_f`` (``tau_relu = 1e-6``), a fat-tailed smooth max over
the q points (``fatmax``, ``tau_max = 1e-2``), and ``logmeanexp`` over the MC samples.
Analytic LogEI (q = 1): ``log(sigma) + log(phi(u) + u Phi(u))``, ``u = (mu - best_f) / sigma``,
with BoTorch's three-branch ``_log_ei_helper`` (naive above u = -1; ``log_phi + log1mexp`` of
``log(|u| Phi(u) / phi(u))`` computed with ``erfcx`` below; the leading asymptotic term below
``-1/sqrt(eps)``).

Train step = one iteration of ``gen_candidates_torch``: Adam (lr 0.025, BoTorch's default) on
``-sum(qLogEI)`` over ``num_restarts`` q-batches, then the candidates clamped to the bounds.
Eval step = the raw-sample stage of ``gen_batch_initial_conditions``: qLogEI at ``raw_samples``
scrambled-Sobol q-batches and analytic LogEI at every raw point as a q = 1 candidate, without
gradients. Full size: 6-D Hartmann, 100 training points, q = 4, 20 restarts, 512 MC samples,
1024 raw samples (BoTorch tutorial settings).

Differences from BoTorch: float32 (BoTorch recommends float64); GP hyperparameters are fixed
constants (BoTorch fits them with L-BFGS in ``fit_gpytorch_mll`` before this loop); safe_math's
infinity handling in ``logsumexp``/``fatmax`` is omitted (no infinities arise here); the
Boltzmann selection of restarts from the raw samples (``initialize_q_batch``) is not part of
the eval step. "Batch size" = restarts in train, raw samples in eval.
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
    "BayesOptConfig",
    "BayesOptLoop",
    "MaternGP",
    "fatmax",
    "hartmann6",
    "log_ei",
    "log_ei_helper",
    "log_fatplus",
    "normal_qmc_samples",
    "q_log_ei_from_samples",
]

TAU_RELU = 1e-6  # logei.py: smoothing of the ReLU in the improvement
TAU_MAX = 1e-2  # logei.py: smoothing of the max over the q points
MIN_VAR = 1e-12  # analytic.py: _mean_and_sigma clamps the variance below
_NEG_INV_SQRT2 = -(2**-0.5)
_LOG_SQRT_PI_DIV_2 = math.log(math.pi / 2) / 2
_LOG_SQRT_2PI = math.log(2 * math.pi) / 2

# Hartmann-6 (Dixon & Szegoe 1978 constants, as botorch.test_functions.Hartmann).
_HARTMANN_ALPHA = (1.0, 1.2, 3.0, 3.2)
_HARTMANN_A = (
    (10.0, 3.0, 17.0, 3.5, 1.7, 8.0),
    (0.05, 10.0, 17.0, 0.1, 8.0, 14.0),
    (3.0, 3.5, 1.7, 10.0, 17.0, 8.0),
    (17.0, 8.0, 0.05, 10.0, 0.1, 14.0),
)
_HARTMANN_P = (
    (1312, 1696, 5569, 124, 8283, 5886),
    (2329, 4135, 8307, 3736, 1004, 9991),
    (2348, 1451, 3522, 2883, 3047, 6650),
    (4047, 8828, 8732, 5743, 1091, 381),
)


@dataclass(frozen=True)
class BayesOptConfig:
    dim: int = 6  # Hartmann-6
    train_points: int = 100  # observations the GP is conditioned on
    q: int = 4  # candidates per batch
    mc_samples: int = 512  # SobolQMCNormalSampler sample shape
    lengthscale: float = 1 / 3  # mode of SingleTaskGP's legacy Gamma(3, 6) lengthscale prior
    outputscale: float = 1.0  # on standardised outcomes
    noise: float = 1e-4  # GaussianLikelihood's noise floor: near-noiseless Hartmann observations
    lr: float = 0.025  # gen_candidates_torch's default Adam learning rate


def hartmann6(x: torch.Tensor) -> torch.Tensor:
    """``(..., 6) -> (...)``: ``-sum_i alpha_i exp(-sum_j A_ij (x_j - P_ij)^2)``; minimum -3.32237."""
    alpha = x.new_tensor(_HARTMANN_ALPHA)
    a = x.new_tensor(_HARTMANN_A)
    p = x.new_tensor(_HARTMANN_P) * 1e-4
    inner = (a * (x.unsqueeze(-2) - p).pow(2)).sum(-1)  # (..., 4)
    return -(alpha * torch.exp(-inner)).sum(-1)


# -- safe_math / probability utils ---------------------------------------------------------------
def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - exp(x))`` for ``x < 0`` (Maechler 2012): two branches split at ``-log 2``."""
    return torch.where(x > -math.log(2), (-x.expm1()).log(), (-x.exp()).log1p())


def logmeanexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.logsumexp(x, dim=dim) - math.log(x.shape[dim])


def _cauchy(x: torch.Tensor) -> torch.Tensor:
    return 1 / (1 + x.square())


def log_fatplus(x: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Log of ``tau (softplus(x / tau) + 0.1 cauchy(x / tau))``: a ReLU with a fat left tail."""
    z = x / tau
    return (tau * (F.softplus(z) + 0.1 * _cauchy(z))).log()


def _pareto(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    """``(b0 / (b0 + b1 x + x^2))^(alpha/2)``: 1 at 0, decays as ``x^-alpha``."""
    half = alpha / 2
    beta_1 = 2 * half
    beta_0 = half * beta_1
    return (beta_0 / (beta_0 + beta_1 * x + x.square())).pow(half)


def fatmax(x: torch.Tensor, dim: int, tau: float = 1.0) -> torch.Tensor:
    """Smooth max with a fat (power-law) tail: ``M + tau log sum pareto((M - x) / tau)``."""
    m = x.amax(dim=dim, keepdim=True)
    return (m + tau * _pareto((m - x) / tau).sum(dim=dim, keepdim=True).log()).squeeze(dim)


def ndtr(x: torch.Tensor) -> torch.Tensor:
    """Standard normal CDF, as BoTorch's ``0.5 erfc(-x / sqrt 2)``."""
    return 0.5 * torch.erfc(_NEG_INV_SQRT2 * x)


def phi(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * x.square()) / math.sqrt(2 * math.pi)


def log_phi(x: torch.Tensor) -> torch.Tensor:
    return -0.5 * x.square() - _LOG_SQRT_2PI


# -- analytic LogEI ------------------------------------------------------------------------------
def log_ei_helper(u: torch.Tensor) -> torch.Tensor:
    """``log(phi(u) + u Phi(u))``, accurate and differentiable down to ``u ~ -1e20`` in fp32."""
    bound = -1.0
    u_upper = u.masked_fill(u < bound, bound)  # masked so no branch sees NaN gradients
    log_ei_upper = (phi(u_upper) + u_upper * ndtr(u_upper)).log()
    # u <= -1: log phi(u) + log(1 - exp(w)), w = log(|u| Phi(u) / phi(u)) through erfcx
    neg_inv_sqrt_eps = -1e6 if u.dtype == torch.float64 else -1e3
    u_lower = u.masked_fill(u > bound, bound)
    u_eps = u_lower.masked_fill(u < neg_inv_sqrt_eps, neg_inv_sqrt_eps)
    w = torch.log(torch.special.erfcx(_NEG_INV_SQRT2 * u_eps) * u_eps.abs()) + _LOG_SQRT_PI_DIV_2
    log_ei_lower = log_phi(u) + torch.where(u > neg_inv_sqrt_eps, log1mexp(w), -2 * u_lower.abs().log())
    return torch.where(u > bound, log_ei_upper, log_ei_lower)


def log_ei(mean: torch.Tensor, var: torch.Tensor, best_f: torch.Tensor) -> torch.Tensor:
    """Analytic ``LogExpectedImprovement`` (maximisation) from posterior mean and variance."""
    sigma = var.clamp_min(MIN_VAR).sqrt()
    return log_ei_helper((mean - best_f) / sigma) + sigma.log()


# -- qLogEI --------------------------------------------------------------------------------------
def normal_qmc_samples(d: int, n: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(n, d)`` quasi-normal draws: scrambled Sobol points through the inverse normal CDF."""
    u = torch.quasirandom.SobolEngine(dimension=d, scramble=True, seed=seed).draw(n, dtype=dtype)
    u = 0.5 + (1 - torch.finfo(dtype).eps) * (u - 0.5)  # keep 0 and 1 off the infinite tails
    return torch.erfinv(2 * u - 1) * math.sqrt(2)


def q_log_ei_from_samples(samples: torch.Tensor, best_f: torch.Tensor) -> torch.Tensor:
    """``(S, B, q) -> (B,)``: logmeanexp over S of fatmax over q of the log smoothed improvement."""
    log_improvement = log_fatplus(samples - best_f, tau=TAU_RELU)  # (S, B, q)
    return logmeanexp(fatmax(log_improvement, dim=-1, tau=TAU_MAX), dim=0)


def psd_safe_cholesky(a: torch.Tensor, max_tries: int = 3) -> torch.Tensor:
    """GPyTorch's: Cholesky, retried with jitter 1e-6 (fp32) / 1e-8 (fp64) x 10^k on failure."""
    chol, info = torch.linalg.cholesky_ex(a)
    if not info.any():
        return chol
    jitter = 1e-6 if a.dtype == torch.float32 else 1e-8
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    for k in range(max_tries):
        chol, info = torch.linalg.cholesky_ex(a + jitter * 10**k * eye)
        if not info.any():
            return chol
    raise torch.linalg.LinAlgError(f"covariance not positive definite after jitter {jitter * 10 ** (max_tries - 1)}")


# -- surrogate -----------------------------------------------------------------------------------
class MaternGP(nn.Module):
    """SingleTaskGP with fixed hyperparameters, conditioned once on ``(train_x, train_y)``."""

    def __init__(self, train_x: torch.Tensor, train_y: torch.Tensor, cfg: BayesOptConfig) -> None:
        super().__init__()
        self.outputscale, self.noise = cfg.outputscale, cfg.noise
        self.register_buffer("lengthscale", torch.full((train_x.shape[-1],), cfg.lengthscale, dtype=train_x.dtype))
        # Standardize outcome transform: the GP sees (y - m) / s, posteriors are mapped back.
        self.y_mean, self.y_std = train_y.mean().item(), train_y.std().item()
        self.register_buffer("train_x", train_x)
        self.register_buffer("best_f", train_y.max())  # best observed value, in original units
        with torch.no_grad():
            k = self.kernel(train_x, train_x)
            k.diagonal().add_(self.noise)
            chol = torch.linalg.cholesky(k)  # (n, n), cached like GPyTorch's prediction strategy
            resid = ((train_y - self.y_mean) / self.y_std).unsqueeze(-1)  # constant mean 0 after standardising
            self.register_buffer("chol", chol)
            self.register_buffer("alpha", torch.cholesky_solve(resid, chol))  # (n, 1) = K^-1 r

    def kernel(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """Matern-5/2 ARD: ``(..., N, D), (..., M, D) -> (..., N, M)``."""
        shift = x1.reshape(-1, x1.shape[-1]).mean(0)
        z1, z2 = (x1 - shift) / self.lengthscale, (x2 - shift) / self.lengthscale
        sq = z1.pow(2).sum(-1, keepdim=True) - 2 * z1 @ z2.transpose(-1, -2) + z2.pow(2).sum(-1).unsqueeze(-2)
        r = sq.clamp_min(1e-30).sqrt()  # GPyTorch's dist(): no NaN gradient at r = 0
        sqrt5_r = math.sqrt(5) * r
        return self.outputscale * (1 + sqrt5_r + 5 / 3 * r.square()) * torch.exp(-sqrt5_r)

    def posterior(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior of ``f`` at ``x`` ``(B, q, D)``: mean ``(B, q)`` and covariance ``(B, q, q)``."""
        k_xX = self.kernel(x, self.train_x)  # (B, q, n)
        mean = (k_xX @ self.alpha).squeeze(-1)  # (B, q)
        # one solve for all B q points: a broadcast (n, n) factor would be expanded to (B, n, n)
        n = k_xX.shape[-1]
        v = torch.linalg.solve_triangular(self.chol, k_xX.reshape(-1, n).T, upper=False)  # (n, B q) = L^-1 K_Xx
        v = v.T.reshape(k_xX.shape)  # (B, q, n)
        cov = self.kernel(x, x) - v @ v.transpose(-1, -2)  # (B, q, q)
        return self.y_mean + self.y_std * mean, self.y_std**2 * cov


class BayesOptLoop(nn.Module):
    """The GP, the fixed QMC base samples, and the ``(restarts, q, D)`` candidates being optimised."""

    def __init__(self, gp: MaternGP, base_samples: torch.Tensor, candidates: torch.Tensor) -> None:
        super().__init__()
        self.gp = gp
        self.register_buffer("base_samples", base_samples)  # (q, S): sample dim last, as GPyTorch's rsample
        self.candidates = nn.Parameter(candidates)
        d = candidates.shape[-1]
        self.register_buffer("bounds", torch.stack([torch.zeros(d), torch.ones(d)]).to(candidates))

    def q_log_ei(self, x: torch.Tensor) -> torch.Tensor:
        """qLogExpectedImprovement at q-batches ``x`` ``(B, q, D)`` -> ``(B,)``."""
        mean, cov = self.gp.posterior(x)
        chol = psd_safe_cholesky(cov)  # (B, q, q)
        samples = chol @ self.base_samples + mean.unsqueeze(-1)  # (B, q, S)
        return q_log_ei_from_samples(samples.permute(2, 0, 1), self.gp.best_f)  # (S, B, q) -> (B,)

    def log_ei(self, x: torch.Tensor) -> torch.Tensor:
        """Analytic LogExpectedImprovement at single points ``x`` ``(B, 1, D)`` -> ``(B,)``."""
        mean, cov = self.gp.posterior(x)
        return log_ei(mean.squeeze(-1), cov.squeeze(-1).squeeze(-1), self.gp.best_f)

    def forward(self, raw_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw-sample scoring: LogEI at every raw point ``(R q,)`` and qLogEI per raw q-batch ``(R,)``."""
        return self.log_ei(raw_x.reshape(-1, 1, raw_x.shape[-1])), self.q_log_ei(raw_x)


class BayesOptWorkload(Workload):
    """Train: one gen_candidates_torch iteration (Adam + clamp); eval: score the raw samples."""

    eval_grad_mode = "no_grad"

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if self.ctx.train:
            return self.module.q_log_ei(self.module.candidates)  # (restarts,)
        return self.module(*self.inputs)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return -outputs.sum()

    def train_step(self) -> torch.Tensor:
        loss = super().train_step()
        with torch.no_grad():  # columnwise_clamp back into the bounds
            lower, upper = self.module.bounds
            self.module.candidates.copy_(self.module.candidates.clamp(min=lower, max=upper))
        return loss


def _create_bayesopt(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(BayesOptConfig(), **kwargs)
    n, q, mc = ctx.pick(cfg.train_points, 16), ctx.pick(cfg.q, 2), ctx.pick(cfg.mc_samples, 16)
    train_x = ctx.rand(n, cfg.dim).cpu()
    gp = MaternGP(train_x, -hartmann6(train_x), cfg)  # negated: BO maximises
    seed = int(ctx.randint(0, 2**31 - 1, (1,)).item())
    base_samples = normal_qmc_samples(q, mc, seed).T.contiguous()  # (q, S), drawn once and reused
    if ctx.train:
        # the Sobol raw-sample stage would pick these; uniform points keep the build cheap
        module = BayesOptLoop(gp, base_samples, ctx.rand(ctx.batch_size, q, cfg.dim).cpu())
        opt = torch.optim.Adam(module.parameters(), lr=cfg.lr)
        return BayesOptWorkload(ctx, module, (), optimizer=opt)
    module = BayesOptLoop(gp, base_samples, torch.zeros(1, q, cfg.dim))
    sobol = torch.quasirandom.SobolEngine(dimension=q * cfg.dim, scramble=True, seed=seed + 1)
    raw_x = sobol.draw(ctx.batch_size).view(ctx.batch_size, q, cfg.dim).to(ctx.device)  # draw_sobol_samples on [0, 1]^D
    return BayesOptWorkload(ctx, module, (raw_x,))


@register_model(
    domain="other",
    task="bayesian_optimization",
    batch_size=(20, 1024),
    tags=("linalg",),
    source="BoTorch (Balandat et al., NeurIPS 2020) qLogExpectedImprovement / LogExpectedImprovement "
    "(Ament et al., NeurIPS 2023), botorch/acquisition/logei.py, botorch/utils/safe_math.py",
    unsupported_precisions=("fp16", "bf16", "amp"),
    notes="fp16/bf16/amp unsupported: no half-precision Cholesky, triangular solve or erfcx, and the "
    "log-space improvement with tau_relu = 1e-6 needs at least fp32 range. Batch size = restarts "
    "in train (each a q = 4 batch of 6-D candidates), raw samples in eval. No parameter count: "
    "the only parameters are the candidates (restarts x q x 6).",
)
def bayesopt_qlogei(ctx: BuildContext, **kwargs) -> Workload:
    """GP (Matern-5/2 ARD) on 100 Hartmann-6 points; qLogEI, q = 4, 512 QMC samples, Adam over restarts."""
    return _create_bayesopt(ctx, **kwargs)
