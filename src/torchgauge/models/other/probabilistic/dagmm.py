"""DAGMM: Deep Autoencoding Gaussian Mixture Model for unsupervised anomaly detection.

Zong et al., ICLR 2018 (openreview.net/forum?id=BJJLHbb0-), in the paper's KDDCUP99
configuration (Sec. 4.3): a compression network FC(120,60,tanh)-FC(60,30,tanh)-FC(30,10,tanh)-
FC(10,1) with the mirror decoder; the low-dimensional representation
``z = [z_c, relative Euclidean distance, cosine similarity]`` (3-D, Eq. 1-3); an estimation
network FC(3,10,tanh)-Drop(0.5)-FC(10,4,softmax) giving soft memberships ``gamma`` in K = 4
components; GMM parameters ``phi, mu, Sigma`` estimated from ``gamma`` over the batch (Eq. 5);
sample energy ``E(z) = -log sum_k phi_k exp(-(z - mu_k)^T Sigma_k^-1 (z - mu_k) / 2) / sqrt|2 pi Sigma_k|``
(Eq. 6); objective ``mean ||x - x'||^2 + lambda1 mean E(z) + lambda2 sum_k sum_j 1 / Sigma_kjj``
with lambda1 = 0.1, lambda2 = 0.005 (Eq. 7), Adam at lr 1e-4 and batch 1024; gradients
clipped to norm 5 before each step, as the PyTorch reference below does.

Structure follows danieltan07/dagmm (PyTorch, model.py and solver.py; the repository carries
no licence file, so nothing is copied): the same Sequential stacks, ``compute_gmm_params`` as
broadcast sums over ``(N, K, D)``, the GMM parameters kept in buffers at test time, and the
test-time path of ``solver.test``: GMM parameters estimated once over training data, energies
of the test batch under them, and anomalies flagged above the energy percentile matching the
anomaly ratio (KDDCUP99: the top 20%, ``np.percentile(energy, 100 - 20)``). Differences from
that code, all toward the paper's equations: the covariance inverse is one batched
``torch.linalg.inv`` instead of a per-component ``torch.inverse`` loop; the normaliser
``sqrt|2 pi Sigma_k|`` comes from ``torch.linalg.slogdet`` and the mixture sum from
``torch.logsumexp``, in the log domain, where the reference used a hand-written Cholesky
(``potrf``, from before it had a backward) whose diagonal product it then square-rooted a
second time (it computes ``|2 pi Sigma|^(1/4)``), and a max-shifted exp/log with ``+1e-12``;
the reference's ``1e-12 I`` on the covariance (a no-op in fp32) is ``COV_EPS = 1e-6 I``, which
keeps the smoke-size covariances invertible. The threshold is the percentile of the scored
batch's energies (the reference pools training and test energies).

Input: 120 features per record (the paper's one-hot + min-max-normalised KDDCUP99 encoding;
danieltan07's preprocessing yields 118). Synthetic data: a normal cluster (a random centre in
[0, 1]^120 plus small noise) with ``ANOMALY_RATIO`` of the rows drawn uniform in [0, 1]^120.
Parameter count 19,025 from the architecture: encoder 7,260 + 1,830 + 310 + 11, decoder
20 + 330 + 1,860 + 7,320, estimation network 40 + 44.
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
    "DAGMM",
    "DAGMMConfig",
    "dagmm_loss",
    "gmm_parameters",
    "relative_euclidean_distance",
    "sample_energy",
]

# Added to each covariance's diagonal before inversion (the reference adds 1e-12, which is
# below fp32 resolution; with 64 smoke rows a component can otherwise become singular).
COV_EPS = 1e-6
# Fraction of anomalous rows in the synthetic data, and of rows flagged: KDDCUP99's 20%.
ANOMALY_RATIO = 0.2
# Rows in a smoke batch: a 3-D covariance per component needs well over 3 points.
SMOKE_ROWS = 64


@dataclass(frozen=True)
class DAGMMConfig:
    input_dim: int = 120  # KDDCUP99 after one-hot encoding (paper, Sec. 4.1)
    hidden: tuple[int, ...] = (60, 30, 10)  # compression network, tanh between layers
    latent_dim: int = 1  # z_c
    estimation_hidden: int = 10
    n_gmm: int = 4  # mixture components K
    dropout: float = 0.5
    lambda_energy: float = 0.1  # lambda1
    lambda_cov_diag: float = 0.005  # lambda2
    lr: float = 1e-4


def _mlp(sizes: tuple[int, ...]) -> nn.Sequential:
    """FC layers with tanh between them and no activation after the last."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def relative_euclidean_distance(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """``||x - x'|| / ||x||`` per row: ``(N, F), (N, F) -> (N,)`` (paper Eq. 3)."""
    return (x - x_hat).norm(2, dim=1) / x.norm(2, dim=1)


def gmm_parameters(z: torch.Tensor, gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mixture weights ``(K,)``, means ``(K, D)`` and covariances ``(K, D, D)`` from ``z (N, D)``, ``gamma (N, K)``
    (Eq. 5)."""
    sum_gamma = gamma.sum(0)  # (K,)
    phi = sum_gamma / gamma.shape[0]
    mu = (gamma.unsqueeze(-1) * z.unsqueeze(1)).sum(0) / sum_gamma.unsqueeze(-1)  # (K, D)
    diff = z.unsqueeze(1) - mu.unsqueeze(0)  # (N, K, D)
    outer = diff.unsqueeze(-1) * diff.unsqueeze(-2)  # (N, K, D, D)
    cov = (gamma[..., None, None] * outer).sum(0) / sum_gamma[:, None, None]  # (K, D, D)
    return phi, mu, cov


def sample_energy(
    z: torch.Tensor, phi: torch.Tensor, mu: torch.Tensor, cov: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Energy per row ``(N,)`` (Eq. 6) and the diagonal penalty ``sum_k sum_j 1 / Sigma_kjj`` (scalar)."""
    d = z.shape[-1]
    cov = cov + COV_EPS * torch.eye(d, dtype=cov.dtype, device=cov.device)
    cov_inv = torch.linalg.inv(cov)  # (K, D, D)
    _, logdet = torch.linalg.slogdet(2 * math.pi * cov)  # (K,) log|2 pi Sigma_k|
    diff = z.unsqueeze(1) - mu.unsqueeze(0)  # (N, K, D)
    mahalanobis = ((diff.unsqueeze(-1) * cov_inv).sum(-2) * diff).sum(-1)  # (N, K)
    log_terms = torch.log(phi) - 0.5 * mahalanobis - 0.5 * logdet  # (N, K)
    energy = -torch.logsumexp(log_terms, dim=1)
    cov_diag = torch.diagonal(cov, dim1=-2, dim2=-1).reciprocal().sum()
    return energy, cov_diag


def dagmm_loss(
    x: torch.Tensor, x_hat: torch.Tensor, z: torch.Tensor, gamma: torch.Tensor, cfg: DAGMMConfig
) -> torch.Tensor:
    """``mean (x - x')^2 + lambda1 mean E(z) + lambda2 sum 1 / Sigma_kjj`` with GMM parameters from the
    batch (Eq. 7)."""
    energy, cov_diag = sample_energy(z, *gmm_parameters(z, gamma))
    return F.mse_loss(x_hat, x) + cfg.lambda_energy * energy.mean() + cfg.lambda_cov_diag * cov_diag


class DAGMM(nn.Module):
    """Compression network (autoencoder) + estimation network; GMM parameters kept as buffers for test time."""

    def __init__(self, cfg: DAGMMConfig) -> None:
        super().__init__()
        sizes = (cfg.input_dim, *cfg.hidden, cfg.latent_dim)
        self.encoder = _mlp(sizes)  # 120 -> 60 -> 30 -> 10 -> 1
        self.decoder = _mlp(sizes[::-1])  # 1 -> 10 -> 30 -> 60 -> 120
        z_dim = cfg.latent_dim + 2
        self.estimation = nn.Sequential(
            nn.Linear(z_dim, cfg.estimation_hidden),
            nn.Tanh(),
            nn.Dropout(cfg.dropout),
            nn.Linear(cfg.estimation_hidden, cfg.n_gmm),
            nn.Softmax(dim=1),
        )
        self.register_buffer("phi", torch.full((cfg.n_gmm,), 1 / cfg.n_gmm))
        self.register_buffer("mu", torch.zeros(cfg.n_gmm, z_dim))
        self.register_buffer("cov", torch.eye(z_dim).repeat(cfg.n_gmm, 1, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x (N, F)`` -> reconstruction ``(N, F)``, ``z (N, latent + 2)``, memberships ``gamma (N, K)``."""
        z_c = self.encoder(x)
        x_hat = self.decoder(z_c)
        z = torch.cat(
            [
                z_c,
                relative_euclidean_distance(x, x_hat).unsqueeze(-1),
                F.cosine_similarity(x, x_hat, dim=1).unsqueeze(-1),
            ],
            dim=1,
        )
        return x_hat, z, self.estimation(z)

    @torch.no_grad()
    def fit_gmm(self, x: torch.Tensor) -> None:
        """Store the GMM parameters estimated over training rows ``x`` (solver.test's first pass)."""
        _, z, gamma = self(x)
        for name, value in zip(("phi", "mu", "cov"), gmm_parameters(z, gamma)):
            getattr(self, name).copy_(value)

    def detect(self, x: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Energies ``(N,)`` under the stored GMM and anomaly flags ``(N,)``:
        energy above the ``1 - ratio`` quantile."""
        _, z, _ = self(x)
        energy, _ = sample_energy(z, self.phi, self.mu, self.cov)
        threshold = torch.quantile(energy, 1 - ratio)
        return energy, energy > threshold


def synthetic_records(ctx: BuildContext, rows: int, features: int) -> torch.Tensor:
    """``(rows, features)`` in about [0, 1]: a normal cluster with ``ANOMALY_RATIO`` uniform rows mixed in."""
    centre = ctx.rand(features)
    x = (centre + 0.05 * ctx.randn(rows, features)).clamp(0, 1)
    anomalous = ctx.rand(rows) < ANOMALY_RATIO
    return torch.where(anomalous.unsqueeze(-1), ctx.rand(rows, features), x)


class DAGMMWorkload(Workload):
    """Train: Eq. 7 on the batch; eval: energies under the training-set GMM and percentile flags."""

    max_grad_norm = 5.0  # solver.dagmm_step: clip_grad_norm(parameters, 5) (not in the paper)

    def forward(self):
        if self.ctx.train:
            return self.module(self.inputs[0])
        return self.module.detect(self.inputs[0], ANOMALY_RATIO)

    def compute_loss(self, outputs) -> torch.Tensor:
        x_hat, z, gamma = outputs
        return dagmm_loss(self.inputs[0], x_hat, z, gamma, self.targets)


def _create_dagmm(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(DAGMMConfig(), **kwargs)
    rows = SMOKE_ROWS if ctx.smoke and not ctx.batch_size_given else ctx.batch_size
    model = DAGMM(cfg).to(ctx.device)
    x = synthetic_records(ctx, rows, cfg.input_dim)
    opt = None
    if ctx.train:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    else:  # GMM parameters over a training set, once, outside the timed step
        model.eval()
        model.fit_gmm(synthetic_records(ctx, ctx.pick(1024, SMOKE_ROWS), cfg.input_dim))
    return DAGMMWorkload(ctx, model, (x,), cfg, optimizer=opt)


@register_model(
    domain="other",
    task="anomaly_detection",
    batch_size=(1024, 1024),
    tags=("linalg",),
    source="Zong et al., Deep Autoencoding Gaussian Mixture Model for Unsupervised Anomaly "
    "Detection, ICLR 2018 (KDDCUP99 configuration); danieltan07/dagmm (PyTorch)",
    param_count=19_025,  # from the architecture: encoder 9,411 + decoder 9,530 + estimation 84
    unsupported_precisions=("fp16", "bf16"),
    notes="fp16/bf16 unsupported: no half-precision linalg.inv / slogdet. Batch = records; eval "
    "scores a batch under GMM parameters fitted once on 1024 training records and flags "
    "the top 20% energies.",
)
def dagmm_kdd(ctx: BuildContext, **kwargs) -> Workload:
    """DAGMM on 120-feature KDDCUP99-style records: 1-D code + 2 reconstruction features, 4-component GMM."""
    return _create_dagmm(ctx, **kwargs)
