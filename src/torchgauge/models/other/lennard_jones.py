"""Lennard-Jones force field fit: an MLP pair potential whose forces are minus its position gradient.

TorchBench's ``lennard_jones`` (adapted from muhrin/milad, GPL-3.0, via the functorch
examples) fits a 1-16-16-16-16-1 tanh MLP to the Lennard-Jones energy
``4 ((sigma/r)^12 - (sigma/r)^6)`` (sigma = 0.5; the reference calls the 4 epsilon) and its
forces, with the loss
``mse(E) + 0.01 * mse(F) / 3``. Here the same MLP is a pair potential over all pairs of a
small particle system: ``E = sum_{i<j} mlp(|x_i - x_j|)`` and ``F_i = -dE/dx_i`` by
``torch.autograd.grad``, with ``create_graph=True`` in training so the force error can be
back-propagated (a double backward). Eval computes energies and forces too, so it runs with
grad enabled. Targets are the analytic Lennard-Jones energies and forces. Batch = systems.
Written from the description above; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["PairPotential", "energies_and_forces", "lennard_jones_energy"]

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


class PairPotential(nn.Module):
    """Systems ``(B, N, 3)`` -> energies ``(B,)`` as a sum of an MLP over pair distances."""

    def __init__(self, particles: int, hidden: int = 16, depth: int = 4) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = 1
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        self.mlp = nn.Sequential(*layers, nn.Linear(width, 1))
        i, j = torch.triu_indices(particles, particles, 1)
        self.register_buffer("pair_i", i, persistent=False)
        self.register_buffer("pair_j", j, persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        r = (positions[:, self.pair_i] - positions[:, self.pair_j]).norm(dim=-1, keepdim=True)  # (B, P, 1)
        return self.mlp(r).sum(dim=(1, 2))  # (B,)


def energies_and_forces(model: nn.Module, positions: torch.Tensor, create_graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies ``(B,)`` and forces ``-dE/dx`` ``(B, N, 3)``; ``create_graph`` to train through the forces."""
    positions = positions.detach().requires_grad_(True)
    energies = model(positions)
    (grad,) = torch.autograd.grad(energies.sum(), positions, create_graph=create_graph)
    return energies, -grad


class ForceFieldWorkload(Workload):
    """Train: energy + force matching through a double backward; eval: energies and forces."""

    eval_grad_mode = "enable_grad"  # forces are a gradient even at inference

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        (positions,) = self.inputs
        return energies_and_forces(self.module, positions, create_graph=self.ctx.train)

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        (energies, forces), (true_energies, true_forces) = outputs, self.targets
        return F.mse_loss(energies, true_energies) + 0.01 * F.mse_loss(forces, true_forces) / 3


def _create_lennard_jones(ctx: BuildContext, **kwargs) -> Workload:
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


@register_model(domain="other", task="molecular_dynamics", source="TorchBench lennard_jones (functorch example, muhrin/milad)",
                batch_size=(1000, 1000), tags=("double_backward",), param_count=865)
def lennard_jones(ctx: BuildContext, **kwargs) -> Workload:
    """1-16-16-16-16-1 tanh pair potential fit to Lennard-Jones energies and forces, 8-particle systems."""
    return _create_lennard_jones(ctx, **kwargs)
