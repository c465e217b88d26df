"""SchNet against known answers: finite-difference forces, brute-force graphs, symmetries."""

from __future__ import annotations

import math

import torch

import torchgauge
from torchgauge.models.other.scientific.schnet import (
    GaussianSmearing,
    SchNet,
    SchNetConfig,
    energy_and_forces,
    radius_graph,
    shifted_softplus,
)

F64 = torch.float64
SMALL = SchNetConfig(hidden_channels=8, num_filters=8, num_interactions=2, num_gaussians=6, cutoff=3.0)


def _molecules(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    counts = torch.tensor([4, 6, 3])
    pos = torch.randn(int(counts.sum()), 3, generator=gen, dtype=F64) * 1.2
    z = torch.randint(1, 10, (pos.shape[0],), generator=gen)
    batch = torch.arange(3).repeat_interleave(counts)
    return z, pos, batch


def _model(seed: int = 0) -> SchNet:
    torch.manual_seed(seed)
    return SchNet(SMALL).double()


def _rotation(seed: int) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(seed), dtype=F64))
    q = q * torch.sign(torch.diagonal(r))
    return q if torch.det(q) > 0 else -q


def test_shifted_softplus_is_zero_at_zero_and_softplus_minus_log2() -> None:
    x = torch.tensor([-3.0, 0.0, 2.0], dtype=F64)
    torch.testing.assert_close(shifted_softplus(x), torch.log1p(torch.exp(x)) - math.log(2))
    assert shifted_softplus(torch.zeros(())).item() == 0.0


def test_gaussian_smearing_peaks_at_its_centres_with_width_equal_to_spacing() -> None:
    rbf = GaussianSmearing(0.0, 4.0, 5).double()  # centres 0, 1, 2, 3, 4; coeff -1/2
    out = rbf(torch.tensor([2.0, 2.5], dtype=F64))
    torch.testing.assert_close(out[0], torch.exp(-0.5 * (2.0 - torch.arange(5, dtype=F64)) ** 2))
    assert out[0, 2].item() == 1.0
    torch.testing.assert_close(out[1, 2], out[1, 3])  # halfway between two centres


def test_radius_graph_matches_brute_force_pairs() -> None:
    z, pos, batch = _molecules()
    cutoff = 2.0
    edges = radius_graph(pos, batch, cutoff)
    got = sorted(map(tuple, edges.T.tolist()))
    expected = sorted(
        (s, t)
        for t in range(len(pos))
        for s in range(len(pos))
        if s != t and batch[s] == batch[t] and (pos[s] - pos[t]).norm() < cutoff
    )
    assert got == expected and len(expected) > 0
    assert torch.all(edges[1][1:] >= edges[1][:-1])  # sorted by target


def test_forces_match_central_finite_differences() -> None:
    z, pos, batch = _molecules(1)
    model = _model(1)
    energy, forces = energy_and_forces(model, z, pos, batch, 3, create_graph=False)
    h = 1e-6
    fd = torch.zeros_like(pos)
    with torch.no_grad():
        for a in range(pos.shape[0]):
            for d in range(3):
                plus, minus = pos.clone(), pos.clone()
                plus[a, d] += h
                minus[a, d] -= h
                fd[a, d] = -(model(z, plus, batch, 3).sum() - model(z, minus, batch, 3).sum()) / (2 * h)
    torch.testing.assert_close(forces, fd, rtol=1e-6, atol=1e-7)
    assert forces.abs().max() > 1e-3  # not trivially zero


def test_energy_is_invariant_and_forces_equivariant_under_rotation_and_translation() -> None:
    z, pos, batch = _molecules(2)
    model = _model(2)
    rot, shift = _rotation(3), torch.tensor([0.3, -1.0, 2.0], dtype=F64)
    e1, f1 = energy_and_forces(model, z, pos, batch, 3, create_graph=False)
    e2, f2 = energy_and_forces(model, z, pos @ rot.T + shift, batch, 3, create_graph=False)
    torch.testing.assert_close(e2, e1)
    torch.testing.assert_close(f2, f1 @ rot.T)


def test_energy_is_a_sum_over_molecules() -> None:
    z, pos, batch = _molecules(4)
    model = _model(4)
    with torch.no_grad():
        together = model(z, pos, batch, 3)
        alone = torch.stack(
            [
                model(z[batch == m], pos[batch == m], torch.zeros(int((batch == m).sum()), dtype=torch.long), 1)[0]
                for m in range(3)
            ]
        )
    torch.testing.assert_close(together, alone)


def test_cosine_cutoff_removes_pairs_at_the_cutoff_smoothly() -> None:
    # two atoms: the interaction vanishes as their distance reaches the cutoff, so the energy
    # approaches that of two isolated atoms
    model = _model(5)
    z, batch = torch.tensor([6, 8]), torch.tensor([0, 0])
    with torch.no_grad():
        isolated = sum(
            model(z[i : i + 1], torch.zeros(1, 3, dtype=F64), torch.zeros(1, dtype=torch.long), 1) for i in range(2)
        )
        near_cut = model(z, torch.tensor([[0.0, 0, 0], [SMALL.cutoff - 1e-4, 0, 0]], dtype=F64), batch, 1)
    torch.testing.assert_close(near_cut, isolated, rtol=0, atol=1e-6)


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    w = torchgauge.create("schnet", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(40)]
    assert losses[-1] < 0.9 * losses[0]
