"""LFADS: Poisson reconstruction, posterior KLs, the GRU cell and the decoder unroll."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch.distributions import MultivariateNormal, Normal, kl_divergence

from torchgauge.models.other.sequence.lfads import LFADS, ClippedGRUCell, LFADSConfig, ar1_kl, normal_kl

TINY = LFADSConfig(
    data_dim=5, seq_len=7, ic_enc_dim=6, ci_enc_dim=4, con_dim=5, co_dim=2, ic_dim=3, gen_dim=8, fac_dim=4
)


def _counts(b: int = 4, cfg: LFADSConfig = TINY, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.poisson(torch.full((b, cfg.seq_len, cfg.data_dim), 2.0), generator=gen)


def test_reconstruction_is_hand_computed_poisson_nll() -> None:
    torch.manual_seed(0)
    cfg = replace(TINY, dropout=0.0, l2_gen_scale=0.0, l2_con_scale=0.0, kl_ic_scale=0.0, kl_co_scale=0.0)
    model = LFADS(cfg)
    x = _counts()
    torch.manual_seed(1)
    loss = model.loss(x)
    torch.manual_seed(1)  # the same posterior samples
    log_rates = model(x, sample=True)[0]
    # -log Poisson(k; r) with log k! by Stirling for k > 1 (what full=True adds), mean over entries
    stirling = torch.where(x > 1, x * torch.log(x) - x + 0.5 * torch.log(2 * math.pi * x), 0.0)
    expected = (log_rates.exp() - x * log_rates + stirling).mean()
    torch.testing.assert_close(loss, expected)
    # one entry by hand: k = 3, log r = 0.5
    nll = math.exp(0.5) - 3 * 0.5 + 3 * math.log(3) - 3 + 0.5 * math.log(2 * math.pi * 3)
    got = torch.nn.functional.poisson_nll_loss(torch.tensor(0.5), torch.tensor(3.0), log_input=True, full=True)
    assert math.isclose(got.item(), nll, rel_tol=1e-6)


def test_ic_kl_matches_closed_form() -> None:
    gen = torch.Generator().manual_seed(2)
    mean, std = torch.randn(5, 3, generator=gen), torch.rand(5, 3, generator=gen) + 0.1
    prior_mean, prior_logvar = torch.randn(3, generator=gen), torch.log(torch.full((3,), 0.1))
    prior_var = prior_logvar.exp()
    hand = 0.5 * (torch.log(prior_var / std**2) + (std**2 + (mean - prior_mean) ** 2) / prior_var - 1).sum(1).mean()
    torch.testing.assert_close(normal_kl(mean, std, prior_mean, prior_logvar), hand)
    ref = kl_divergence(Normal(mean, std), Normal(prior_mean, prior_var.sqrt())).sum(1).mean()
    torch.testing.assert_close(normal_kl(mean, std, prior_mean, prior_logvar), ref)


def test_ar1_kl_uses_the_stationary_ar1_density() -> None:
    b, t, d = 3, 6, 2
    gen = torch.Generator().manual_seed(3)
    mean, std = torch.randn(b, t, d, generator=gen), torch.rand(b, t, d, generator=gen) + 0.2
    tau, nvar = torch.tensor([10.0, 3.0]), torch.tensor([0.1, 0.5])
    torch.manual_seed(4)
    kl = ar1_kl(mean, std, tau.log(), nvar.log())
    torch.manual_seed(4)  # the same posterior sample
    sample = Normal(mean, std).rsample()
    a = torch.exp(-1 / tau)
    lags = (torch.arange(t)[:, None] - torch.arange(t)[None, :]).abs()
    log_p = 0.0
    for j in range(d):  # stationary AR(1): cov_ij = nvar / (1 - a^2) a^|i-j|
        cov = nvar[j] / (1 - a[j] ** 2) * a[j] ** lags
        log_p = log_p + MultivariateNormal(torch.zeros(t), cov).log_prob(sample[..., j])
    log_q = Normal(mean, std).log_prob(sample).sum((1, 2))
    torch.testing.assert_close(kl, (log_q - log_p).mean(), rtol=1e-4, atol=1e-4)


def test_clipped_gru_cell_equations() -> None:
    # TF-style GRU (gates ordered update, reset, candidate; reset applied to h before its matmul)
    torch.manual_seed(5)
    cell = ClippedGRUCell(4, 6, clip=0.3)
    x, h = torch.randn(3, 4), torch.randn(3, 6)
    w_i, w_h, b_i, b_h = cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh
    gate = [slice(0, 6), slice(6, 12), slice(12, 18)]
    pre = [x @ w_i[g].T + b_i[g] for g in gate]
    z = torch.sigmoid(pre[0] + h @ w_h[gate[0]].T + b_h[gate[0]])
    r = torch.sigmoid(pre[1] + h @ w_h[gate[1]].T + b_h[gate[1]])
    n = torch.tanh(pre[2] + (r * h) @ w_h[gate[2]].T + b_h[gate[2]])
    expected = (z * h + (1 - z) * n).clamp(-0.3, 0.3)
    out = cell(x, h)
    torch.testing.assert_close(out, expected)
    assert out.abs().max() == 0.3  # the clip is active on this draw


def test_eval_unroll_shapes_and_determinism() -> None:
    torch.manual_seed(6)
    model = LFADS(TINY).eval()
    x = _counts(b=2)
    log_rates, ic_mean, ic_std, co_means, co_stds = model(x, sample=False)
    assert log_rates.shape == (2, TINY.seq_len, TINY.data_dim)
    assert ic_mean.shape == ic_std.shape == (2, TINY.ic_dim)
    assert co_means.shape == co_stds.shape == (2, TINY.seq_len, TINY.co_dim)
    torch.testing.assert_close(model(x, sample=False)[0], log_rates, rtol=0, atol=0)
    factors, _, _ = model.decode(ic_mean, torch.zeros(2, TINY.seq_len, 2 * TINY.ci_enc_dim), sample=False)
    assert factors.shape == (2, TINY.seq_len, TINY.fac_dim)


def test_loss_falls_on_a_fixed_batch() -> None:
    torch.manual_seed(7)
    model = LFADS(replace(TINY, dropout=0.0))
    x = _counts(b=8, seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = model.loss(x)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
