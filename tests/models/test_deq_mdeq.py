"""DEQ: Anderson acceleration finds fixed points; implicit gradients match unrolled autograd."""

from __future__ import annotations

import torch

import torchgauge
from torchgauge.models.other.implicit.deq_mdeq import anderson, implicit_backward

F64 = torch.float64


def _contraction(d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(d, d, generator=gen, dtype=F64)
    w = 0.8 * w / torch.linalg.matrix_norm(w, ord=2)  # spectral norm 0.8 < 1
    b = torch.randn(2, d, 1, generator=gen, dtype=F64)  # batch of 2
    return w, b


def test_anderson_solves_an_affine_contraction() -> None:
    w, b = _contraction()
    f = lambda z: w @ z + b  # fixed point (I - W)^-1 b
    z = anderson(f, torch.zeros_like(b), threshold=40, eps=1e-12)
    expected = torch.linalg.solve(torch.eye(6, dtype=F64) - w, b)
    torch.testing.assert_close(z, expected)


def test_anderson_finds_the_fixed_point_that_plain_iteration_finds() -> None:
    w, b = _contraction(seed=1)
    f = lambda z: torch.tanh(w @ z + b)
    z = torch.zeros_like(b)
    for _ in range(300):
        z = f(z)
    z_aa = anderson(f, torch.zeros_like(b), threshold=40, eps=1e-12)
    torch.testing.assert_close(z_aa, z, atol=1e-6, rtol=0)


def test_anderson_beats_plain_iteration_on_a_slow_contraction() -> None:
    gen = torch.Generator().manual_seed(1)
    d = 50
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=F64))
    w = q @ torch.diag(torch.linspace(-0.95, 0.95, d, dtype=F64)) @ q.T  # spectral radius 0.95
    b = 10 * torch.randn(2, d, 1, generator=gen, dtype=F64)
    f = lambda z: w @ z + b
    expected = torch.linalg.solve(torch.eye(d, dtype=F64) - w, b)
    z = torch.zeros_like(b)
    for _ in range(25):
        z = f(z)
    z_aa = anderson(f, torch.zeros_like(b), threshold=25, eps=0.0)  # also 25 evaluations of f
    assert (z_aa - expected).norm() < (z - expected).norm() / 10


def test_anderson_returns_the_lowest_residual_iterate_within_the_budget() -> None:
    w, b = _contraction()
    f = lambda z: w @ z + b
    z = anderson(f, torch.zeros_like(b), threshold=4, eps=0.0)  # budget too small to converge
    assert torch.isfinite(z).all() and (f(z) - z).norm() < b.norm()


def test_implicit_gradient_matches_autograd_through_unrolled_iterations() -> None:
    w0, b0 = _contraction(seed=2)
    c = torch.randn(2, 6, 1, dtype=F64)

    def grads(implicit: bool) -> tuple[torch.Tensor, torch.Tensor]:
        w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
        f = lambda z: torch.tanh(w @ z + b)
        if implicit:
            with torch.no_grad():
                z_star = anderson(f, torch.zeros_like(b), threshold=60, eps=1e-12)
            z = implicit_backward(f, z_star, b_thres=60, eps=1e-12)
        else:
            z = torch.zeros_like(b)
            for _ in range(200):
                z = f(z)
        (z * c).sum().backward()
        return w.grad, b.grad

    for got, expected in zip(grads(True), grads(False)):
        torch.testing.assert_close(got, expected, atol=1e-8, rtol=1e-6)


def test_implicit_hook_fires_once_and_differs_from_the_one_step_gradient() -> None:
    w0, b0 = _contraction(seed=3)
    b = b0.clone().requires_grad_()
    f = lambda z: torch.tanh(w0 @ z + b)
    with torch.no_grad():
        z_star = anderson(f, torch.zeros_like(b), threshold=60, eps=1e-12)
    z = implicit_backward(f, z_star, b_thres=60, eps=1e-12)
    z.sum().backward()
    implicit = b.grad.clone()
    b.grad = None
    f(z_star.detach()).sum().backward()  # the gradient of one application only
    assert not torch.allclose(implicit, b.grad)


def test_mdeq_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("mdeq_tiny_cifar", mode="train", size="smoke", dropout=0.0)
    losses = [w.step().item() for _ in range(8)]
    assert losses[-1] < losses[0]
