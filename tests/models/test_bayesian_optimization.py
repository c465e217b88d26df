"""Known-answer tests of the BoTorch-style Bayesian-optimisation loop (bayesopt_qlogei)."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.other.probabilistic import bayesian_optimization as bo


def _naive_ei(u: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Closed-form EI ``sigma (u Phi(u) + phi(u))``, written out with torch.distributions."""
    normal = torch.distributions.Normal(torch.zeros_like(u), torch.ones_like(u))
    return sigma * (u * normal.cdf(u) + normal.log_prob(u).exp())


def test_hartmann6_minimum() -> None:
    x_star = torch.tensor([0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573], dtype=torch.float64)
    assert bo.hartmann6(x_star).item() == pytest.approx(-3.32237, abs=1e-5)


def test_log_ei_equals_log_of_closed_form_ei_where_that_is_well_conditioned() -> None:
    u = torch.linspace(-5, 5, 101, dtype=torch.float64)
    sigma = torch.linspace(0.1, 3.0, 101, dtype=torch.float64)
    mean, best_f = u * sigma + 0.5, torch.tensor(0.5, dtype=torch.float64)
    torch.testing.assert_close(
        bo.log_ei(mean, sigma.square(), best_f), _naive_ei(u, sigma).log(), rtol=1e-10, atol=1e-12
    )
    # single precision: all three branches agree with the double-precision closed form
    got32 = bo.log_ei(mean.float(), sigma.square().float(), best_f.float())
    torch.testing.assert_close(got32.double(), _naive_ei(u, sigma).log(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_ei_stays_finite_and_accurate_far_in_the_tail(dtype: torch.dtype) -> None:
    # EI(u) = phi(u) / u^2 (1 - 3/u^2 + 15/u^4 - 105/u^6 + ...) as u -> -inf (Mills-ratio series)
    u = torch.tensor([-40.0, -100.0, -1e4], dtype=torch.float64)
    inv = u.pow(-2)
    reference = (
        -0.5 * u.square()
        - 0.5 * math.log(2 * math.pi)
        - 2 * u.abs().log()
        + torch.log1p(-3 * inv + 15 * inv.square() - 105 * inv.pow(3))
    )
    assert (_naive_ei(u, torch.ones_like(u)).log() == -math.inf).all()  # the naive log underflows
    u_in = u.to(dtype).requires_grad_(True)
    got = bo.log_ei_helper(u_in)
    (grad,) = torch.autograd.grad(got.sum(), u_in)
    assert torch.isfinite(got).all() and torch.isfinite(grad).all() and (grad > 0).all()
    torch.testing.assert_close(got.double(), reference, rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=0.0)


def test_q_log_ei_of_a_deterministic_posterior_is_the_log_of_the_max_improvement() -> None:
    best_f = torch.tensor(1.0)
    means = torch.tensor([[1.5, 1.2, 0.3], [0.9, 2.0, 1.9], [1.01, 0.5, 0.7]])  # (B, q)
    samples = means.expand(64, 3, 3)  # every MC sample equals the mean: zero posterior variance
    got = bo.q_log_ei_from_samples(samples, best_f)
    expected = (means.amax(-1) - best_f).log()
    # smoothing error: tau_relu = 1e-6 in the ReLU, tau_max = 1e-2 over log-improvements far apart
    torch.testing.assert_close(got, expected, rtol=0.0, atol=2e-3)
    # no improvement anywhere: tiny but finite (the fat tail), far below every case above
    worse = bo.q_log_ei_from_samples(torch.full((64, 1, 3), 0.5), best_f)
    assert torch.isfinite(worse).all() and worse.item() < -20


def test_normal_qmc_base_samples_are_standard_normal() -> None:
    z = bo.normal_qmc_samples(d=4, n=1024, seed=7, dtype=torch.float64)
    assert z.shape == (1024, 4) and torch.isfinite(z).all()
    assert z.mean(0).abs().max().item() < 5e-3  # QMC: far below the MC error 1/sqrt(n) = 0.03
    assert (z.var(0) - 1).abs().max().item() < 2e-2
    # erfinv(2u - 1) sqrt 2 is the normal inverse CDF of the same scrambled Sobol points
    u = torch.quasirandom.SobolEngine(4, scramble=True, seed=7).draw(1024, dtype=torch.float64)
    u = 0.5 + (1 - torch.finfo(torch.float64).eps) * (u - 0.5)
    torch.testing.assert_close(z, torch.special.ndtri(u), rtol=1e-9, atol=1e-9)


def _gp64(n: int = 30, noise: float = 1e-8) -> bo.MaternGP:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(n, 6, generator=gen, dtype=torch.float64)
    return bo.MaternGP(x, -bo.hartmann6(x), bo.BayesOptConfig(noise=noise, lengthscale=0.5))


def test_posterior_at_training_points_with_tiny_noise_reproduces_the_observations() -> None:
    gp = _gp64()
    mean, cov = gp.posterior(gp.train_x[:10].unsqueeze(1))  # 10 q = 1 batches
    torch.testing.assert_close(mean.squeeze(-1), -bo.hartmann6(gp.train_x[:10]), rtol=0.0, atol=1e-6)
    assert cov.abs().max().item() < 1e-6


def test_posterior_matches_dense_gaussian_conditioning_with_a_slow_matern_kernel() -> None:
    gp = _gp64(noise=1e-3)

    def slow_matern(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        r = ((a[:, None, :] - b[None, :, :]) / gp.lengthscale).pow(2).sum(-1).sqrt()
        return (1 + math.sqrt(5) * r + 5 / 3 * r**2) * torch.exp(-math.sqrt(5) * r)

    x = torch.rand(3, 4, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mean, cov = gp.posterior(x)
    y = (-bo.hartmann6(gp.train_x) - gp.y_mean) / gp.y_std
    k = slow_matern(gp.train_x, gp.train_x) + 1e-3 * torch.eye(len(y), dtype=torch.float64)
    for b in range(3):
        ks = slow_matern(x[b], gp.train_x)
        expected_mean = gp.y_mean + gp.y_std * ks @ torch.linalg.solve(k, y)
        expected_cov = gp.y_std**2 * (slow_matern(x[b], x[b]) - ks @ torch.linalg.solve(k, ks.T))
        torch.testing.assert_close(mean[b], expected_mean, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(cov[b], expected_cov, rtol=1e-8, atol=1e-9)


def test_adam_steps_increase_q_log_ei_and_keep_candidates_in_bounds() -> None:
    w = torchgauge.create("bayesopt_qlogei", mode="train", size="smoke")
    with torch.no_grad():
        before = w.module.q_log_ei(w.module.candidates).sum().item()
    losses = [w.step().item() for _ in range(30)]
    with torch.no_grad():
        after = w.module.q_log_ei(w.module.candidates).sum().item()
    assert after > before and losses[-1] < losses[0]
    assert w.module.candidates.min().item() >= 0.0 and w.module.candidates.max().item() <= 1.0


def test_q_log_ei_with_q_1_and_many_qmc_samples_approaches_analytic_log_ei() -> None:
    best_f = torch.tensor(0.3, dtype=torch.float64)
    u = torch.linspace(-2, 2, 9, dtype=torch.float64)
    sigma = torch.linspace(0.2, 2.0, 9, dtype=torch.float64)
    mean = best_f + u * sigma
    z = bo.normal_qmc_samples(1, 4096, seed=3, dtype=torch.float64)  # (S, 1)
    samples = (mean + sigma * z).unsqueeze(-1)  # (S, B, q = 1): mean + L z with L = sigma
    torch.testing.assert_close(
        bo.q_log_ei_from_samples(samples, best_f), bo.log_ei(mean, sigma.square(), best_f), rtol=0.0, atol=2e-2
    )


def test_workload_shapes() -> None:
    w = torchgauge.create("bayesopt_qlogei", mode="eval", size="smoke", batch_size=8)
    (raw_x,) = w.inputs
    assert raw_x.shape == (8, 2, 6) and 0 <= raw_x.min() and raw_x.max() <= 1
    log_ei, q_log_ei = w.step()
    assert log_ei.shape == (16,) and q_log_ei.shape == (8,)
    assert torch.isfinite(log_ei).all() and torch.isfinite(q_log_ei).all()
