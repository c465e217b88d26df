"""DAGMM: GMM estimation and sample energy against a slow per-component reference, z features, loss."""

from __future__ import annotations

import torch
from torch.distributions import MultivariateNormal

import torchgauge
from torchgauge.models.other.probabilistic.dagmm import (
    COV_EPS,
    DAGMM,
    DAGMMConfig,
    gmm_parameters,
    relative_euclidean_distance,
    sample_energy,
)

F64 = torch.float64


def _slow_gmm_energy(z: torch.Tensor, gamma: torch.Tensor):
    """Paper Eq. 5-6 one component at a time, with torch.distributions for the densities."""
    n, k = gamma.shape
    d = z.shape[1]
    phis, mus, covs, log_terms = [], [], [], []
    penalty = torch.zeros((), dtype=z.dtype)
    for j in range(k):
        g = gamma[:, j]
        phi = g.sum() / n
        mu = (g[:, None] * z).sum(0) / g.sum()
        cov = sum(g[i] * torch.outer(z[i] - mu, z[i] - mu) for i in range(n)) / g.sum()
        cov_eps = cov + COV_EPS * torch.eye(d, dtype=z.dtype)
        log_terms.append(torch.log(phi) + MultivariateNormal(mu, covariance_matrix=cov_eps).log_prob(z))
        penalty = penalty + sum(1 / cov_eps[i, i] for i in range(d))
        phis.append(phi)
        mus.append(mu)
        covs.append(cov)
    energy = -torch.log(torch.exp(torch.stack(log_terms, 1)).sum(1))
    return torch.stack(phis), torch.stack(mus), torch.stack(covs), energy, penalty


def test_gmm_parameters_and_energy_match_a_per_component_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(40, 3, generator=gen, dtype=F64) * torch.tensor([1.0, 0.3, 2.0], dtype=F64)
    gamma = torch.softmax(torch.randn(40, 4, generator=gen, dtype=F64), dim=1)
    phi, mu, cov = gmm_parameters(z, gamma)
    energy, penalty = sample_energy(z, phi, mu, cov)
    ref_phi, ref_mu, ref_cov, ref_energy, ref_penalty = _slow_gmm_energy(z, gamma)
    torch.testing.assert_close(phi, ref_phi)
    torch.testing.assert_close(mu, ref_mu)
    torch.testing.assert_close(cov, ref_cov)
    torch.testing.assert_close(energy, ref_energy)
    torch.testing.assert_close(penalty, ref_penalty)
    torch.testing.assert_close(phi.sum(), torch.ones((), dtype=F64))


def test_hard_memberships_give_each_clusters_mean_and_biased_covariance() -> None:
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(30, 3, generator=gen, dtype=F64)
    labels = torch.arange(30) % 2
    gamma = torch.nn.functional.one_hot(labels, 2).to(F64)
    phi, mu, cov = gmm_parameters(z, gamma)
    torch.testing.assert_close(phi, torch.tensor([0.5, 0.5], dtype=F64))
    for j in range(2):
        zj = z[labels == j]
        torch.testing.assert_close(mu[j], zj.mean(0))
        torch.testing.assert_close(cov[j], torch.cov(zj.T, correction=0))


def test_single_gaussian_energy_is_the_negative_log_density() -> None:
    # K = 1, phi = 1, Sigma = diag(1, 4, 9): E(0) = log sqrt|2 pi Sigma| = 1.5 log(2 pi) + log 6
    z = torch.zeros(1, 3, dtype=F64)
    cov = torch.diag(torch.tensor([1.0, 4.0, 9.0], dtype=F64)).unsqueeze(0) - COV_EPS * torch.eye(3, dtype=F64)
    energy, penalty = sample_energy(z, torch.ones(1, dtype=F64), torch.zeros(1, 3, dtype=F64), cov)
    expected = 1.5 * torch.log(torch.tensor(2 * torch.pi, dtype=F64)) + torch.log(torch.tensor(6.0, dtype=F64))
    torch.testing.assert_close(energy, expected.view(1))
    torch.testing.assert_close(penalty, torch.tensor(1 + 1 / 4 + 1 / 9, dtype=F64))


def test_reconstruction_features_for_a_hand_computed_pair() -> None:
    # x = (3, 4), x' = (3, 0): ||x - x'|| / ||x|| = 4 / 5, cos = 9 / (5 * 3)
    x = torch.tensor([[3.0, 4.0]], dtype=F64)
    x_hat = torch.tensor([[3.0, 0.0]], dtype=F64)
    torch.testing.assert_close(relative_euclidean_distance(x, x_hat), torch.tensor([0.8], dtype=F64))
    torch.testing.assert_close(torch.nn.functional.cosine_similarity(x, x_hat, dim=1), torch.tensor([0.6], dtype=F64))


def test_forward_builds_z_from_the_code_and_the_reconstruction_features() -> None:
    torch.manual_seed(0)
    model = DAGMM(DAGMMConfig()).double().eval()
    x = torch.rand(5, 120, dtype=F64)
    x_hat, z, gamma = model(x)
    assert z.shape == (5, 3) and gamma.shape == (5, 4)
    torch.testing.assert_close(z[:, 0], model.encoder(x).squeeze(-1))
    torch.testing.assert_close(z[:, 1], (x - x_hat).norm(dim=1) / x.norm(dim=1))
    torch.testing.assert_close(z[:, 2], (x * x_hat).sum(1) / (x.norm(dim=1) * x_hat.norm(dim=1)))
    torch.testing.assert_close(gamma.sum(1), torch.ones(5, dtype=F64))


def test_an_obvious_outlier_has_higher_energy_and_is_flagged() -> None:
    gen = torch.Generator().manual_seed(2)
    z = 0.5 * torch.randn(200, 3, generator=gen, dtype=F64)
    gamma = torch.softmax(torch.randn(200, 4, generator=gen, dtype=F64), dim=1)
    phi, mu, cov = gmm_parameters(z, gamma)
    outlier = torch.tensor([[6.0, -6.0, 6.0]], dtype=F64)
    energy, _ = sample_energy(torch.cat([z, outlier]), phi, mu, cov)
    assert energy[-1] > energy[:-1].max() + 10


def test_loss_falls_on_a_fixed_batch() -> None:
    torch.manual_seed(0)  # dropout in the estimation network
    w = torchgauge.create("dagmm_kdd", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(20)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.6 * losses[0]


def test_eval_flags_the_top_energies_under_the_fitted_gmm() -> None:
    w = torchgauge.create("dagmm_kdd", mode="eval", size="smoke")
    energy, flags = w.step()
    expected, _ = sample_energy(w.module(w.inputs[0])[1], w.module.phi, w.module.mu, w.module.cov)
    torch.testing.assert_close(energy, expected)
    assert flags.sum().item() == round(0.2 * len(energy))  # 64 rows: 12.8 -> 13 above the 80th percentile
    assert energy[flags].min() > energy[~flags].max()
