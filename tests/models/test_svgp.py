"""Whitened SVGP: KL, predictive marginals and the expected log-likelihood against dense float64 references."""

from __future__ import annotations

import math

import torch

import torchgauge
from torchgauge.models.other.probabilistic.svgp import JITTER, SVGP, expected_log_likelihood

F64 = torch.float64


def _model(m: int = 6, d: int = 3, seed: int = 0) -> SVGP:
    torch.manual_seed(seed)
    model = SVGP(torch.rand(m, d, dtype=F64) * 2 - 1).double()
    with torch.no_grad():  # a non-trivial q(v): random mean, random lower factor with positive diagonal
        model.variational_mean.copy_(torch.randn(m, dtype=F64))
        chol = torch.randn(m, m, dtype=F64).tril(-1) * 0.3 + torch.diag(torch.rand(m, dtype=F64) + 0.5)
        model.chol_variational_covar.copy_(chol + torch.randn(m, m, dtype=F64).triu(1))  # upper part is ignored
        model.raw_lengthscale.fill_(0.3)
        model.mean_constant.fill_(0.2)
    return model


def test_kl_matches_the_closed_form_against_a_standard_normal() -> None:
    model = _model()
    mean, chol = model.variational_mean.detach(), model.chol_variational_covar.detach().tril()
    s = chol @ chol.T
    m = mean.numel()
    # KL(N(mu, S) || N(0, I)) = (tr S + mu^T mu - M - log det S) / 2
    expected = 0.5 * (s.trace() + mean @ mean - m - torch.logdet(s))
    torch.testing.assert_close(model.kl_divergence().detach(), expected)


def test_kl_is_zero_when_q_equals_the_whitened_prior() -> None:
    model = _model()
    with torch.no_grad():
        model.variational_mean.zero_()
        model.chol_variational_covar.copy_(torch.eye(6, dtype=F64))
    assert abs(model.kl_divergence().item()) < 1e-12


def test_marginals_match_the_dense_unwhitened_predictive() -> None:
    # u = L v, q(u) = N(L m, L S L^T):
    # f(x) ~ N(mu + K_xz K_zz^-1 L m, k_xx - K_xz K_zz^-1 K_zx + K_xz K_zz^-1 L S L^T K_zz^-1 K_zx)
    model = _model()
    x = torch.rand(5, 3, dtype=F64) * 2 - 1
    z = model.inducing_points.detach()
    with torch.no_grad():
        k_zz = model.kernel(z, z) + JITTER * torch.eye(6, dtype=F64)
        k_xz, k_xx = model.kernel(x, z), model.kernel(x, x)
        chol = torch.linalg.cholesky(k_zz)
        ls = model.chol_variational_covar.tril()
        proj = k_xz @ torch.linalg.inv(k_zz)  # (N, M)
        mean = model.mean_constant + proj @ chol @ model.variational_mean
        cov = k_xx - proj @ k_xz.T + proj @ chol @ ls @ ls.T @ chol.T @ proj.T
        got_mean, got_var = model.marginals(x)
    torch.testing.assert_close(got_mean, mean)
    torch.testing.assert_close(got_var, cov.diagonal())


def test_prior_variational_distribution_predicts_the_prior() -> None:
    model = _model()
    with torch.no_grad():
        model.variational_mean.zero_()
        model.chol_variational_covar.copy_(torch.eye(6, dtype=F64))
        mean, var = model.marginals(torch.rand(4, 3, dtype=F64))
    torch.testing.assert_close(mean, torch.full((4,), 0.2, dtype=F64))
    torch.testing.assert_close(var, torch.full((4,), math.log(2), dtype=F64))  # outputscale softplus(0)


def test_expected_log_likelihood_is_the_gaussian_log_density_minus_the_variance_term() -> None:
    y, mean, noise = (
        torch.tensor([0.3, -1.0], dtype=F64),
        torch.tensor([0.1, 0.5], dtype=F64),
        torch.tensor(0.2, dtype=F64),
    )
    log_density = torch.distributions.Normal(mean, noise.sqrt()).log_prob(y)
    torch.testing.assert_close(expected_log_likelihood(y, mean, torch.zeros(2, dtype=F64), noise), log_density)
    var = torch.tensor([0.4, 0.1], dtype=F64)
    # Monte Carlo check of E_f[log N(y | f, noise)] with f ~ N(mean, var)
    gen = torch.Generator().manual_seed(0)
    f = mean + var.sqrt() * torch.randn(200_000, 2, generator=gen, dtype=F64)
    mc = torch.distributions.Normal(f, noise.sqrt()).log_prob(y).mean(0)
    torch.testing.assert_close(expected_log_likelihood(y, mean, var, noise), mc, atol=0.01, rtol=0)


def test_negative_elbo_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("svgp_regression", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(30)]
    assert losses[-1] < losses[0] - 0.1
