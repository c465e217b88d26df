"""DimeNet++ basis functions against closed forms; triplets against brute force; symmetries."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.other.scientific.dimenet_pp import (
    DimeNetPlusPlus,
    DimeNetPPConfig,
    Envelope,
    SphericalBasis,
    spherical_bessel,
    spherical_bessel_zeros,
    triplets,
)
from torchgauge.models.other.scientific.schnet import radius_graph

F64 = torch.float64


def _closed_form_j(order: int, x: torch.Tensor) -> torch.Tensor:
    s, c = torch.sin(x), torch.cos(x)
    return {
        0: s / x,
        1: s / x**2 - c / x,
        2: (3 / x**2 - 1) * s / x - 3 * c / x**2,
        3: (15 / x**3 - 6 / x) * s / x - (15 / x**2 - 1) * c / x,
    }[order]


def test_spherical_bessel_recurrence_matches_closed_forms() -> None:
    x = torch.linspace(0.5, 20.0, 200, dtype=F64)
    j = spherical_bessel(x, 3)
    for order in range(4):
        torch.testing.assert_close(j[:, order], _closed_form_j(order, x), rtol=1e-9, atol=1e-12)


def test_spherical_bessel_zeros_are_zeros_and_match_tabulated_values() -> None:
    zeros = spherical_bessel_zeros(7, 6)
    torch.testing.assert_close(zeros[0], torch.arange(1, 7, dtype=F64) * math.pi)  # j_0 = sin(x)/x
    # first zeros of j_1, j_2, j_3 (Abramowitz & Stegun, table 10.6)
    torch.testing.assert_close(
        zeros[1:4, 0], torch.tensor([4.493409457909064, 5.763459196894550, 6.987932000500520], dtype=F64)
    )
    for order in range(7):
        assert spherical_bessel(zeros[order], order)[:, order].abs().max() < 1e-12
    assert torch.all(zeros[1:] > zeros[:-1])  # interlacing: each order's n-th zero is larger


def test_envelope_is_one_over_x_near_zero_and_vanishes_smoothly_at_one() -> None:
    env = Envelope(5)
    x = torch.tensor([1e-4], dtype=F64)
    torch.testing.assert_close(env(x) * x, torch.ones(1, dtype=F64), rtol=1e-6, atol=0)
    one = torch.tensor([1.0 - 1e-7], dtype=F64, requires_grad=True)
    value = env(one)
    (slope,) = torch.autograd.grad(value.sum(), one)
    assert abs(value.item()) < 1e-9 and abs(slope.item()) < 1e-4
    assert env(torch.tensor([1.0, 1.5], dtype=F64)).abs().max() == 0  # zero beyond the cutoff


def test_spherical_basis_entry_matches_hand_formula() -> None:
    sbf = SphericalBasis(num_spherical=3, num_radial=2, cutoff=5.0, envelope_exponent=5).double()
    dist, angle = torch.tensor([1.7, 2.9], dtype=F64), torch.tensor([0.4, 2.1], dtype=F64)
    out = sbf(dist, angle, torch.tensor([1, 0])).view(2, 3, 2)
    zeros = sbf.zeros  # fp32, as PyG's float32 Jn_zeros (their accuracy is tested above)
    legendre = [lambda c: torch.ones_like(c), lambda c: c, lambda c: (3 * c**2 - 1) / 2]
    for t, e in enumerate([1, 0]):  # triplet t uses edge e
        x = dist[e] / 5.0
        u = Envelope(5)(x.view(1))[0]
        for order in range(3):
            for n in range(2):
                norm = math.sqrt(2) / abs(_closed_form_j(order + 1, zeros[order, n]).item())
                y = math.sqrt((2 * order + 1) / (4 * math.pi)) * legendre[order](torch.cos(angle[t]))
                expected = norm * _closed_form_j(order, zeros[order, n] * x) * u * y
                torch.testing.assert_close(out[t, order, n], expected, rtol=1e-6, atol=1e-9)


def _molecules(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    counts = torch.tensor([5, 3, 4])
    pos = torch.randn(int(counts.sum()), 3, generator=gen, dtype=F64)
    z = torch.randint(1, 10, (pos.shape[0],), generator=gen)
    return z, pos, torch.arange(3).repeat_interleave(counts)


def test_triplets_match_brute_force_enumeration() -> None:
    _, pos, batch = _molecules(0)
    edges = radius_graph(pos, batch, 1.8)
    idx_i, idx_j, idx_k, idx_kj, idx_ji = triplets(edges, pos.shape[0])
    edge_of = {(int(s), int(t)): e for e, (s, t) in enumerate(edges.T)}
    expected = sorted(
        (edge_of[(k, j)], edge_of[(j, i)]) for (j, i) in edge_of for (k, jj) in edge_of if jj == j and k != i
    )
    assert sorted(zip(idx_kj.tolist(), idx_ji.tolist())) == expected and expected
    torch.testing.assert_close(edges[0][idx_kj], idx_k)  # k is the source of edge kj
    torch.testing.assert_close(edges[1][idx_kj], idx_j)  # which enters j
    torch.testing.assert_close(edges[0][idx_ji], idx_j)
    torch.testing.assert_close(edges[1][idx_ji], idx_i)


def _model(seed: int) -> DimeNetPlusPlus:
    torch.manual_seed(seed)
    cfg = DimeNetPPConfig(
        hidden_channels=8,
        num_blocks=2,
        int_emb_size=4,
        basis_emb_size=3,
        out_emb_channels=8,
        num_spherical=3,
        num_radial=3,
        cutoff=2.5,
    )
    model = DimeNetPlusPlus(cfg).double()
    for block in model.output_blocks:  # the zero output init would make every test below trivially pass
        torch.nn.init.normal_(block.lin.weight)
    return model


def test_prediction_is_invariant_under_rotation_translation_and_reflection() -> None:
    z, pos, batch = _molecules(1)
    model = _model(1)
    q, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(2), dtype=F64))
    with torch.no_grad():
        before = model(z, pos, batch, 3)
        after = model(z, pos @ q.T + torch.tensor([1.0, -2.0, 0.5], dtype=F64), batch, 3)
    torch.testing.assert_close(after, before)
    assert before.abs().min() > 0


def test_prediction_depends_on_angles_not_only_distances() -> None:
    # Two 3-atom chains with the same bonded distances but different bond angles: with a cutoff
    # that excludes the 1-3 pair, only the spherical basis can tell them apart.
    model = _model(3)
    z, batch = torch.tensor([6, 6, 6]), torch.zeros(3, dtype=torch.long)

    def chain(theta: float) -> torch.Tensor:
        return torch.tensor([[1.0, 0, 0], [0, 0, 0], [math.cos(theta), math.sin(theta), 0]], dtype=F64) * 1.4

    model.sbf.cutoff = model.rbf.cutoff = model.cutoff = 2.2  # 1-3 distance 2.8 and 2.42 both exceed it
    with torch.no_grad():
        a, b = model(z, chain(2.0), batch, 1), model(z, chain(2.6), batch, 1)
    assert (a - b).abs().item() > 1e-6


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    w = torchgauge.create("dimenet_pp", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(40)]
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_spherical_basis_accepts_half_inputs_and_computes_in_fp32(dtype: torch.dtype) -> None:
    # torch.special's Bessel j0 and Legendre P have no half kernels on CPU: the basis runs in fp32
    sbf = SphericalBasis(3, 2, 5.0, 5)
    dist, angle = torch.tensor([1.7, 2.9]).to(dtype), torch.tensor([0.4, 2.1]).to(dtype)
    out = sbf(dist, angle, torch.tensor([1, 0]))
    assert out.dtype == dtype
    torch.testing.assert_close(out, sbf(dist.float(), angle.float(), torch.tensor([1, 0])).to(dtype))
