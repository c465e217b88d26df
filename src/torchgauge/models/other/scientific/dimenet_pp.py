"""DimeNet++: directional message passing over edges and angle triplets of molecules.

Gasteiger, Giri, Margraf and Günnemann, "Fast and Uncertainty-Aware Directional Message
Passing for Non-Equilibrium Molecules" (DimeNet++), 2020, after Gasteiger, Groß and
Günnemann, "Directional Message Passing for Molecular Graphs" (DimeNet), ICLR 2020. The
architecture follows PyTorch Geometric's ``torch_geometric.nn.models.DimeNetPlusPlus`` (MIT)
in the paper's QM9 configuration: hidden 128, 4 interaction blocks, interaction embedding 64,
basis embedding 8, output embedding 256, 7 spherical and 6 radial basis functions, cutoff
5 Å, envelope exponent 5, one residual layer before and two after the skip, three output
layers, swish (SiLU), PyG's initialisation (``glorot_orthogonal`` with scale 2, zero output
layers). Per step: radius graph, triplets ``k -> j -> i`` (``k != i``), distances and angles
``atan2(|r_ij x r_jk|, r_ij . r_jk)``; radial Bessel basis ``sqrt(2/c) sin(n pi d/c)/d``-like
``sin(f_n d/c) u(d/c)`` with trainable frequencies and the polynomial envelope ``u``; the
spherical basis ``N_ln j_l(z_ln d/c) u(d/c) Y_l^0(angle)``. Training as the DimeNet reference
on QM9: mean absolute error of one target, Adam with AMSGrad, lr 1e-3, batch 32.

Differences: PyG builds the basis from sympy expressions (``bessel_basis``, ``real_sph_harm``)
and scipy's ``brentq`` for the Bessel zeros; here ``j_0`` is ``torch.special.spherical_bessel_j0``,
higher orders come from the upward recurrence ``j_{l+1} = (2l+1)/x j_l - j_{l-1}``
(``j_{-1} = cos x / x``), the zeros from bisection between the interlacing zeros of
``j_{l-1}`` (as the reference brackets them), and ``Y_l^0`` from
``torch.special.legendre_polynomial_p``. Those torch.special functions have no autograd
formula and no half-precision CPU kernels: the spherical basis is computed in at least fp32
and is not differentiable in the positions (QM9 training needs no forces). No EMA of the
weights and no warmup/decay schedule (they do not change a step). Triplets come from a CSR
pointer over targets (``torch.searchsorted``) instead of torch_sparse. Data: the QM9-like
molecules of :mod:`schnet`. Written from the papers and descriptions above; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .schnet import qm9_like_molecules, radius_graph, scatter_sum

__all__ = ["DimeNetPlusPlus", "DimeNetPPConfig", "spherical_bessel", "spherical_bessel_zeros", "triplets"]

BISECTION_STEPS = 60  # float64 bisection: brackets of width <= pi shrink below 1e-15


@dataclass(frozen=True)
class DimeNetPPConfig:
    hidden_channels: int = 128
    out_channels: int = 1  # one QM9 target per model, as the paper
    num_blocks: int = 4  # interaction blocks (output blocks: one more)
    int_emb_size: int = 64  # triplet-interaction width (the "++" down-projection)
    basis_emb_size: int = 8
    out_emb_channels: int = 256
    num_spherical: int = 7
    num_radial: int = 6
    cutoff: float = 5.0  # Å
    envelope_exponent: int = 5
    num_before_skip: int = 1
    num_after_skip: int = 2
    num_output_layers: int = 3


# -- basis functions ------------------------------------------------------------------------------
def spherical_bessel(x: torch.Tensor, max_order: int) -> torch.Tensor:
    """``j_0 .. j_max_order`` at ``x`` ``(...)`` -> ``(..., max_order + 1)`` by upward recurrence."""
    j_prev, j = torch.cos(x) / x, torch.special.spherical_bessel_j0(x)  # j_{-1}, j_0
    orders = [j]
    for order in range(max_order):
        j_prev, j = j, (2 * order + 1) / x * j - j_prev
        orders.append(j)
    return torch.stack(orders, dim=-1)


def spherical_bessel_zeros(num_orders: int, num_zeros: int) -> torch.Tensor:
    """``(L, K)`` float64: the first ``K`` positive zeros of ``j_0 .. j_{L-1}``.

    The zeros of ``j_l`` interlace those of ``j_{l-1}`` (``j_0``'s are ``n pi``), so each lies in
    one bracket between consecutive zeros of the order below; bisection narrows every bracket.
    """
    points = torch.arange(1, num_zeros + num_orders, dtype=torch.float64) * math.pi  # zeros of j_0
    zeros = [points[:num_zeros]]
    for order in range(1, num_orders):
        lo, hi = points[:-1].clone(), points[1:].clone()
        sign_lo = torch.sign(spherical_bessel(lo, order)[..., order])
        for _ in range(BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            same = torch.sign(spherical_bessel(mid, order)[..., order]) == sign_lo
            lo, hi = torch.where(same, mid, lo), torch.where(same, hi, mid)
        points = 0.5 * (lo + hi)
        zeros.append(points[:num_zeros])
    return torch.stack(zeros)


class Envelope(nn.Module):
    """``u(x) = 1/x + a x^(p-1) + b x^p + c x^(p+1)`` for ``x < 1``, else 0: smooth to zero at the cutoff."""

    def __init__(self, exponent: int) -> None:
        super().__init__()
        p = exponent + 1
        self.p, self.a, self.b, self.c = p, -(p + 1) * (p + 2) / 2, p * (p + 2), -p * (p + 1) / 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_p0 = x.pow(self.p - 1)
        x_p1, x_p2 = x_p0 * x, x_p0 * x * x
        return (1.0 / x + self.a * x_p0 + self.b * x_p1 + self.c * x_p2) * (x < 1.0).to(x.dtype)


class BesselBasis(nn.Module):
    """Distances ``(E,)`` -> ``(E, R)``: ``u(d/c) sin(f_n d/c)``, frequencies ``f_n`` start at ``n pi`` and learn."""

    def __init__(self, num_radial: int, cutoff: float, envelope_exponent: int) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.envelope = Envelope(envelope_exponent)
        self.freq = nn.Parameter(torch.arange(1, num_radial + 1, dtype=torch.float32) * math.pi)

    def forward(self, dist: torch.Tensor) -> torch.Tensor:
        x = (dist / self.cutoff).unsqueeze(-1)
        return self.envelope(x) * torch.sin(self.freq * x)


class SphericalBasis(nn.Module):
    """``(E,)`` distances, ``(T,)`` angles, ``(T,)`` edge of each triplet -> ``(T, L * R)``.

    Entry ``(l, n)``: ``N_ln j_l(z_ln d/c) u(d/c) Y_l^0(angle)`` with ``z_ln`` the n-th zero of
    ``j_l``, ``N_ln = sqrt(2) / |j_{l+1}(z_ln)|`` and ``Y_l^0 = sqrt((2l+1)/4pi) P_l(cos angle)``.
    """

    def __init__(self, num_spherical: int, num_radial: int, cutoff: float, envelope_exponent: int) -> None:
        super().__init__()
        self.cutoff, self.num_spherical, self.num_radial = cutoff, num_spherical, num_radial
        self.envelope = Envelope(envelope_exponent)
        zeros = spherical_bessel_zeros(num_spherical, num_radial)  # (L, R) float64
        orders = torch.arange(num_spherical)
        j_next = spherical_bessel(zeros, num_spherical)[orders, :, orders + 1]  # j_{l+1}(z_ln): (L, R)
        self.register_buffer("zeros", zeros.float())
        self.register_buffer("norm", (math.sqrt(2.0) / j_next.abs()).float())
        self.register_buffer("sph_norm", torch.sqrt((2 * orders + 1) / (4 * math.pi)).float())
        self.register_buffer("orders", orders.float())

    def forward(self, dist: torch.Tensor, angle: torch.Tensor, idx_kj: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(dist.dtype, torch.float32)  # torch.special has no half kernels
        x = dist.to(dtype) / self.cutoff  # (E,)
        jl = spherical_bessel(x[:, None, None] * self.zeros, self.num_spherical - 1)  # (E, L, R, L)
        orders = torch.arange(self.num_spherical, device=x.device)
        rbf = jl[:, orders, :, orders].transpose(0, 1) * self.norm  # (E, L, R): order l of row l
        rbf = self.envelope(x)[:, None, None] * rbf
        cbf = self.sph_norm * torch.special.legendre_polynomial_p(
            torch.cos(angle.to(dtype))[:, None], self.orders
        )  # (T, L)
        out = rbf[idx_kj] * cbf.unsqueeze(-1)  # (T, L, R)
        return out.flatten(1).to(dist.dtype)


# -- graph -----------------------------------------------------------------------------------------
def triplets(edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, ...]:
    """Every path ``k -> j -> i`` with ``k != i`` over edges ``(2, E)`` (source, target) sorted by target.

    Returns node indices ``idx_i, idx_j, idx_k`` and edge indices ``idx_kj, idx_ji``, each ``(T,)``.
    """
    source, target = edge_index
    ptr = torch.searchsorted(target, torch.arange(num_nodes + 1, device=target.device))  # CSR over targets
    num_in = ptr[source + 1] - ptr[source]  # (E,): edges k -> j entering the source j of each edge j -> i
    idx_ji = torch.arange(source.numel(), device=source.device).repeat_interleave(num_in)  # (T,)
    first = num_in.cumsum(0) - num_in  # first triplet of each edge j -> i
    idx_kj = ptr[source][idx_ji] + torch.arange(idx_ji.numel(), device=source.device) - first[idx_ji]
    idx_i, idx_j, idx_k = target[idx_ji], source[idx_ji], source[idx_kj]
    keep = idx_i != idx_k  # no k -> j -> i back to where it started
    return idx_i[keep], idx_j[keep], idx_k[keep], idx_kj[keep], idx_ji[keep]


# -- blocks ----------------------------------------------------------------------------------------
def glorot_orthogonal(weight: torch.Tensor, scale: float = 2.0) -> None:
    """PyG's init: an orthogonal matrix rescaled to variance ``scale / (fan_in + fan_out)``."""
    with torch.no_grad():
        nn.init.orthogonal_(weight)
        weight.mul_(torch.sqrt(scale / ((weight.shape[-2] + weight.shape[-1]) * weight.var())))


def _linear(fan_in: int, fan_out: int, bias: bool = True) -> nn.Linear:
    lin = nn.Linear(fan_in, fan_out, bias=bias)
    glorot_orthogonal(lin.weight)
    if bias:
        nn.init.zeros_(lin.bias)
    return lin


class ResidualLayer(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.lin1, self.lin2 = _linear(channels, channels), _linear(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.lin2(F.silu(self.lin1(x))))


class EmbeddingBlock(nn.Module):
    """Edge embeddings ``(E, H)`` from both atoms' embeddings and the radial basis."""

    def __init__(self, num_radial: int, channels: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(95, channels)
        nn.init.uniform_(self.emb.weight, -math.sqrt(3), math.sqrt(3))
        self.lin_rbf = nn.Linear(num_radial, channels)
        self.lin = nn.Linear(3 * channels, channels)

    def forward(self, z: torch.Tensor, rbf: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        x = self.emb(z)  # (N, H)
        rbf = F.silu(self.lin_rbf(rbf))  # (E, H)
        return F.silu(self.lin(torch.cat([x[i], x[j], rbf], dim=-1)))


class InteractionPPBlock(nn.Module):
    """Edge messages ``(E, H)`` updated from the triplets ``k -> j -> i`` through a narrow ``int_emb`` space."""

    def __init__(self, cfg: DimeNetPPConfig) -> None:
        super().__init__()
        h, b, t = cfg.hidden_channels, cfg.basis_emb_size, cfg.int_emb_size
        self.lin_rbf1, self.lin_rbf2 = _linear(cfg.num_radial, b, bias=False), _linear(b, h, bias=False)
        self.lin_sbf1 = _linear(cfg.num_spherical * cfg.num_radial, b, bias=False)
        self.lin_sbf2 = _linear(b, t, bias=False)
        self.lin_kj, self.lin_ji = _linear(h, h), _linear(h, h)
        self.lin_down, self.lin_up = _linear(h, t, bias=False), _linear(t, h, bias=False)
        self.before_skip = nn.ModuleList(ResidualLayer(h) for _ in range(cfg.num_before_skip))
        self.lin = _linear(h, h)
        self.after_skip = nn.ModuleList(ResidualLayer(h) for _ in range(cfg.num_after_skip))

    def forward(
        self, x: torch.Tensor, rbf: torch.Tensor, sbf: torch.Tensor, idx_kj: torch.Tensor, idx_ji: torch.Tensor
    ) -> torch.Tensor:
        x_ji = F.silu(self.lin_ji(x))  # (E, H)
        x_kj = F.silu(self.lin_kj(x)) * self.lin_rbf2(self.lin_rbf1(rbf))  # (E, H)
        x_kj = F.silu(self.lin_down(x_kj))  # (E, T')
        x_kj = x_kj[idx_kj] * self.lin_sbf2(self.lin_sbf1(sbf))  # (T, T')
        x_kj = F.silu(self.lin_up(scatter_sum(x_kj, idx_ji, x.shape[0])))  # (E, H)
        h = x_ji + x_kj
        for layer in self.before_skip:
            h = layer(h)
        h = F.silu(self.lin(h)) + x
        for layer in self.after_skip:
            h = layer(h)
        return h


class OutputPPBlock(nn.Module):
    """Edge messages -> per-atom outputs ``(N, out)``: radial gate, sum onto targets, up-projected MLP."""

    def __init__(self, cfg: DimeNetPPConfig) -> None:
        super().__init__()
        h, o = cfg.hidden_channels, cfg.out_emb_channels
        self.lin_rbf = _linear(cfg.num_radial, h, bias=False)
        self.lin_up = _linear(h, o, bias=False)
        self.lins = nn.ModuleList(_linear(o, o) for _ in range(cfg.num_output_layers))
        self.lin = nn.Linear(o, cfg.out_channels, bias=False)
        nn.init.zeros_(self.lin.weight)  # output_initializer="zeros"

    def forward(self, x: torch.Tensor, rbf: torch.Tensor, i: torch.Tensor, num_nodes: int) -> torch.Tensor:
        x = scatter_sum(self.lin_rbf(rbf) * x, i, num_nodes)  # (N, H)
        x = self.lin_up(x)
        for lin in self.lins:
            x = F.silu(lin(x))
        return self.lin(x)


class DimeNetPlusPlus(nn.Module):
    """Atomic numbers ``(N,)``, positions ``(N, 3)``, sorted molecule index ``(N,)`` -> ``(B, out)``."""

    def __init__(self, cfg: DimeNetPPConfig) -> None:
        super().__init__()
        self.cutoff = cfg.cutoff
        self.rbf = BesselBasis(cfg.num_radial, cfg.cutoff, cfg.envelope_exponent)
        self.sbf = SphericalBasis(cfg.num_spherical, cfg.num_radial, cfg.cutoff, cfg.envelope_exponent)
        self.emb = EmbeddingBlock(cfg.num_radial, cfg.hidden_channels)
        self.output_blocks = nn.ModuleList(OutputPPBlock(cfg) for _ in range(cfg.num_blocks + 1))
        self.interaction_blocks = nn.ModuleList(InteractionPPBlock(cfg) for _ in range(cfg.num_blocks))

    def forward(self, z: torch.Tensor, pos: torch.Tensor, batch: torch.Tensor, num_molecules: int) -> torch.Tensor:
        edge_index = radius_graph(pos, batch, self.cutoff)  # (2, E): j -> i, sorted by i
        j, i = edge_index
        idx_i, idx_j, idx_k, idx_kj, idx_ji = triplets(edge_index, z.shape[0])
        dist = (pos[i] - pos[j]).pow(2).sum(dim=-1).sqrt()  # (E,)
        pos_jk, pos_ij = pos[idx_j] - pos[idx_k], pos[idx_i] - pos[idx_j]  # (T, 3)
        a = (pos_ij * pos_jk).sum(dim=-1)
        b = torch.linalg.cross(pos_ij, pos_jk).norm(dim=-1)
        angle = torch.atan2(b, a)  # (T,)
        rbf = self.rbf(dist)  # (E, R)
        sbf = self.sbf(dist, angle, idx_kj)  # (T, L * R)
        x = self.emb(z, rbf, i, j)  # (E, H)
        out = self.output_blocks[0](x, rbf, i, z.shape[0])  # (N, out)
        for interaction, output in zip(self.interaction_blocks, self.output_blocks[1:]):
            x = interaction(x, rbf, sbf, idx_kj, idx_ji)
            out = out + output(x, rbf, i, z.shape[0])
        return scatter_sum(out, batch, num_molecules)  # (B, out)


class MoleculePropertyWorkload(Workload):
    """Inputs ``(z, pos, batch)`` -> one property per molecule; mean absolute error."""

    def forward(self) -> torch.Tensor:
        z, pos, batch = self.inputs
        return self.module(z, pos, batch, self.ctx.batch_size)

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return F.l1_loss(outputs, self.targets)


def _create_dimenet_pp(ctx: BuildContext, **kwargs) -> Workload:
    smoke = (
        dict(
            hidden_channels=16,
            num_blocks=1,
            int_emb_size=8,
            basis_emb_size=4,
            out_emb_channels=16,
            num_spherical=3,
            num_radial=3,
        )
        if ctx.smoke
        else {}
    )
    cfg = replace(DimeNetPPConfig(), **{**smoke, **kwargs})
    z, pos, batch = qm9_like_molecules(ctx, ctx.batch_size, *ctx.pick((10, 29), (3, 6)))
    targets = ctx.randn(ctx.batch_size, cfg.out_channels)
    model = DimeNetPlusPlus(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True) if ctx.train else None
    return MoleculePropertyWorkload(ctx, model, (z, pos, batch), targets, optimizer=opt)


@register_model(
    domain="other",
    task="molecular_property",
    batch_size=(32, 32),
    tags=("gnn",),
    source="Gasteiger et al., DimeNet++, 2020; PyG torch_geometric.nn.models.DimeNetPlusPlus",
    param_count=1_885_830,  # PyG DimeNetPlusPlus with the QM9 configuration, summed over layer shapes
    notes="Synthetic QM9-like molecules (10-29 atoms), radius graph and triplets built in the step; "
    "batch = molecules; L1 loss on one target. The spherical basis (torch.special Bessel j0 "
    "and Legendre P, no half kernels) is computed in fp32 under fp16/bf16.",
)
def dimenet_pp(ctx: BuildContext, **kwargs) -> Workload:
    """DimeNet++ (hidden 128, 4 blocks, 7x6 spherical basis, cutoff 5 Å) on QM9-like molecules."""
    return _create_dimenet_pp(ctx, **kwargs)
