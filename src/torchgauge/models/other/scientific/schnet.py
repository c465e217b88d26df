"""SchNet: continuous-filter convolutions on molecules, trained on energies and forces.

Schütt, Kindermans, Sauceda, Chmiela, Tkatchenko and Müller, "SchNet: A continuous-filter
convolutional neural network for modeling quantum interactions", NeurIPS 2017. The
architecture follows PyTorch Geometric's ``torch_geometric.nn.models.SchNet`` (MIT) in its
default configuration: atomic numbers embedded (``Embedding(100, 128)``), a radius graph
within the cutoff (10 Å) built in the step, distances expanded in 50 Gaussians on
``[0, cutoff]``, six interaction blocks ``h <- h + Linear(ssp(CFConv(h)))`` whose filters are
``MLP(rbf) * C(d)`` with the cosine cutoff ``C(d) = (cos(pi d / cutoff) + 1) / 2``,
``ssp(x) = softplus(x) - log 2``, then ``Linear(128, 64) -> ssp -> Linear(64, 1)`` per atom
and a scatter-sum per molecule (``readout="add"``). Training follows schnetpack (MIT), which
trains the same kind of model on energies and forces: ``F = -dE/dR`` by
``torch.autograd.grad(create_graph=True)``, loss ``0.01 MSE(E) + 0.99 MSE(F)`` (its MD17
configuration) and AdamW with lr 5e-4. Eval predicts energies and forces (grad enabled).

Differences: the radius graph compares all pairs of atoms of the batch (torch_cluster's
``radius_graph`` does so per molecule on the GPU, with a k-d tree on the CPU; the edges are the
same, and PyG's ``max_num_neighbors=32`` never truncates molecules of at most 29 atoms); no atom reference energies,
mean/std or dipole options.

Data: QM9-like molecules, synthetic and seeded: 10 to 29 atoms each with H/C/N/O/F drawn at
QM9's element frequencies, placed on distinct sites of a 4x4x4 grid of 1.4 Å spacing with
0.15 Å jitter (no two atoms closer than 1.1 Å, extent up to ~7.5 Å); random target energies
and forces (the step does not depend on their values). Batch = molecules. Written from the
paper and the descriptions above; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["SchNet", "SchNetConfig", "qm9_like_molecules", "radius_graph", "shifted_softplus"]

# QM9's elements and their share of its atoms (H 51%, C 35%, N 5.6%, O 7.8%, F 0.2%).
QM9_ELEMENTS = (1, 6, 7, 8, 9)
QM9_ELEMENT_FREQUENCIES = (0.511, 0.352, 0.056, 0.078, 0.003)
MAX_ATOMS = 29  # QM9's largest molecule
SITE_SPACING, SITE_JITTER = 1.4, 0.15  # Å: bond-like distances, never closer than 1.1 Å


@dataclass(frozen=True)
class SchNetConfig:
    hidden_channels: int = 128  # atom feature width (PyG default)
    num_filters: int = 128  # continuous-filter width
    num_interactions: int = 6
    num_gaussians: int = 50  # radial basis functions on [0, cutoff]
    cutoff: float = 10.0  # Å; QM9 molecules fit inside it: the graph is complete
    max_z: int = 100  # embedding rows (atomic numbers)
    energy_weight: float = 0.01  # schnetpack MD17 loss weights
    forces_weight: float = 0.99


def shifted_softplus(x: torch.Tensor) -> torch.Tensor:
    """``log(1 + e^x) - log 2``: zero at zero, SchNet's smooth activation."""
    return F.softplus(x) - math.log(2.0)


def radius_graph(pos: torch.Tensor, batch: torch.Tensor, cutoff: float) -> torch.Tensor:
    """Directed edges ``(2, E)`` = (source, target) between distinct atoms of one molecule closer than ``cutoff``.

    Brute force over all pairs on squared distances, as torch_cluster's CUDA kernel; indices only (no
    gradient flows through the graph); edges come sorted by target.
    """
    with torch.no_grad():
        sq_dist = (pos[:, None] - pos[None, :]).pow(2).sum(-1)  # (N, N)
        adj = (batch[:, None] == batch[None, :]) & (sq_dist < cutoff**2)
        adj.fill_diagonal_(False)
        target, source = adj.nonzero(as_tuple=True)
    return torch.stack([source, target])


def scatter_sum(src: torch.Tensor, index: torch.Tensor, dim_size: int) -> torch.Tensor:
    """Rows of ``src`` ``(E, C)`` summed into ``(dim_size, C)`` by ``index`` ``(E,)`` (PyG's
    ``scatter(reduce="sum")``)."""
    index = index.unsqueeze(-1).expand_as(src)
    return src.new_zeros(dim_size, src.shape[-1]).scatter_add_(0, index, src)


class ShiftedSoftplus(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return shifted_softplus(x)


class GaussianSmearing(nn.Module):
    """Distances ``(E,)`` -> ``(E, G)``: Gaussians of width = spacing centred on ``linspace(0, cutoff, G)``."""

    def __init__(self, start: float, stop: float, num_gaussians: int) -> None:
        super().__init__()
        offset = torch.linspace(start, stop, num_gaussians)
        self.coeff = -0.5 / (offset[1] - offset[0]).item() ** 2
        self.register_buffer("offset", offset)

    def forward(self, dist: torch.Tensor) -> torch.Tensor:
        return torch.exp(self.coeff * (dist.unsqueeze(-1) - self.offset).pow(2))


class CFConv(nn.Module):
    """Continuous-filter convolution: ``x_i' = W2 sum_j (W1 x_j) * MLP(rbf_ij) C(d_ij)``."""

    def __init__(self, channels: int, num_filters: int, num_gaussians: int, cutoff: float) -> None:
        super().__init__()
        self.cutoff = cutoff
        self.filter_net = nn.Sequential(
            nn.Linear(num_gaussians, num_filters), ShiftedSoftplus(), nn.Linear(num_filters, num_filters)
        )
        self.lin1 = nn.Linear(channels, num_filters, bias=False)
        self.lin2 = nn.Linear(num_filters, channels)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, dist: torch.Tensor, rbf: torch.Tensor) -> torch.Tensor:
        source, target = edge_index
        envelope = 0.5 * (torch.cos(dist * math.pi / self.cutoff) + 1.0)  # (E,), 0 at the cutoff
        filters = self.filter_net(rbf) * envelope.unsqueeze(-1)  # (E, F)
        messages = self.lin1(x)[source] * filters  # (E, F)
        return self.lin2(scatter_sum(messages, target, x.shape[0]))  # (N, C)


class InteractionBlock(nn.Module):
    """``CFConv -> ssp -> Linear``; the caller adds the residual."""

    def __init__(self, channels: int, num_filters: int, num_gaussians: int, cutoff: float) -> None:
        super().__init__()
        self.conv = CFConv(channels, num_filters, num_gaussians, cutoff)
        self.lin = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, dist: torch.Tensor, rbf: torch.Tensor) -> torch.Tensor:
        return self.lin(shifted_softplus(self.conv(x, edge_index, dist, rbf)))


class SchNet(nn.Module):
    """Atomic numbers ``(N,)``, positions ``(N, 3)``, molecule index ``(N,)`` (sorted) -> energies ``(B,)``."""

    def __init__(self, cfg: SchNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.max_z, cfg.hidden_channels)
        self.rbf = GaussianSmearing(0.0, cfg.cutoff, cfg.num_gaussians)
        self.interactions = nn.ModuleList(
            InteractionBlock(cfg.hidden_channels, cfg.num_filters, cfg.num_gaussians, cfg.cutoff)
            for _ in range(cfg.num_interactions)
        )
        self.lin1 = nn.Linear(cfg.hidden_channels, cfg.hidden_channels // 2)
        self.lin2 = nn.Linear(cfg.hidden_channels // 2, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # PyG: Xavier-uniform weights and zero biases for every linear layer, N(0, 1) embedding.
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    m.bias.data.zero_()

    def forward(self, z: torch.Tensor, pos: torch.Tensor, batch: torch.Tensor, num_molecules: int) -> torch.Tensor:
        edge_index = radius_graph(pos, batch, self.cfg.cutoff)  # (2, E)
        source, target = edge_index
        dist = (pos[source] - pos[target]).norm(dim=-1)  # (E,), differentiable in pos
        rbf = self.rbf(dist)  # (E, G)
        h = self.embedding(z)  # (N, C)
        for interaction in self.interactions:
            h = h + interaction(h, edge_index, dist, rbf)
        h = self.lin2(shifted_softplus(self.lin1(h)))  # (N, 1) atomic energies
        return scatter_sum(h, batch, num_molecules).squeeze(-1)  # (B,)


def energy_and_forces(
    model: nn.Module, z: torch.Tensor, pos: torch.Tensor, batch: torch.Tensor, num_molecules: int, create_graph: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies ``(B,)`` and forces ``-dE/dR`` ``(N, 3)``; ``create_graph`` to train through the forces."""
    pos = pos.detach().requires_grad_(True)
    energy = model(z, pos, batch, num_molecules)
    (grad,) = torch.autograd.grad(energy.sum(), pos, create_graph=create_graph)
    return energy, -grad


def qm9_like_molecules(
    ctx: BuildContext, num_molecules: int, min_atoms: int, max_atoms: int, grid: int = 4
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Atomic numbers ``(N,)``, positions ``(N, 3)`` in Å and sorted molecule indices ``(N,)``.

    Each molecule has ``min_atoms..max_atoms`` atoms on distinct sites of a ``grid^3`` lattice
    (jittered), so atoms are never closer than ``SITE_SPACING - 2 SITE_JITTER``.
    """
    if max_atoms > grid**3:
        raise ValueError(f"{max_atoms} atoms do not fit on a {grid}^3 grid")
    counts = ctx.randint(min_atoms, max_atoms + 1, (num_molecules,))  # (B,)
    sites = ctx.rand(num_molecules, grid**3).argsort(dim=1)[:, :max_atoms]  # (B, A) distinct sites
    keep = torch.arange(max_atoms, device=ctx.device) < counts[:, None]  # (B, A)
    axis = torch.arange(grid, dtype=torch.float32, device=ctx.device) * SITE_SPACING
    lattice = torch.cartesian_prod(axis, axis, axis)  # (grid^3, 3)
    pos = lattice[sites[keep]] + (ctx.rand(int(counts.sum()), 3) * 2 - 1) * SITE_JITTER
    freqs = torch.tensor(QM9_ELEMENT_FREQUENCIES)
    kinds = torch.multinomial(freqs, pos.shape[0], replacement=True, generator=ctx.generator())
    z = torch.tensor(QM9_ELEMENTS)[kinds].to(ctx.device)
    batch = torch.arange(num_molecules, device=ctx.device).repeat_interleave(counts)
    return z, pos, batch


class EnergyForcesWorkload(Workload):
    """Inputs ``(z, pos, batch)``; train: weighted energy + force MSE through a double backward."""

    eval_grad_mode = "enable_grad"  # forces are a gradient at inference too

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        z, pos, batch = self.inputs
        return energy_and_forces(self.module, z, pos, batch, self.ctx.batch_size, create_graph=self.ctx.train)

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        (energy, forces), (true_energy, true_forces) = outputs, self.targets
        cfg = self.module.cfg
        return cfg.energy_weight * F.mse_loss(energy, true_energy) + cfg.forces_weight * F.mse_loss(forces, true_forces)


def _create_schnet(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(hidden_channels=16, num_filters=16, num_interactions=2, num_gaussians=10) if ctx.smoke else {}
    cfg = replace(SchNetConfig(), **{**smoke, **kwargs})
    z, pos, batch = qm9_like_molecules(ctx, ctx.batch_size, *ctx.pick((10, MAX_ATOMS), (3, 6)))
    targets = (ctx.randn(ctx.batch_size), ctx.randn(pos.shape[0], 3))
    model = SchNet(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4) if ctx.train else None
    return EnergyForcesWorkload(ctx, model, (z, pos, batch), targets, optimizer=opt)


@register_model(
    domain="other",
    task="molecular_property",
    batch_size=(100, 100),
    tags=("gnn", "double_backward"),
    source="Schütt et al., SchNet, NeurIPS 2017; PyG torch_geometric.nn.models.SchNet, schnetpack training",
    param_count=455_809,  # PyG SchNet() defaults, summed over its layer shapes
    unsupported_precisions=("fp16",),
    notes="Synthetic QM9-like molecules (10-29 atoms); batch = molecules; the radius graph is built in "
    "the step. Train: 0.01 MSE(E) + 0.99 MSE(F) with F = -dE/dR (double backward); eval: E and F. "
    "fp16 unsupported: pure-fp16 training makes the parameters NaN in its first step.",
)
def schnet(ctx: BuildContext, **kwargs) -> Workload:
    """SchNet (128 channels, 6 interactions, 50 Gaussians, cutoff 10 Å), energy + force training."""
    return _create_schnet(ctx, **kwargs)
