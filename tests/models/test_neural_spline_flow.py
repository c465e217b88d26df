"""Neural spline flow: invertibility, log-determinants against autograd Jacobians, spline knots."""

from __future__ import annotations

import torch

import torchgauge
from torchgauge.models.other.probabilistic.neural_spline_flow import (
    LULinear,
    NeuralSplineFlow,
    NSFConfig,
    RQSCoupling,
    alternating_mask,
    rational_quadratic_spline,
    unconstrained_rational_quadratic_spline,
)

F64 = torch.float64
SMALL = NSFConfig(features=4, num_flow_steps=2, hidden_features=8, num_transform_blocks=1, num_bins=5, tail_bound=2.0)


def _perturbed(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """float64 copy with every parameter jittered: far from the identity initialisation."""
    torch.manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.5 * torch.randn_like(p))
    return module


def _points(n: int, d: int, seed: int) -> torch.Tensor:
    return 1.5 * torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=F64)  # some beyond the tails


def test_spline_maps_knots_to_knots_and_is_monotone() -> None:
    gen = torch.Generator().manual_seed(0)
    w, h, d = (torch.randn(1, 6, generator=gen, dtype=F64) for _ in range(3))
    d = torch.randn(1, 7, generator=gen, dtype=F64)
    x = torch.linspace(-1, 1, 401, dtype=F64)
    y, _ = rational_quadratic_spline(
        x, w.expand(401, 6), h.expand(401, 6), d.expand(401, 7), left=-1, right=1, bottom=-1, top=1
    )
    assert torch.all(y[1:] > y[:-1])
    torch.testing.assert_close(y[[0, -1]], torch.tensor([-1.0, 1.0], dtype=F64))
    # interior knot: x at the cumulative softmax width maps to the cumulative softmax height
    widths = 1e-3 + (1 - 6e-3) * torch.softmax(w[0], -1)
    heights = 1e-3 + (1 - 6e-3) * torch.softmax(h[0], -1)
    knot_x = -1 + 2 * widths[:3].sum()
    y_knot, _ = rational_quadratic_spline(knot_x.view(1), w, h, d, left=-1, right=1, bottom=-1, top=1)
    torch.testing.assert_close(y_knot, (-1 + 2 * heights[:3].sum()).view(1))


def test_spline_has_identity_tails_and_its_inverse_undoes_it() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.tensor([-5.0, -2.0, -0.7, 0.0, 1.3, 2.0, 4.0], dtype=F64)
    w, h = torch.randn(7, 4, generator=gen, dtype=F64), torch.randn(7, 4, generator=gen, dtype=F64)
    d = torch.randn(7, 3, generator=gen, dtype=F64)
    y, logdet = unconstrained_rational_quadratic_spline(x, w, h, d, tail_bound=2.0)
    assert y[0] == x[0] and y[-1] == x[-1] and logdet[0] == 0 and logdet[-1] == 0
    x_back, logdet_inv = unconstrained_rational_quadratic_spline(y, w, h, d, inverse=True, tail_bound=2.0)
    torch.testing.assert_close(x_back, x)
    torch.testing.assert_close(logdet_inv, -logdet)


def test_spline_log_derivative_matches_autograd() -> None:
    gen = torch.Generator().manual_seed(2)
    w, h, d = (
        torch.randn(50, 8, generator=gen, dtype=F64),
        torch.randn(50, 8, generator=gen, dtype=F64),
        torch.randn(50, 7, generator=gen, dtype=F64),
    )
    x = (torch.rand(50, generator=gen, dtype=F64) * 6 - 3).requires_grad_(True)
    y, logdet = unconstrained_rational_quadratic_spline(x, w, h, d, tail_bound=3.0)
    (dydx,) = torch.autograd.grad(y.sum(), x)  # elementwise: the Jacobian is diagonal
    torch.testing.assert_close(logdet, dydx.log())


def test_lu_linear_is_the_product_of_its_factors() -> None:
    lu = _perturbed(LULinear(5), 3)
    x = _points(7, 5, 4)
    lower, upper = lu._lower_upper()
    assert torch.all(lower.triu(1) == 0) and torch.all(lower.diagonal() == 1) and torch.all(upper.tril(-1) == 0)
    y, logdet = lu(x)
    torch.testing.assert_close(y, x @ (lower @ upper).T + lu.bias)
    torch.testing.assert_close(logdet, torch.linalg.slogdet(lower @ upper)[1].expand(7))
    x_back, logdet_inv = lu.inverse(y)
    torch.testing.assert_close(x_back, x)
    torch.testing.assert_close(logdet_inv, -logdet)


def test_coupling_leaves_conditioning_features_to_their_own_spline_and_inverts() -> None:
    coupling = _perturbed(RQSCoupling(alternating_mask(4, even=True), SMALL), 5)
    x = _points(6, 4, 6)
    y, logdet = coupling(x)
    # the identity features (1, 3) only pass through the unconditional spline: independent of x[:, 0], x[:, 2]
    x2 = x.clone()
    x2[:, [0, 2]] += 0.3
    torch.testing.assert_close(coupling(x2)[0][:, [1, 3]], y[:, [1, 3]])
    x_back, logdet_inv = coupling.inverse(y)
    torch.testing.assert_close(x_back, x)
    torch.testing.assert_close(logdet_inv, -logdet)


def test_flow_inverse_of_forward_is_identity_and_logdet_matches_jacobian() -> None:
    torch.manual_seed(7)
    flow = _perturbed(NeuralSplineFlow(SMALL), 7).eval()
    x = _points(5, 4, 8)
    z, logdet = flow.transform_to_noise(x)
    x_back, logdet_inv = flow.inverse(z)
    torch.testing.assert_close(x_back, x)
    torch.testing.assert_close(logdet_inv, -logdet)
    for b in range(x.shape[0]):
        jac = torch.autograd.functional.jacobian(lambda row: flow.transform_to_noise(row.unsqueeze(0))[0][0], x[b])
        torch.testing.assert_close(logdet[b], torch.linalg.slogdet(jac)[1])


def test_log_prob_is_the_change_of_variables_formula() -> None:
    flow = _perturbed(NeuralSplineFlow(SMALL), 9).eval()
    x = _points(3, 4, 10)
    z, logdet = flow.transform_to_noise(x)
    base = torch.distributions.Normal(torch.zeros(4, dtype=F64), 1.0).log_prob(z).sum(-1)
    torch.testing.assert_close(flow(x), base + logdet)


def test_training_lowers_the_negative_log_likelihood_on_a_fixed_batch() -> None:
    w = torchgauge.create("nsf_rq_coupling_power", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(30)]
    assert losses[-1] < losses[0] - 0.5
