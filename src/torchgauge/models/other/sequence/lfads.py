"""LFADS: latent factor analysis via dynamical systems, on Poisson spike counts.

Pandarinath et al., "Inferring single-trial neural population dynamics using sequential
auto-encoders", Nature Methods 2018 (and Sussillo et al., arXiv:1608.06315, 2016), following
the lfads-torch implementation by Sedler & Pandarinath (github.com/arsedler9/lfads-torch,
Apache-2.0), configuration ``configs/model/lfads_tf2_match.yaml`` (the synthetic Lorenz
benchmark: 29 neurons, 50 bins of 20 ms, batch 500). Written from that description; no code copied.

* encoder: two bidirectional clipped GRUs over the (dropped-out) spike counts, one for the
  initial condition (its final states -> mean and log-variance of ``q(g0)``), one for the
  controller inputs (its per-step outputs, forward half lagged by ``ci_lag`` steps);
* decoder, unrolled over time: a controller GRU cell reads ``[ci_t, f_{t-1}]`` and emits the
  posterior of the inferred input ``u_t``; the generator GRU cell steps on ``u_t``; factors are
  ``f_t = W_n g_t`` with each row of ``W`` scaled to unit L2 norm (``KernelNormalizedLinear``);
* readout: ``log r_t = W_out f_t + b``; reconstruction ``F.poisson_nll_loss(log r, x, full=True)``
  (log input, Stirling term, as the reference's ``recons.Poisson``), mean over all entries;
* priors: ``g0 ~ N(mu_p, 0.1)`` with a trainable mean (analytic KL by ``kl_divergence``);
  ``u`` ~ an AR(1) process with trainable time constant and noise variance (``tau`` 10,
  ``nvar`` 0.1), its KL estimated from one posterior sample (``log q - log p``), as the reference;
* loss = recon + L2 on the recurrent kernels (per-unit normalised) + scaled KLs; Adam, lr 1e-2.

Parameters (computed from the architecture above; no published count): 247,121 -- GRU
cells 78,600 (IC encoder) + 36,480 (CI encoder) + 44,928 (controller) + 30,900 (generator),
linear maps 40,200 + 10,100 + 4,000 + 130 + 1,189, encoder and controller initial states 392,
priors 200 (IC mean and log-variance, the latter frozen as in the reference) + 2 (AR prior).

Differs from the reference: the KL and L2 weights are used at full strength (the reference
ramps them in from 0 over epochs 0-80; a single step would otherwise train without them), and
coordinated dropout (a training-time augmentation that masks 35% of the input counts and scores
only those) and the plateau LR schedule are left out. The decoder carries its state as a tuple
rather than one concatenated tensor. Eval is the reference's sampling-free inference: posterior
means of ``g0`` and ``u_t``, dropout off, rates ``exp(log r)``.

Data: a seeded Lorenz system (sigma 10, rho 28, beta 8/3; Euler steps of 0.006 from random
starts after a burn-in), standardised and mapped by a random readout to the log firing rates of
29 neurons (about 5 spikes/s mean at 20 ms bins), sampled as Poisson counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.distributions import Independent, Normal, kl_divergence
from torch.distributions.transforms import AffineTransform
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["ClippedGRUCell", "LFADS", "LFADSConfig", "ar1_kl", "lorenz_spikes", "normal_kl"]


@dataclass(frozen=True)
class LFADSConfig:
    data_dim: int = 29  # neurons of the synthetic Lorenz dataset
    seq_len: int = 50  # 20 ms bins
    ic_enc_dim: int = 100
    ci_enc_dim: int = 64
    ci_lag: int = 1  # controller inputs see the data one step late (causality of the fwd half)
    con_dim: int = 64
    co_dim: int = 1  # inferred inputs
    ic_dim: int = 100
    gen_dim: int = 100
    fac_dim: int = 40
    dropout: float = 0.1
    cell_clip: float = 5.0  # GRU states are clamped to +-cell_clip
    ic_post_var_min: float = 1e-4
    ic_prior_var: float = 0.1
    co_prior_tau: float = 10.0  # AR(1) prior time constant, in bins
    co_prior_nvar: float = 0.1  # AR(1) prior noise variance
    l2_ic_enc_scale: float = 0.0
    l2_ci_enc_scale: float = 0.0
    l2_gen_scale: float = 2.25e-5
    l2_con_scale: float = 3.0e-4
    kl_ic_scale: float = 6.65e-7
    kl_co_scale: float = 5.0e-5
    lr: float = 1e-2


def _init_normal_(weight: torch.Tensor, fan: int) -> None:
    """The reference's variance scaling: ``N(0, 1 / fan)``."""
    nn.init.normal_(weight, std=1 / math.sqrt(fan))


class ClippedGRUCell(nn.GRUCell):
    """GRU cell written out gate by gate (reset applied before the recurrent candidate matmul),
    with its new state clamped to ``+-clip``: ``x (B, I), h (B, H) -> (B, H)``."""

    def __init__(self, input_size: int, hidden_size: int, clip: float, is_encoder: bool = False) -> None:
        super().__init__(input_size, hidden_size, bias=True)
        self.clip = clip
        _init_normal_(self.weight_ih, input_size + hidden_size if is_encoder else input_size)
        _init_normal_(self.weight_hh, input_size + hidden_size if is_encoder else hidden_size)
        with torch.no_grad():  # update and reset gates start biased open, as TF's GRU
            self.bias_ih.fill_(1.0)
            self.bias_ih[-hidden_size:] = 0.0
            self.bias_hh.zero_()

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        x_z, x_r, x_n = torch.chunk(x @ self.weight_ih.T + self.bias_ih, 3, dim=1)
        w_zr, w_n = torch.split(self.weight_hh, [2 * self.hidden_size, self.hidden_size])
        b_zr, b_n = torch.split(self.bias_hh, [2 * self.hidden_size, self.hidden_size])
        h_z, h_r = torch.chunk(h @ w_zr.T + b_zr, 2, dim=1)
        z, r = torch.sigmoid(x_z + h_z), torch.sigmoid(x_r + h_r)
        n = torch.tanh(x_n + (r * h) @ w_n.T + b_n)
        return torch.clamp(z * h + (1 - z) * n, -self.clip, self.clip)


class BidirectionalGRU(nn.Module):
    """``x (B, T, I) -> outputs (B, T, 2H), final states (B, 2H)``; learned initial states."""

    def __init__(self, input_size: int, hidden_size: int, clip: float) -> None:
        super().__init__()
        self.fwd = ClippedGRUCell(input_size, hidden_size, clip, is_encoder=True)
        self.bwd = ClippedGRUCell(input_size, hidden_size, clip, is_encoder=True)
        self.h0 = nn.Parameter(torch.zeros(2, 1, hidden_size))

    @staticmethod
    def _unroll(cell: ClippedGRUCell, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = []
        for x_t in x.transpose(0, 1):
            h = cell(x_t, h)
            outputs.append(h)
        return torch.stack(outputs, dim=1), h

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = x.shape[0]
        out_f, h_f = self._unroll(self.fwd, x, torch.tile(self.h0[0], (b, 1)))
        out_b, h_b = self._unroll(self.bwd, torch.flip(x, [1]), torch.tile(self.h0[1], (b, 1)))
        return torch.cat([out_f, torch.flip(out_b, [1])], dim=2), torch.cat([h_f, h_b], dim=1)


class KernelNormalizedLinear(nn.Linear):
    """Linear map whose weight rows are rescaled to unit L2 norm on every call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, F.normalize(self.weight, p=2, dim=1), self.bias)


def normal_kl(
    mean: torch.Tensor, std: torch.Tensor, prior_mean: torch.Tensor, prior_logvar: torch.Tensor
) -> torch.Tensor:
    """Batch-mean KL of the diagonal Gaussian posterior ``(B, D)`` from a diagonal Gaussian prior ``(D,)``."""
    posterior = Independent(Normal(mean, std), 1)
    prior = Independent(Normal(prior_mean, torch.exp(0.5 * prior_logvar)), 1)
    return kl_divergence(posterior, prior).mean()


def ar1_kl(mean: torch.Tensor, std: torch.Tensor, logtaus: torch.Tensor, lognvars: torch.Tensor) -> torch.Tensor:
    """One-sample estimate of the batch-mean KL of ``q(u) = N(mean, std)`` ``(B, T, D)`` from the
    AR(1) prior ``u_t = a u_{t-1} + e``, ``a = exp(-1 / tau)``, ``e ~ N(0, nvar)``, stationary start."""
    posterior = Independent(Normal(mean, std), 2)
    sample = posterior.rsample()
    alphas = torch.exp(-1.0 / torch.exp(logtaus))
    logpvars = lognvars - torch.log(1 - alphas**2)  # stationary variance nvar / (1 - a^2)
    means = AffineTransform(loc=0, scale=alphas)(torch.roll(sample, shifts=1, dims=1))
    stds = torch.ones_like(means) * torch.exp(0.5 * lognvars)
    means[:, 0] = 0.0
    stds[:, 0] = torch.exp(0.5 * logpvars)
    log_p = Independent(Normal(means, stds), 2).log_prob(sample)
    return (posterior.log_prob(sample) - log_p).mean()


class LFADS(nn.Module):
    """Spike counts ``(B, T, N)`` -> log rates ``(B, T, N)`` and the posterior parameters."""

    def __init__(self, cfg: LFADSConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.dropout = nn.Dropout(cfg.dropout)
        # encoder
        self.ic_enc = BidirectionalGRU(cfg.data_dim, cfg.ic_enc_dim, cfg.cell_clip)
        self.ic_linear = nn.Linear(2 * cfg.ic_enc_dim, 2 * cfg.ic_dim)
        self.ci_enc = BidirectionalGRU(cfg.data_dim, cfg.ci_enc_dim, cfg.cell_clip)
        # decoder
        self.ic_to_g0 = nn.Linear(cfg.ic_dim, cfg.gen_dim)
        self.con_h0 = nn.Parameter(torch.zeros(1, cfg.con_dim))
        self.con_cell = ClippedGRUCell(2 * cfg.ci_enc_dim + cfg.fac_dim, cfg.con_dim, cfg.cell_clip)
        self.co_linear = nn.Linear(cfg.con_dim, 2 * cfg.co_dim)
        self.gen_cell = ClippedGRUCell(cfg.co_dim, cfg.gen_dim, cfg.cell_clip)
        self.fac_linear = KernelNormalizedLinear(cfg.gen_dim, cfg.fac_dim, bias=False)
        self.readout = nn.Linear(cfg.fac_dim, cfg.data_dim)
        for lin, fan in (
            (self.ic_linear, 2 * cfg.ic_enc_dim),
            (self.ic_to_g0, cfg.ic_dim),
            (self.co_linear, cfg.con_dim),
            (self.readout, cfg.fac_dim),
        ):
            _init_normal_(lin.weight, fan)
        nn.init.zeros_(self.readout.bias)
        # priors: IC mean trainable, IC variance frozen (a Parameter without grad, as the reference)
        self.ic_prior_mean = nn.Parameter(torch.zeros(cfg.ic_dim))
        self.ic_prior_logvar = nn.Parameter(torch.full((cfg.ic_dim,), math.log(cfg.ic_prior_var)), requires_grad=False)
        self.co_prior_logtaus = nn.Parameter(torch.full((cfg.co_dim,), math.log(cfg.co_prior_tau)))
        self.co_prior_lognvars = nn.Parameter(torch.full((cfg.co_dim,), math.log(cfg.co_prior_nvar)))

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(B, T, N)`` -> IC posterior mean and std ``(B, ic_dim)``, controller inputs ``(B, T, 2 ci_enc_dim)``."""
        cfg = self.cfg
        x = self.dropout(x)
        _, h_n = self.ic_enc(x)
        ic_mean, ic_logvar = torch.split(self.ic_linear(self.dropout(h_n)), cfg.ic_dim, dim=1)
        ic_std = torch.sqrt(torch.exp(ic_logvar) + cfg.ic_post_var_min)
        ci, _ = self.ci_enc(x)
        ci_fwd, ci_bwd = torch.split(ci, cfg.ci_enc_dim, dim=2)
        t = x.shape[1]  # lag: step t sees the forward state of t - lag and the backward state of t + lag
        ci_fwd = F.pad(ci_fwd, (0, 0, cfg.ci_lag, 0))[:, :t]
        ci_bwd = F.pad(ci_bwd, (0, 0, 0, cfg.ci_lag))[:, -t:]
        return ic_mean, ic_std, torch.cat([ci_fwd, ci_bwd], dim=2)

    def decode(
        self, g0: torch.Tensor, ci: torch.Tensor, sample: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unroll controller and generator: factors ``(B, T, fac_dim)``, inferred-input means and stds
        ``(B, T, co_dim)``."""
        gen_init = self.ic_to_g0(g0)  # (B, gen_dim)
        gen = gen_init
        con = torch.tile(self.con_h0, (g0.shape[0], 1))
        factor = self.fac_linear(self.dropout(gen_init))
        factors, co_means, co_stds = [], [], []
        for ci_t in ci.transpose(0, 1):
            con = self.con_cell(self.dropout(torch.cat([ci_t, factor], dim=1)), con)
            co_mean, co_logvar = torch.split(self.co_linear(con), self.cfg.co_dim, dim=1)
            co_std = torch.sqrt(torch.exp(co_logvar))
            u = Independent(Normal(co_mean, co_std), 2).rsample() if sample else co_mean
            gen = self.gen_cell(u, gen)
            factor = self.fac_linear(self.dropout(gen))
            factors.append(factor)
            co_means.append(co_mean)
            co_stds.append(co_std)
        return torch.stack(factors, 1), torch.stack(co_means, 1), torch.stack(co_stds, 1)

    def forward(self, x: torch.Tensor, sample: bool = True) -> tuple[torch.Tensor, ...]:
        """Log rates ``(B, T, N)``, IC mean/std, inferred-input mean/std; posterior means if not ``sample``."""
        ic_mean, ic_std, ci = self.encode(x)
        g0 = Independent(Normal(ic_mean, ic_std), 1).rsample() if sample else ic_mean
        factors, co_means, co_stds = self.decode(g0, ci, sample)
        return self.readout(factors), ic_mean, ic_std, co_means, co_stds

    def l2_penalty(self) -> torch.Tensor:
        """Scaled half squared norms of the recurrent kernels, per recurrent weight of the penalised cells."""
        cfg = self.cfg
        kernels = [
            (self.ic_enc.fwd, cfg.l2_ic_enc_scale),
            (self.ic_enc.bwd, cfg.l2_ic_enc_scale),
            (self.gen_cell, cfg.l2_gen_scale),
            (self.ci_enc.fwd, cfg.l2_ci_enc_scale),
            (self.ci_enc.bwd, cfg.l2_ci_enc_scale),
            (self.con_cell, cfg.l2_con_scale),
        ]
        size = sum(3 * cell.hidden_size**2 for cell, scale in kernels if scale > 0)
        penalty = sum(scale * 0.5 * torch.norm(cell.weight_hh, 2) ** 2 for cell, scale in kernels)
        return penalty / (size + 1e-8)

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """Poisson reconstruction + L2 + KL(IC) + KL(inferred inputs), KL and L2 at full weight."""
        cfg = self.cfg
        log_rates, ic_mean, ic_std, co_means, co_stds = self(x, sample=True)
        recon = F.poisson_nll_loss(log_rates, x, log_input=True, full=True, reduction="none").mean()
        ic_kl = normal_kl(ic_mean, ic_std, self.ic_prior_mean, self.ic_prior_logvar) * cfg.kl_ic_scale
        co_kl = ar1_kl(co_means, co_stds, self.co_prior_logtaus, self.co_prior_lognvars) * cfg.kl_co_scale
        return recon + self.l2_penalty() + ic_kl + co_kl


def lorenz_spikes(
    ctx: BuildContext,
    batch: int,
    steps: int,
    neurons: int,
    dt: float = 0.006,
    burn_in: int = 500,
    bin_s: float = 0.02,
    mean_rate: float = 5.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded Poisson counts ``(B, T, N)`` driven by Lorenz trajectories, and their true rates."""
    state = ctx.randn(batch, 3, std=5.0).cpu() + torch.tensor([0.0, 0.0, 25.0])
    path = []
    for i in range(burn_in + steps):
        x, y, z = state.unbind(1)
        state = state + dt * torch.stack([10.0 * (y - x), x * (28.0 - z) - y, x * y - 8.0 / 3.0 * z], dim=1)
        if i >= burn_in:
            path.append(state)
    latents = torch.stack(path, 1)  # (B, T, 3)
    latents = (latents - latents.mean((0, 1))) / latents.std((0, 1))
    weights = ctx.randn(3, neurons).cpu() * 0.5
    rates = math.log(mean_rate * bin_s) + latents @ weights  # log counts per bin
    rates = rates.exp()
    counts = torch.poisson(rates, generator=ctx.generator())
    return counts.to(ctx.device), rates.to(ctx.device)


class LFADSWorkload(Workload):
    """Train: the LFADS loss on sampled posteriors; eval: rates at the posterior means."""

    def forward(self) -> torch.Tensor:
        (spikes,) = self.inputs
        if self.ctx.train:
            return self.module.loss(spikes)
        return self.module(spikes, sample=False)[0].exp()

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs


_SMOKE = dict(seq_len=4, ic_enc_dim=16, ci_enc_dim=8, con_dim=8, ic_dim=8, gen_dim=16, fac_dim=8)


def _create_lfads(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(LFADSConfig(), **{**(_SMOKE if ctx.smoke else {}), **kwargs})
    spikes, _ = lorenz_spikes(ctx, ctx.batch_size, cfg.seq_len, cfg.data_dim, burn_in=ctx.pick(500, 50))
    model = LFADS(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr) if ctx.train else None
    return LFADSWorkload(ctx, model, (spikes,), optimizer=opt)


@register_model(
    domain="other",
    task="latent_dynamics",
    batch_size=(500, 500),
    tags=("rnn", "vae"),
    source="Pandarinath et al., Nature Methods 2018 (LFADS); lfads-torch (Sedler & Pandarinath, "
    "Apache-2.0), configs/model/lfads_tf2_match.yaml",
    param_count=247_121,  # computed from the architecture: see the module docstring
    unsupported_precisions=("fp16",),
    notes="Synthetic Lorenz spike counts (29 neurons, 50 bins). Eval: posterior-mean rates. fp16 "
    "unsupported: pure-fp16 Adam (eps 1e-8 underflows to 0) makes the posterior means NaN within "
    "two steps; bf16 and amp are fine.",
)
def lfads_spikes(ctx: BuildContext, **kwargs) -> Workload:
    """LFADS with controller on 29-neuron Lorenz spike counts, batch 500."""
    return _create_lfads(ctx, **kwargs)
