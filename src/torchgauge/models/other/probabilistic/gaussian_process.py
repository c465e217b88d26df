"""Exact Gaussian-process regression, trained by maximising the marginal likelihood.

The model of GPyTorch's "Simple GP Regression" tutorial (``ExactGP``, MIT;
docs.gpytorch.ai/en/stable/examples/01_Exact_GPs/Simple_GP_Regression.html) written in
plain PyTorch: a constant mean, a scaled RBF kernel with one lengthscale per input dimension
(ARD), a Gaussian likelihood, and Adam (lr 0.1) on the negative exact marginal
log-likelihood divided by the number of training points (``ExactMarginalLogLikelihood``).
Hyperparameters are GPyTorch's: raw parameters initialised at 0 and made positive by
softplus, the noise floored at 1e-4 (``GreaterThan(1e-4)``).

One training step builds ``K = s k(X, X) + (sigma^2 + jitter) I``, factors it by
``torch.linalg.cholesky``, solves for ``alpha = K^-1 (y - mu)`` by ``torch.cholesky_solve``
and back-propagates through
``log p(y) = -(r^T alpha)/2 - sum(log diag L) - n/2 log(2 pi)``. GPyTorch switches to
conjugate gradients and stochastic Lanczos quadrature above 800 points by default
(``max_cholesky_size``); this is the exact Cholesky path at every size. One eval step is the
posterior predictive of ``y*`` at the test points (the tutorial's ``likelihood(model(x*))``):
mean ``mu + k(X*, X) alpha`` and variance ``s + sigma^2 - ||L^-1 k(X, X*)||^2``, with the
Cholesky factor recomputed each time (GPyTorch caches it until the hyperparameters change).

"Batch size" = training points ``n``. Data: 8-D inputs uniform on the unit cube and
``y = sum_d sin(2 pi x_d) / (d + 1) + 0.2 eps``: the tutorial's ``sin(2 pi x)`` with noise
variance 0.04, in 8 dimensions of decaying relevance so the ARD lengthscales have something
to learn. Written from the description above; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["ExactGP", "ExactGPConfig", "target_function"]

# GPyTorch GaussianLikelihood's default noise constraint: GreaterThan(1e-4).
NOISE_FLOOR = 1e-4
# Diagonal jitter relative to the signal variance s (= mean of diag k(X, X)). In fp32 each
# entry of K carries a rounding error ~ u s (u = 6e-8), which can move K's smallest
# eigenvalue by up to ~ n u s (1.2e-4 s at n = 2048): with s / sigma^2 above ~1e4 the
# noise floor alone lets cholesky fail. A sweep at n = 2048 in fp32 (lengthscales 0.01 to
# 1e4, s 1e-3 to 1e4, sigma^2 at the floor) failed with 0 and 1e-5 s and never with 1e-4 s.
# The same constant in every dtype, so the fp64 accuracy reference computes the same function.
JITTER = 1e-4
# Points of the smoke problem (the batch size is the number of training points).
SMOKE_TRAIN_POINTS, SMOKE_TEST_POINTS = 64, 16


@dataclass(frozen=True)
class ExactGPConfig:
    input_dim: int = 8  # ARD lengthscales: one per input dimension
    test_points: int = 512  # where eval predicts
    noise_std: float = 0.2  # of the synthetic observations: the tutorial's sqrt(0.04)


def target_function(x: torch.Tensor) -> torch.Tensor:
    """``(N, D) -> (N,)``: ``sum_d sin(2 pi x_d) / (d + 1)``, smooth with decaying relevance."""
    relevance = 1 / torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
    return (torch.sin(2 * math.pi * x) * relevance).sum(-1)


class ExactGP(nn.Module):
    """Constant mean, ``ScaleKernel(RBFKernel(ard_num_dims=D))``, Gaussian likelihood."""

    def __init__(self, input_dim: int) -> None:
        super().__init__()
        self.mean_constant = nn.Parameter(torch.zeros(()))
        self.raw_lengthscale = nn.Parameter(torch.zeros(input_dim))  # softplus(0) = 0.693, as GPyTorch
        self.raw_outputscale = nn.Parameter(torch.zeros(()))
        self.raw_noise = nn.Parameter(torch.zeros(()))

    @property
    def lengthscale(self) -> torch.Tensor:
        return F.softplus(self.raw_lengthscale)

    @property
    def outputscale(self) -> torch.Tensor:
        return F.softplus(self.raw_outputscale)

    @property
    def noise(self) -> torch.Tensor:
        """Observation noise variance ``sigma^2``."""
        return F.softplus(self.raw_noise) + NOISE_FLOOR

    def kernel(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """``s exp(-|(x1 - x2) / l|^2 / 2)``: ``(N, D), (M, D) -> (N, M)``."""
        z1, z2 = x1 / self.lengthscale, x2 / self.lengthscale
        # Centre first (as GPyTorch): distances are unchanged and the expansion below cancels less.
        shift = z1.mean(0)
        z1, z2 = z1 - shift, z2 - shift
        sq = z1.pow(2).sum(-1, keepdim=True) + z2.pow(2).sum(-1) - 2 * z1 @ z2.T
        return self.outputscale * torch.exp(-0.5 * sq.clamp_min(0))

    def factor(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cholesky factor ``L`` of ``K_y = K + (sigma^2 + jitter) I``, ``alpha = K_y^-1 r``, ``r = y - mu``
        ``(N, 1)``."""
        k = self.kernel(x, x)
        k.diagonal().add_(self.noise + JITTER * self.outputscale)
        chol = torch.linalg.cholesky(k)  # (N, N) lower
        resid = (y - self.mean_constant).unsqueeze(-1)
        return chol, torch.cholesky_solve(resid, chol), resid

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Exact marginal log-likelihood ``log p(y | X) / n`` (GPyTorch's ExactMarginalLogLikelihood)."""
        chol, alpha, resid = self.factor(x, y)
        n = y.shape[0]
        data_fit = (resid * alpha).sum()
        log_det = 2 * chol.diagonal().log().sum()
        return -0.5 * (data_fit + log_det + n * math.log(2 * math.pi)) / n

    def predict(self, x: torch.Tensor, y: torch.Tensor, x_star: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior predictive mean and variance of ``y*`` at ``x_star`` ``(M, D)``: two ``(M,)``."""
        chol, alpha, _ = self.factor(x, y)
        k_star = self.kernel(x_star, x)  # (M, N)
        mean = self.mean_constant + (k_star @ alpha).squeeze(-1)
        v = torch.linalg.solve_triangular(chol, k_star.T, upper=False)  # (N, M) = L^-1 k(X, X*)
        var = self.outputscale + self.noise - v.pow(2).sum(0)
        return mean, var


class ExactGPWorkload(Workload):
    """Train: negative marginal log-likelihood per point; eval: predictive mean and variance."""

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        train_x, train_y, test_x = self.inputs
        if self.ctx.train:
            return self.module(train_x, train_y)
        return self.module.predict(train_x, train_y, test_x)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return -outputs


def _create_exact_gp(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(ExactGPConfig(), **kwargs)
    n = SMOKE_TRAIN_POINTS if ctx.smoke and not ctx.batch_size_given else ctx.batch_size
    m = ctx.pick(cfg.test_points, SMOKE_TEST_POINTS)
    train_x = ctx.rand(n, cfg.input_dim)
    train_y = target_function(train_x) + cfg.noise_std * ctx.randn(n)
    test_x = ctx.rand(m, cfg.input_dim)
    model = ExactGP(cfg.input_dim)
    opt = torch.optim.Adam(model.parameters(), lr=0.1) if ctx.train else None
    return ExactGPWorkload(ctx, model, (train_x, train_y, test_x), optimizer=opt)


@register_model(
    domain="other",
    task="gaussian_process",
    batch_size=(2048, 2048),
    tags=("linalg",),
    source="GPyTorch ExactGP regression tutorial (Simple_GP_Regression); Rasmussen & Williams, "
    "Gaussian Processes for Machine Learning, 2006, Alg. 2.1",
    param_count=11,  # mean 1 + ARD lengthscales 8 + outputscale 1 + noise 1
    unsupported_precisions=("fp16", "bf16", "amp"),
    notes="fp16/bf16/amp unsupported: no half-precision Cholesky or triangular solves, and a kernel "
    "matrix rounded to half precision (amp runs the distance matmul in it) is not positive "
    "definite once the noise is learned; at initialisation amp already moves the loss by 10%. "
    "Batch size = training points; eval predicts at 512 test points.",
)
def gp_exact_regression(ctx: BuildContext, **kwargs) -> Workload:
    """Exact GP (constant mean, scaled ARD RBF kernel), marginal likelihood on 2048 8-D points."""
    return _create_exact_gp(ctx, **kwargs)
