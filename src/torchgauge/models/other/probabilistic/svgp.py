"""Stochastic variational GP regression (SVGP) trained on minibatches by the ELBO.

Hensman, Matthews and Ghahramani, "Scalable Variational Gaussian Process Classification",
AISTATS 2015 (and Hensman, Fusi and Lawrence, "Gaussian Processes for Big Data", UAI 2013);
the model of GPyTorch's "SVGP Regression" tutorial (``ApproximateGP`` with a
``CholeskyVariationalDistribution`` and a whitened ``VariationalStrategy``, MIT;
docs.gpytorch.ai/en/stable/examples/04_Variational_and_Approximate_GPs/SVGP_Regression_CUDA.html)
written in plain PyTorch: a constant mean, ``ScaleKernel(RBFKernel())`` (one lengthscale),
learned inducing locations, a Gaussian likelihood, ``VariationalELBO`` on minibatches of
1024 points of the 13,279-point elevators training split, and Adam (lr 0.01).

Whitening (GPyTorch's default): ``u = L v`` with ``L = chol(K_zz + jitter I)``, prior
``p(v) = N(0, I)`` and ``q(v) = N(m, S)``, ``S = L_S L_S^T`` with ``L_S`` a lower-triangular
parameter (GPyTorch masks the full square with ``tril``, initialised to the identity).
With ``A = L^-1 K_zx`` (one triangular solve) the predictive marginals of ``f(x)`` are
``mu(x) + A^T m`` and ``k(x, x) - ||A_x||^2 + ||L_S^T A_x||^2``. The ELBO per point is
``sum_i E_q[log N(y_i | f_i, sigma^2)] / b - KL(q(v) || p(v)) / n`` with the KL from
``torch.distributions`` (GPyTorch's MultivariateNormal is a subclass of it). Eval = the
tutorial's ``likelihood(model(x))``: predictive mean and variance of ``y*``.

Differences: 512 inducing points (the tutorial takes the first 500 training points; 512
keeps the K_zz size a power of two); data are synthetic and seeded: 18-D inputs uniform in
``[-1, 1]`` as the tutorial's rescaled elevators features, ``y`` a smooth function plus noise.
Inducing points start at the first 512 training inputs as in the tutorial. Written from the
paper and the GPyTorch documentation; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.distributions import MultivariateNormal, kl_divergence
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["SVGP", "SVGPConfig", "expected_log_likelihood"]

# GPyTorch's variational_cholesky_jitter for float32, added to K_zz before its Cholesky;
# the same constant in every dtype so the fp64 accuracy reference computes the same function.
JITTER = 1e-4
# GaussianLikelihood's noise constraint GreaterThan(1e-4).
NOISE_FLOOR = 1e-4
# Training points of the elevators split in the tutorial (80% of 16,599): the ELBO's KL weight.
ELEVATORS_TRAIN = 13_279
# Minibatch (= batch size) at smoke size unless the caller sets one.
SMOKE_MINIBATCH = 32


@dataclass(frozen=True)
class SVGPConfig:
    input_dim: int = 18  # elevators features
    num_inducing: int = 512  # M: K_zz is (M, M)
    num_data: int = ELEVATORS_TRAIN  # n in the ELBO's KL / n
    noise_std: float = 0.1  # of the synthetic targets


def _target(x: torch.Tensor) -> torch.Tensor:
    """``(N, D) -> (N,)``: a smooth function of every input dimension, with decaying weights."""
    w = 1 / torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
    return torch.sin(math.pi * x) @ w


def expected_log_likelihood(
    y: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, noise: torch.Tensor
) -> torch.Tensor:
    """``E_{f ~ N(mean, var)}[log N(y | f, noise)]`` elementwise (GaussianLikelihood.expected_log_prob)."""
    return -0.5 * (torch.log(2 * math.pi * noise) + ((y - mean).pow(2) + var) / noise)


class SVGP(nn.Module):
    """Whitened SVGP: inducing locations ``Z (M, D)``, ``q(v) = N(m, L_S L_S^T)``, Gaussian likelihood."""

    def __init__(self, inducing_points: torch.Tensor) -> None:
        super().__init__()
        m = inducing_points.shape[0]
        self.inducing_points = nn.Parameter(inducing_points.clone())  # learn_inducing_locations=True
        # CholeskyVariationalDistribution: mean ~ N(0, 1e-3^2), Cholesky factor = I + N(0, 1e-3^2)
        self.variational_mean = nn.Parameter(1e-3 * torch.randn(m))
        self.chol_variational_covar = nn.Parameter(torch.eye(m) + 1e-3 * torch.randn(m, m))
        self.mean_constant = nn.Parameter(torch.zeros(()))
        self.raw_lengthscale = nn.Parameter(torch.zeros(()))  # softplus(0) = 0.693, as GPyTorch
        self.raw_outputscale = nn.Parameter(torch.zeros(()))
        self.raw_noise = nn.Parameter(torch.zeros(()))

    @property
    def noise(self) -> torch.Tensor:
        return F.softplus(self.raw_noise) + NOISE_FLOOR

    def kernel(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        """``s exp(-|x1 - x2|^2 / (2 l^2))``: ``(N, D), (M, D) -> (N, M)``."""
        z1, z2 = x1 / F.softplus(self.raw_lengthscale), x2 / F.softplus(self.raw_lengthscale)
        shift = z1.mean(0)  # centred first, as GPyTorch: the expansion below then cancels less
        z1, z2 = z1 - shift, z2 - shift
        sq = z1.pow(2).sum(-1, keepdim=True) + z2.pow(2).sum(-1) - 2 * z1 @ z2.T
        return F.softplus(self.raw_outputscale) * torch.exp(-0.5 * sq.clamp_min(0))

    def variational_scale_tril(self) -> torch.Tensor:
        """``L_S (M, M)``: the lower triangle of the square parameter, as GPyTorch."""
        return self.chol_variational_covar.tril()

    def marginals(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive mean and variance of the latent ``f(x)``: two ``(N,)``."""
        z = self.inducing_points
        k_zz = self.kernel(z, z)
        k_zz = k_zz + JITTER * torch.eye(z.shape[0], dtype=k_zz.dtype, device=k_zz.device)
        chol = torch.linalg.cholesky(k_zz)  # (M, M) lower
        interp = torch.linalg.solve_triangular(chol, self.kernel(z, x), upper=False)  # (M, N) = L^-1 K_zx
        mean = self.mean_constant + interp.T @ self.variational_mean
        covar_term = self.variational_scale_tril().T @ interp  # (M, N) = L_S^T A
        k_xx = F.softplus(self.raw_outputscale).expand(x.shape[0])  # RBF: k(x, x) = s
        var = k_xx - interp.pow(2).sum(0) + covar_term.pow(2).sum(0)
        return mean, var.clamp_min(1e-8)  # GPyTorch also clamps the predictive variance

    def kl_divergence(self) -> torch.Tensor:
        """``KL(q(v) || p(v))`` with the whitened prior ``p(v) = N(0, I)``."""
        m = self.variational_mean
        # validate_args=False as GPyTorch: L_S is an unconstrained lower-triangular parameter.
        q = MultivariateNormal(m, scale_tril=self.variational_scale_tril(), validate_args=False)
        p = MultivariateNormal(
            torch.zeros_like(m), scale_tril=torch.eye(m.shape[0], dtype=m.dtype, device=m.device), validate_args=False
        )
        return kl_divergence(q, p)

    def forward(self, x: torch.Tensor, y: torch.Tensor, num_data: int) -> torch.Tensor:
        """The minibatch ELBO of VariationalELBO: ``sum E[log p(y|f)] / b - KL / n``."""
        mean, var = self.marginals(x)
        ell = expected_log_likelihood(y, mean, var, self.noise).sum() / y.shape[0]
        return ell - self.kl_divergence() / num_data

    def predict(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``likelihood(model(x))``: mean and variance of ``y*`` ``(N,)``."""
        mean, var = self.marginals(x)
        return mean, var + self.noise


class SVGPWorkload(Workload):
    """Train: negative minibatch ELBO; eval: predictive mean and variance at a test batch."""

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x, y, num_data = self.inputs
        if self.ctx.train:
            return self.module(x, y, num_data)
        return self.module.predict(x)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return -outputs


def _create_svgp(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(SVGPConfig(), **kwargs)
    if ctx.smoke:
        cfg = replace(cfg, num_inducing=16)
    b = SMOKE_MINIBATCH if ctx.smoke and not ctx.batch_size_given else ctx.batch_size
    inducing = ctx.rand(cfg.num_inducing, cfg.input_dim) * 2 - 1  # the tutorial's train_x[:M]
    x = ctx.rand(b, cfg.input_dim) * 2 - 1
    y = _target(x) + cfg.noise_std * ctx.randn(b)
    model = SVGP(inducing.cpu())
    opt = torch.optim.Adam(model.parameters(), lr=0.01) if ctx.train else None
    return SVGPWorkload(ctx, model, (x, y, cfg.num_data), optimizer=opt)


@register_model(
    domain="other",
    task="gaussian_process",
    batch_size=(1024, 1024),
    tags=("linalg",),
    source="Hensman et al., Scalable Variational GP Classification, AISTATS 2015; GPyTorch SVGP "
    "regression tutorial (ApproximateGP, whitened VariationalStrategy)",
    param_count=271_876,  # Z 512x18 + mean 512 + L_S 512x512 + constant, lengthscale, outputscale, noise
    unsupported_precisions=("fp16", "bf16", "amp"),
    notes="fp16/bf16/amp unsupported: no half-precision Cholesky or triangular solve. Batch size = "
    "minibatch of training points (train) or test points (eval); 512 inducing points.",
)
def svgp_regression(ctx: BuildContext, **kwargs) -> Workload:
    """Whitened SVGP, 512 inducing points, minibatch ELBO on 18-D inputs, Adam 0.01."""
    return _create_svgp(ctx, **kwargs)
