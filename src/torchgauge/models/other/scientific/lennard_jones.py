"""Lennard-Jones force field fit: an MLP potential whose forces are minus its gradient.

TorchBench's ``lennard_jones`` (adapted from muhrin/milad, GPL-3.0, via the functorch
examples) fits a 1-16-16-16-16-1 tanh MLP to the Lennard-Jones energy
``4 ((sigma/r)^12 - (sigma/r)^6)`` (sigma = 0.5; the reference calls the 4 epsilon) and its
forces, with the loss ``mse(E) + 0.01 * mse(F) / 3``. Two workloads share that MLP:

- ``lennard_jones`` is TorchBench's benchmark: B separation vectors along +x with lengths
  ``linspace(0.5, 1.0, B)``; the MLP maps each scalar distance to an energy and the force is
  ``-dE/dr * dr / r`` with ``dE/dr`` from ``torch.func.vmap(jacrev(mlp))`` (per-sample
  Jacobians); training back-propagates through those Jacobians (Adam, lr 1e-3); eval runs the
  same prediction under ``no_grad`` as TorchBench does (functorch transforms ignore it).
- ``lennard_jones_systems`` is this project's many-body variant: the MLP is a pair potential
  over all pairs of a small particle system, ``E = sum_{i<j} mlp(|x_i - x_j|)`` and
  ``F_i = -dE/dx_i`` by ``torch.autograd.grad`` with ``create_graph=True`` in training (a
  double backward). Batch = systems of 8 particles (28 pairs each).

Targets are the analytic Lennard-Jones energies and forces. Written from the description
above; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.func import jacrev, vmap
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = [
    "PairPotential",
    "distance_energies_and_forces",
    "energies_and_forces",
    "lennard_jones_energy",
    "lennard_jones_forces",
    "potential_mlp",
]

SIGMA, EPSILON = 0.5, 4.0  # the reference's parameters; EPSILON is the whole prefactor (4 eps with eps = 1)


@dataclass(frozen=True)
class LennardJonesConfig:
    particles: int = 8  # per system: 28 pairs, a 2x2x2 lattice
    hidden: int = 16  # MLP width, as the reference
    depth: int = 4  # hidden tanh layers, as the reference
    spacing: float = 0.6  # lattice constant: distances within the reference's fitting range [sigma, 2 sigma]
    jitter: float = 0.05  # uniform displacement of each particle, < (spacing - sigma) / 2


def lennard_jones_energy(positions: torch.Tensor) -> torch.Tensor:
    """Total Lennard-Jones energy ``(B,)`` of systems ``(B, N, 3)``."""
    i, j = torch.triu_indices(positions.shape[1], positions.shape[1], 1, device=positions.device)
    r = (positions[:, i] - positions[:, j]).norm(dim=-1)  # (B, P)
    return (EPSILON * ((SIGMA / r) ** 12 - (SIGMA / r) ** 6)).sum(-1)


def lennard_jones_forces(positions: torch.Tensor) -> torch.Tensor:
    """Analytic Lennard-Jones forces ``(B, N, 3)``: the pair force along every separation."""
    n = positions.shape[1]
    i, j = torch.triu_indices(n, n, 1, device=positions.device)
    sep = positions[:, i] - positions[:, j]  # (B, P, 3), from j to i
    r = sep.norm(dim=-1, keepdim=True)
    # -dU/dr: repulsive (positive) at short range
    magnitude = EPSILON * (12 * SIGMA**12 / r**13 - 6 * SIGMA**6 / r**7)
    pair_force = magnitude * sep / r  # on i; the opposite on j
    forces = torch.zeros_like(positions)
    forces.index_add_(1, i, pair_force)
    forces.index_add_(1, j, -pair_force)
    return forces


def potential_mlp(hidden: int = 16, depth: int = 4) -> nn.Sequential:
    """Distance ``(.., 1)`` -> energy ``(.., 1)``: ``depth`` tanh layers of width ``hidden`` (865 parameters)."""
    layers: list[nn.Module] = []
    width = 1
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.Tanh()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, 1))


def distance_energies_and_forces(mlp: nn.Module, separations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies ``(B, 1)`` and forces ``(B, 3)`` of separation vectors ``(B, 3)``, ``dE/dr`` by ``vmap(jacrev)``."""
    norms = torch.linalg.norm(separations, dim=1).reshape(-1, 1)  # (B, 1)
    energies = mlp(norms)
    derivatives = vmap(jacrev(mlp))(norms).squeeze(-1)  # (B, 1, 1) -> (B, 1)
    return energies, -derivatives * separations / norms


class PairPotential(nn.Module):
    """Systems ``(B, N, 3)`` -> energies ``(B,)`` as a sum of an MLP over pair distances."""

    def __init__(self, particles: int, hidden: int = 16, depth: int = 4) -> None:
        super().__init__()
        self.mlp = potential_mlp(hidden, depth)
        i, j = torch.triu_indices(particles, particles, 1)
        self.register_buffer("pair_i", i, persistent=False)
        self.register_buffer("pair_j", j, persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        r = (positions[:, self.pair_i] - positions[:, self.pair_j]).norm(dim=-1, keepdim=True)  # (B, P, 1)
        return self.mlp(r).sum(dim=(1, 2))  # (B,)


def energies_and_forces(
    model: nn.Module, positions: torch.Tensor, create_graph: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies ``(B,)`` and forces ``-dE/dx`` ``(B, N, 3)``; ``create_graph`` to train through the forces."""
    positions = positions.detach().requires_grad_(True)
    energies = model(positions)
    (grad,) = torch.autograd.grad(energies.sum(), positions, create_graph=create_graph)
    return energies, -grad


def _force_matching_loss(
    outputs: tuple[torch.Tensor, torch.Tensor], targets: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    (energies, forces), (true_energies, true_forces) = outputs, targets
    return F.mse_loss(true_energies, energies) + 0.01 * F.mse_loss(true_forces, forces) / 3


class DistanceForceWorkload(Workload):
    """TorchBench's step: energies and ``vmap(jacrev)`` forces of scalar distances (train: + loss, Adam)."""

    eval_grad_mode = "no_grad"  # TorchBench's eval context; jacrev differentiates regardless

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        (separations,) = self.inputs
        return distance_energies_and_forces(self.module, separations)

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return _force_matching_loss(outputs, self.targets)


class ForceFieldWorkload(Workload):
    """Train: energy + force matching through a double backward; eval: energies and forces."""

    eval_grad_mode = "enable_grad"  # forces are a gradient even at inference

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        (positions,) = self.inputs
        return energies_and_forces(self.module, positions, create_graph=self.ctx.train)

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return _force_matching_loss(outputs, self.targets)


def _create_lennard_jones(ctx: BuildContext, hidden: int = 16, depth: int = 4) -> Workload:
    # TorchBench's inputs: B vectors along +x, lengths evenly spaced over [sigma, 2 sigma].
    lengths = torch.linspace(SIGMA, 2 * SIGMA, ctx.batch_size)
    separations = torch.outer(lengths, torch.tensor([1.0, 0.0, 0.0]))  # (B, 3)
    norms = lengths.reshape(-1, 1)
    energies = EPSILON * ((SIGMA / norms) ** 12 - (SIGMA / norms) ** 6)  # (B, 1)
    magnitude = -EPSILON * (-12 * SIGMA**12 / norms**13 + 6 * SIGMA**6 / norms**7)
    targets = (energies.to(ctx.device), (magnitude * separations).to(ctx.device))
    model = potential_mlp(hidden, depth)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if ctx.train else None
    return DistanceForceWorkload(ctx, model, (separations.to(ctx.device),), targets, optimizer=opt)


def _create_lennard_jones_systems(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(LennardJonesConfig(), **kwargs)
    side = round(cfg.particles ** (1 / 3))
    if side**3 != cfg.particles:
        raise ValueError(f"particles must be a cube number (lattice), got {cfg.particles}")
    axis = torch.arange(side, dtype=torch.float32) * cfg.spacing
    lattice = torch.cartesian_prod(axis, axis, axis).to(ctx.device)  # (N, 3)
    positions = lattice + (ctx.rand(ctx.batch_size, cfg.particles, 3) * 2 - 1) * cfg.jitter  # (B, N, 3)
    targets = (lennard_jones_energy(positions), lennard_jones_forces(positions))
    model = PairPotential(cfg.particles, cfg.hidden, cfg.depth)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if ctx.train else None
    return ForceFieldWorkload(ctx, model, (positions,), targets, optimizer=opt)


@register_model(
    domain="other",
    task="molecular_dynamics",
    source="TorchBench lennard_jones (functorch example, muhrin/milad)",
    batch_size=(1000, 1000),
    tags=("functorch",),
    param_count=865,
)
def lennard_jones(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's: 1-16-16-16-16-1 tanh MLP on 1000 scalar distances, forces by vmap(jacrev)."""
    return _create_lennard_jones(ctx, **kwargs)


@register_model(
    domain="other",
    task="molecular_dynamics",
    source="TorchBench lennard_jones's MLP as a many-body pair potential",
    batch_size=(1000, 1000),
    tags=("double_backward",),
    param_count=865,
)
def lennard_jones_systems(ctx: BuildContext, **kwargs) -> Workload:
    """1-16-16-16-16-1 tanh pair potential over 8-particle systems, forces by autograd.grad (double backward)."""
    return _create_lennard_jones_systems(ctx, **kwargs)
