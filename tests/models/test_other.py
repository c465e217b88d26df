"""Building blocks of the "other" models against hand-computed or brute-force values."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import torchgauge
from torchgauge.models.other.graph.basic_gnn import GATConv, GCNConv, aggregate, edge_softmax, gcn_edge_weights
from torchgauge.models.other.meta_learning.maml import FUNCTORCH_META_BATCH_TASKS, MAMLConfig, MAMLWorkload, OmniglotNet
from torchgauge.models.other.privacy.differential_privacy import per_sample_gradients, privatize_gradients
from torchgauge.models.other.scientific.lennard_jones import (
    PairPotential,
    distance_energies_and_forces,
    energies_and_forces,
    lennard_jones_energy,
    lennard_jones_forces,
    potential_mlp,
)
from torchgauge.models.other.scientific.ocean_grid import NumpyLegacyStream, grid_shape
from torchgauge.models.other.scientific.pyhpc_equation_of_state import gsw_dhdct
from torchgauge.models.other.scientific.pyhpc_equation_of_state_closed_form import (
    gsw_dhdct_closed_form,
    specific_volume,
)
from torchgauge.models.other.scientific.pyhpc_turbulent_kinetic_energy import solve_tridiagonal
from torchgauge.models.other.self_supervised.moco import MoCo, MoCoConfig
from torchgauge.models.other.sequence.linear_chain_crf import LinearChainCRF
from torchgauge.workload import BuildContext

F64 = torch.float64


def _f64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


# -- linear-chain CRF ------------------------------------------------------------------------
def _brute_force(crf: LinearChainCRF, emissions: torch.Tensor, length: int) -> tuple[torch.Tensor, tuple[int, ...]]:
    """log Z and the best path of one sequence by enumerating all K^length tag sequences."""
    num_tags = emissions.shape[-1]
    scores = {}
    for tags in itertools.product(range(num_tags), repeat=length):
        s = crf.start[tags[0]] + crf.end[tags[-1]] + sum(emissions[t, tags[t]] for t in range(length))
        s = s + sum(crf.transitions[tags[t - 1], tags[t]] for t in range(1, length))
        scores[tags] = s
    best = max(scores, key=lambda k: scores[k].item())
    return torch.logsumexp(torch.stack(list(scores.values())), 0), best


def test_crf_partition_and_viterbi_match_enumeration() -> None:
    torch.manual_seed(0)
    crf = LinearChainCRF(3).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.normal_()
    emissions = torch.randn(2, 4, 3, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)  # lengths 4 and 2
    log_z = crf.log_partition(emissions, mask)
    best_score, best_tags = crf.viterbi(emissions, mask)
    for b, length in enumerate((4, 2)):
        expected_z, expected_path = _brute_force(crf, emissions[b], length)
        assert log_z[b].item() == pytest.approx(expected_z.item(), rel=1e-12)
        assert tuple(best_tags[b, :length].tolist()) == expected_path
        gold = crf.score(emissions[b : b + 1], best_tags[b : b + 1], mask[b : b + 1])
        assert best_score[b].item() == pytest.approx(gold.item(), rel=1e-12)
    # the NLL of any sequence is positive
    tags = torch.randint(0, 3, (2, 4))
    assert (log_z - crf.score(emissions, tags, mask) > 0).all()


# -- differential privacy ----------------------------------------------------------------------
def test_vmap_per_sample_gradients_match_single_sample_backward() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))
    images, labels = torch.randn(3, 3, 6, 6), torch.tensor([0, 3, 4])
    grads, losses = per_sample_gradients(net, images, labels)
    for b in range(3):
        net.zero_grad()
        loss = F.cross_entropy(net(images[b : b + 1]), labels[b : b + 1])
        loss.backward()
        assert losses[b].item() == pytest.approx(loss.item(), rel=1e-5)
        for name, p in net.named_parameters():
            torch.testing.assert_close(grads[name][b], p.grad, rtol=1e-4, atol=1e-6)


def test_privatize_clips_each_sample_then_averages() -> None:
    # per-sample norms (over both tensors) 5 and 0.5; clipped to 1: scales 1/5 (+eps) and 1
    sample_grads = {"w": torch.tensor([[3.0, 0.0], [0.3, 0.0]]), "b": torch.tensor([[4.0], [0.4]])}
    out = privatize_gradients(sample_grads, max_grad_norm=1.0, noise_multiplier=0.0)
    torch.testing.assert_close(out["w"], torch.tensor([(0.6 + 0.3) / 2, 0.0]), rtol=1e-5, atol=0)
    torch.testing.assert_close(out["b"], torch.tensor([(0.8 + 0.4) / 2]), rtol=1e-5, atol=0)


# -- graph networks ------------------------------------------------------------------------------
PATH_EDGES = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # 0 - 1 - 2, both directions


def test_gcn_normalisation_on_a_path_graph() -> None:
    # with self loops the degrees are 2, 3, 2
    a_hat = torch.tensor(
        [
            [1 / 2, 1 / math.sqrt(6), 0.0],
            [1 / math.sqrt(6), 1 / 3, 1 / math.sqrt(6)],
            [0.0, 1 / math.sqrt(6), 1 / 2],
        ]
    )
    edges, weights = gcn_edge_weights(PATH_EDGES, 3)
    dense = torch.zeros(3, 3).index_put_((edges[1], edges[0]), weights, accumulate=True)
    torch.testing.assert_close(dense, a_hat)
    conv = GCNConv(3, 3)
    with torch.no_grad():
        conv.lin.weight.copy_(torch.eye(3))
        conv.bias.fill_(0.5)
    x = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [1.0, 1.0, 1.0]])
    torch.testing.assert_close(conv(x, PATH_EDGES), a_hat @ x + 0.5)


def test_aggregate_reductions() -> None:
    messages = torch.tensor([[1.0], [2.0], [5.0], [-4.0]])  # source 0, 1, 1, 2 -> target 1, 0, 2, 1
    target = PATH_EDGES[1]
    assert aggregate(messages, target, 4, "sum").flatten().tolist() == [2.0, -3.0, 5.0, 0.0]
    assert aggregate(messages, target, 4, "mean").flatten().tolist() == [2.0, -1.5, 5.0, 0.0]
    assert aggregate(messages, target, 4, "max").flatten().tolist() == [2.0, 1.0, 5.0, 0.0]


def test_edge_softmax_matches_dense_masked_softmax() -> None:
    gen = torch.Generator().manual_seed(0)
    n, heads = 6, 2
    edges = torch.tensor([[0, 1, 2, 3, 4, 5, 1, 3, 0], [1, 0, 1, 1, 3, 3, 2, 4, 5]])
    logits = torch.randn(edges.shape[1], heads, generator=gen) * 10
    alpha = edge_softmax(logits, edges[1], n)
    for h in range(heads):
        dense = torch.full((n, n), float("-inf")).index_put((edges[1], edges[0]), logits[:, h])  # (target, source)
        mask = torch.isfinite(dense).any(1, keepdim=True)
        expected = torch.where(mask, torch.softmax(dense, dim=1), 0.0)[edges[1], edges[0]]
        torch.testing.assert_close(alpha[:, h], expected)


def test_gat_one_head_attends_by_dense_softmax() -> None:
    gen = torch.Generator().manual_seed(1)
    conv = GATConv(3, 4).eval()
    x = torch.randn(3, 3, generator=gen)
    h = conv.lin(x)
    a_src, a_dst = h @ conv.att_src[0, 0], h @ conv.att_dst[0, 0]
    adj = torch.eye(3, dtype=torch.bool)  # self loops
    adj[PATH_EDGES[1], PATH_EDGES[0]] = True  # adj[target, source]
    scores = F.leaky_relu(a_dst[:, None] + a_src[None, :], 0.2).masked_fill(~adj, float("-inf"))
    torch.testing.assert_close(conv(x, PATH_EDGES), torch.softmax(scores, 1) @ h + conv.bias)


# -- pyhpc kernels ---------------------------------------------------------------------------------
def test_grid_shape_of_torchbench_size() -> None:
    assert grid_shape(2**20) == (204, 204, 26)
    assert grid_shape(2**12) == (32, 32, 4)


# (SA g/kg, CT degC, p dbar) -> dh/dCT from pyhpc-benchmarks' gsw_dHdT (the Maple-generated reference)
PYHPC_REFERENCE = [
    ((35.16504, 10.0, 1000.0), 1.7168110946689978),
    ((30.0, 20.0, 500.0), 1.2288046309607594),
    ((5.0, -5.0, 250.0), -0.3122702626085925),
    ((0.01, -12.0, 1000.0), -2.819090532222617),
    ((35.0, 0.0, 0.0), 0.0),
]


@pytest.mark.parametrize("dhdct", [gsw_dhdct, gsw_dhdct_closed_form])
@pytest.mark.parametrize("point,expected", PYHPC_REFERENCE)
def test_eos_matches_pyhpc_reference(dhdct, point, expected) -> None:
    assert dhdct(*map(_f64, point)).item() == pytest.approx(expected, rel=1e-9, abs=1e-9)


# TorchBench's own kernels (models/pyhpc_*/{eos,isoneutral,tke}_pytorch.py at 0e83c440) on their
# seed-17 inputs at 2**12 points (32 x 32 x 4), run 2026-11-25: the output's sum and sum of |x|,
# and gsw_dHdT's values at a few flat indices.
TORCHBENCH_EOS_SMOKE_SUM = 84.2527637165103
TORCHBENCH_EOS_SMOKE_VALUES = {
    0: 0.1943896310866231,
    1000: -0.13158846347877784,
    2047: 0.3486889113754046,
    3000: -0.19314852489401346,
    4095: -0.8129357637599242,
}
TORCHBENCH_SMOKE_OUTPUTS = {
    # K_11, K_22, K_33, Ai_ez, Ai_nz, Ai_bx, Ai_by
    "pyhpc_isoneutral_mixing": [
        (8202.56457695074, 25211.759378876464),
        (7881.163670762879, 24683.42554661328),
        (-23.862706127084348, 752.8218247184532),
        (0.0008758230656383551, 0.004411018881458644),
        (-0.00019188781787818202, 0.0017169293691161915),
        (0.0008758216400289544, 0.004411017313899588),
        (-0.00019188780283627572, 0.0017169293530320685),
    ],
    # tke, dtke, tke_surf_corr (randn grid metrics make the implicit solve amplify: large sums)
    "pyhpc_turbulent_kinetic_energy": [
        (-2378972058.149645, 14047453181.611452),
        (-598935.7373440292, 1952983.8681674767),
        (888.7214943862782, 888.7214943862782),
    ],
}
# Operations TorchBench's kernels dispatch at 2**12 points, views aside (aten ops counted under a
# TorchDispatchMode, 2026-11-25; tke includes its forward's two clones): ours run the same sequence.
TORCHBENCH_SMOKE_OPS = {
    "pyhpc_equation_of_state": 372,
    "pyhpc_isoneutral_mixing": 487,
    "pyhpc_turbulent_kinetic_energy": 307,
}


class _ComputeOps(TorchDispatchMode):
    """Counts the aten operations dispatched, views aside."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["pyhpc_equation_of_state", "pyhpc_equation_of_state_closed_form"])
def test_eos_feeds_torchbench_inputs_and_matches_its_outputs(name: str) -> None:
    w = torchgauge.create(name, mode="eval", size="smoke")
    sa, ct, p = w.inputs
    assert (sa.shape, ct.shape, p.shape) == ((32, 32, 4), (32, 32, 4), (1, 1, 4))
    # numpy.random.seed(17); numpy.random.uniform(1e-2, 10): the first draw is 0.2946650026871097
    assert sa.flatten()[0].item() == 1e-2 + (10 - 1e-2) * 0.2946650026871097
    out = w.step().flatten()
    rel = 1e-12 if name == "pyhpc_equation_of_state" else 1e-6  # TorchBench's expression / the closed form
    assert out.sum().item() == pytest.approx(TORCHBENCH_EOS_SMOKE_SUM, rel=rel)
    for index, expected in TORCHBENCH_EOS_SMOKE_VALUES.items():
        assert out[index].item() == pytest.approx(expected, rel=rel)


def test_eos_closed_form_agrees_with_torchbench_expression() -> None:
    sa, ct, p = torchgauge.create("pyhpc_equation_of_state", mode="eval", size="smoke").inputs
    torch.testing.assert_close(gsw_dhdct_closed_form(sa, ct, p), gsw_dhdct(sa, ct, p), rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("name", sorted(TORCHBENCH_SMOKE_OPS))
def test_pyhpc_kernel_dispatches_torchbench_operations(name: str) -> None:
    w = torchgauge.create(name, mode="eval", size="smoke")
    with torch.no_grad(), _ComputeOps() as ops:
        w.module(*w.inputs)
    assert ops.count == TORCHBENCH_SMOKE_OPS[name]


@pytest.mark.parametrize("name", sorted(TORCHBENCH_SMOKE_OUTPUTS))
def test_pyhpc_stencils_match_torchbench_outputs(name: str) -> None:
    w = torchgauge.create(name, mode="eval", size="smoke")
    outputs = w.step()
    assert len(outputs) == len(TORCHBENCH_SMOKE_OUTPUTS[name])
    for out, (total, magnitude) in zip(outputs, TORCHBENCH_SMOKE_OUTPUTS[name]):
        assert out.double().sum().item() == pytest.approx(total, rel=1e-9, abs=1e-15)
        assert out.double().abs().sum().item() == pytest.approx(magnitude, rel=1e-9)


def test_isoneutral_mixing_writes_into_its_inputs_as_torchbench() -> None:
    w = torchgauge.create("pyhpc_isoneutral_mixing", mode="eval", size="smoke")
    assert len(w.inputs) == 23
    assert all(t.dtype == F64 for t in w.inputs)
    k_11 = w.inputs[16].clone()  # K_11: drawn from numpy's stream, rewritten on faces 1..nx-3 of rows 2..ny-3
    outputs = w.step()
    assert all(out is arg for out, arg in zip(outputs, w.inputs[16:]))
    untouched = torch.ones_like(k_11, dtype=torch.bool)
    untouched[1:-2, 2:-2] = False
    assert torch.equal(outputs[0][untouched], k_11[untouched]) and not torch.equal(outputs[0], k_11)
    again = [out.clone() for out in outputs]
    assert all(torch.equal(a, b) for a, b in zip(w.step(), again))  # writes the same values every step


def test_turbulent_kinetic_energy_leaves_its_inputs_and_returns_float32_correction() -> None:
    w = torchgauge.create("pyhpc_turbulent_kinetic_energy", mode="eval", size="smoke")
    assert len(w.inputs) == 21
    assert w.inputs[14].dtype == torch.int64 and int(w.inputs[14].max()) < 4  # kbot in [0, nz)
    before = [t.clone() for t in w.inputs]
    tke, dtke, surface = w.step()
    assert all(torch.equal(a, b) for a, b in zip(w.inputs, before))  # tke and dtke are copied, as TorchBench's forward
    assert (tke.dtype, dtke.dtype, surface.dtype) == (F64, F64, torch.float32)


def test_turbulent_kinetic_energy_rejects_a_grid_of_one_level() -> None:
    with pytest.raises(ValueError, match="batch size \\(grid points\\) above 64, got 64"):
        torchgauge.create("pyhpc_turbulent_kinetic_energy", mode="eval", batch_size=64)


@pytest.mark.parametrize("use_numpy", [False, True], ids=["pure-python", "numpy"])
def test_numpy_legacy_stream_matches_numpy(use_numpy: bool) -> None:
    np = pytest.importorskip("numpy")
    ours, reference = NumpyLegacyStream(17, use_numpy=use_numpy), np.random.RandomState(17)
    draws = [
        ("uniform", (-12.0, 20.0, (3, 5))),
        ("rand", (4, 3)),
        ("randn", (7,)),  # odd: the second normal of the last pair is cached
        ("rand", (3,)),  # the cache outlives other draws
        ("randn", (1,)),  # the cached normal
        ("randn", (5000,)),
        ("randint", (0, 26, (33, 7))),
        ("randint", (3, 4, (2,))),  # a single value: nothing drawn
        ("randn", (2, 3)),
    ]
    for method, args in draws:
        expected = getattr(reference, method)(*args)
        got = getattr(ours, method)(*args)
        assert torch.equal(got, torch.from_numpy(np.asarray(expected))), method


def test_numpy_legacy_stream_meta_draws_shapes_only() -> None:
    stream = NumpyLegacyStream(17, meta=True)
    draws = stream.rand(2, 3), stream.randn(4), stream.randint(0, 5, (2, 2)), stream.uniform(0, 1, (3,))
    assert [(t.device.type, t.dtype, tuple(t.shape)) for t in draws] == [
        ("meta", F64, (2, 3)),
        ("meta", F64, (4,)),
        ("meta", torch.int64, (2, 2)),
        ("meta", F64, (3,)),
    ]


def test_eos_is_the_ct_derivative_of_integrated_specific_volume() -> None:
    sa, ct, p = _f64(35.16504), 8.0, 800.0
    pressures = torch.linspace(0.0, p, 2001, dtype=F64)

    def enthalpy(ct_value: float) -> float:  # 1e4 * integral of v dp (Pa), trapezoid on a fine grid
        return 1e4 * torch.trapezoid(specific_volume(sa, _f64(ct_value), pressures), pressures).item()

    delta = 1e-3
    central = (enthalpy(ct + delta) - enthalpy(ct - delta)) / (2 * delta)
    assert gsw_dhdct(sa, _f64(ct), _f64(p)).item() == pytest.approx(central, rel=1e-6)


def test_eos_density_of_standard_seawater() -> None:
    # rho(S=35, 0 degC, surface) = 1028.106 kg/m^3, the classic standard-seawater value
    assert 1 / specific_volume(_f64(35.16504), _f64(0.0), _f64(0.0)).item() == pytest.approx(1028.106, abs=0.05)


def test_tridiagonal_solver_matches_dense_solve() -> None:
    torch.manual_seed(0)
    n = 6
    a, c = torch.rand(2, 2, 5, n, dtype=F64)  # (batch, n) each
    b = 2.5 + torch.rand(2, 5, n, dtype=F64)  # diagonally dominant
    d = torch.randn(2, 5, n, dtype=F64)
    dense = torch.diag_embed(b) + torch.diag_embed(a[..., 1:], -1) + torch.diag_embed(c[..., :-1], 1)
    expected = torch.linalg.solve(dense, d.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(solve_tridiagonal(a, b, c, d), expected)  # overwrites b and d, as the reference
    with pytest.raises(ValueError, match="one shape"):
        solve_tridiagonal(a[0], b, c, d)


# -- Lennard-Jones ------------------------------------------------------------------------------------
def _finite_difference_forces(energy, positions: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    forces = torch.zeros_like(positions)
    for idx in itertools.product(*map(range, positions.shape)):
        up, down = positions.clone(), positions.clone()
        up[idx] += h
        down[idx] -= h
        forces[idx] = -(energy(up).sum() - energy(down).sum()) / (2 * h)
    return forces


def test_forces_are_minus_the_energy_gradient() -> None:
    torch.manual_seed(0)
    positions = torch.tensor([[[0.0, 0.0, 0.0], [0.6, 0.05, 0.0], [0.1, 0.7, -0.05]]], dtype=F64)
    model = PairPotential(3).double()
    _, forces = energies_and_forces(model, positions, create_graph=False)
    with torch.no_grad():
        torch.testing.assert_close(forces, _finite_difference_forces(model, positions), rtol=1e-6, atol=1e-8)
        fd = _finite_difference_forces(lennard_jones_energy, positions)
        torch.testing.assert_close(lennard_jones_forces(positions), fd, rtol=1e-6, atol=1e-6)


def test_distance_forces_are_minus_the_energy_gradient() -> None:
    # TorchBench's lennard_jones: forces from vmap(jacrev) of the scalar-distance MLP
    torch.manual_seed(0)
    mlp = potential_mlp().double()
    separations = torch.tensor([[0.6, 0.0, 0.0], [0.3, 0.4, 0.0], [0.0, 0.5, 0.5]], dtype=F64, requires_grad=True)
    energies, forces = distance_energies_and_forces(mlp, separations)
    (grad,) = torch.autograd.grad(energies.sum(), separations)
    torch.testing.assert_close(forces, -grad)


def test_lennard_jones_pair_values() -> None:
    # U(sigma) = 0 and the minimum U(2^(1/6) sigma) = -EPSILON / 4 = -1 with zero force
    r_min = 2 ** (1 / 6) * 0.5
    pair = torch.tensor([[[0.0, 0.0, 0.0], [r_min, 0.0, 0.0]]], dtype=F64)
    assert lennard_jones_energy(pair).item() == pytest.approx(-1.0)
    assert lennard_jones_forces(pair).abs().max().item() < 1e-9
    assert lennard_jones_energy(pair / (2 ** (1 / 6))).item() == pytest.approx(0.0, abs=1e-12)


# -- MAML -------------------------------------------------------------------------------------------------
def _maml_meta_grads(net: torch.nn.Module, vectorized: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Query predictions and meta-gradients of one second-order MAML step over two 3-way tasks (float64)."""
    torch.manual_seed(0)
    ctx = BuildContext(name="maml_test", mode="train", device=torch.device("cpu"), batch_size=2, size="smoke")
    cfg = MAMLConfig(inner_steps=2, eval_inner_steps=2, inner_lr=0.1, shots=1, queries=2, ways=3, image_size=22)
    x_spt, x_qry = torch.rand(2, 3, 1, 22, 22, dtype=F64), torch.rand(2, 6, 1, 22, 22, dtype=F64)
    y_spt, y_qry = torch.arange(3).repeat(2, 1), torch.arange(3).repeat_interleave(2).repeat(2, 1)
    w = MAMLWorkload(ctx, net, (x_spt, y_spt, x_qry), y_qry, cfg=cfg, task_loss=F.cross_entropy, vectorized=vectorized)
    net.zero_grad()
    outputs = w.forward()
    w.compute_loss(outputs).backward()
    return outputs.detach(), [p.grad.clone() for p in net.parameters()]


def _omniglot_net(batch_norm: bool) -> torch.nn.Module:
    torch.manual_seed(1)
    net = OmniglotNet(ways=3).to(F64)
    if not batch_norm:
        for i, layer in enumerate(net):
            if isinstance(layer, torch.nn.BatchNorm2d):
                net[i] = torch.nn.Identity()
    return net


def test_functorch_and_autograd_maml_agree() -> None:
    # Without BatchNorm the vmap(grad) port and the autograd.grad loop are the same function.
    net = _omniglot_net(batch_norm=False)
    (out_loop, grads_loop), (out_vmap, grads_vmap) = (_maml_meta_grads(net, v) for v in (False, True))
    torch.testing.assert_close(out_vmap, out_loop)
    for g_vmap, g_loop in zip(grads_vmap, grads_loop):
        torch.testing.assert_close(g_vmap, g_loop)


def test_functorch_and_autograd_maml_forward_agrees_with_batch_norm() -> None:
    net = _omniglot_net(batch_norm=True)
    (out_loop, _), (out_vmap, _) = (_maml_meta_grads(net, v) for v in (False, True))
    torch.testing.assert_close(out_vmap, out_loop)


@pytest.mark.xfail(
    strict=True,
    reason="upstream: batch_norm backward batching rule under vmap is wrong for "
    "second-order grads (pytorch/functorch#534); the autograd loop matches finite differences",
)
def test_functorch_maml_meta_gradient_with_batch_norm() -> None:
    # Found by this suite on torch 2.13: second-order meta-gradients through BatchNorm differ by
    # ~5% between vmap(grad) and the loop; finite differences side with the loop. strict=True makes
    # a fixed torch turn this into a failure, so the note gets removed.
    net = _omniglot_net(batch_norm=True)
    (_, grads_loop), (_, grads_vmap) = (_maml_meta_grads(net, v) for v in (False, True))
    for g_vmap, g_loop in zip(grads_vmap, grads_loop):
        torch.testing.assert_close(g_vmap, g_loop)


def test_functorch_maml_omniglot_is_torchbench_step() -> None:
    # TorchBench: batch 1 declared, 5 tasks adapted per step, a fresh Adam per step; eval = one forward
    train = torchgauge.create("functorch_maml_omniglot", mode="train", size="smoke")
    assert train.batch_size == 1 and train.inputs[0].shape[0] == FUNCTORCH_META_BATCH_TASKS
    optimizers = [train.optimizer]
    for _ in range(2):
        train.step()
        optimizers.append(train.optimizer)
        assert all(s["step"].item() == 1 for s in train.optimizer.state.values())  # always Adam's first step
    assert len({id(o) for o in optimizers}) == 3  # a new Adam every step
    outputs = train.forward()
    per_task = [F.cross_entropy(outputs[t], train.targets[t]) for t in range(outputs.shape[0])]
    torch.testing.assert_close(train.compute_loss(outputs), torch.stack(per_task).sum())  # summed over tasks
    ev = torchgauge.create("functorch_maml_omniglot", mode="eval", size="smoke")
    (support,) = ev.inputs  # the first task's support images
    assert support.shape == (5, 1, 22, 22)  # 5 ways x 1 shot at smoke (TorchBench: 25 at 28 px)
    torch.testing.assert_close(ev.step(), ev.module(support))


# -- MoCo ---------------------------------------------------------------------------------------------------
def test_moco_queue_wraps_around() -> None:
    torch.manual_seed(0)
    model = MoCo(MoCoConfig(depth=18, dim=2, queue_size=4))
    first, second = torch.arange(6.0).reshape(3, 2), -torch.arange(6.0).reshape(3, 2)
    model._enqueue(first)  # columns 0, 1, 2
    model._enqueue(second)  # columns 3, 0, 1
    assert model.queue_ptr.item() == 2
    torch.testing.assert_close(model.queue.T, torch.stack([second[1], second[2], first[2], second[0]]))
