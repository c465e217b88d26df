"""Glow: invertibility, log-determinants against autograd Jacobians, parameter count, the workload."""

from __future__ import annotations

import math

import torch
from torch.autograd.functional import jacobian

import torchgauge
from torchgauge.models.vision.generation.glow import (
    FlowStep,
    Glow,
    GlowConfig,
    InvConv1x1LU,
    ZeroConv2d,
    glow_param_count,
)
from torchgauge.registry import get_spec

F64 = torch.float64
SMOKE = GlowConfig(image_size=8, levels=2, steps=2, hidden=16)


def _randomise(module: torch.nn.Module, data: torch.Tensor) -> None:
    """ActNorm initialised on ``data``; the zero-initialised convs given weights so couplings and priors act."""
    with torch.no_grad():
        module(data)
        for m in module.modules():
            if isinstance(m, ZeroConv2d):
                m.conv.weight.normal_(std=0.05)
                m.conv.bias.normal_(std=0.05)
                m.logs.normal_(std=0.05)


def test_glow_reconstructs_its_input_in_float64() -> None:
    torch.manual_seed(0)
    model = Glow(SMOKE).to(F64)
    x = torch.rand(3, 3, 8, 8, dtype=F64) - 0.5
    _randomise(model, x)
    with torch.no_grad():
        latents, _, _ = model(x)
        assert [tuple(z.shape) for z in latents] == model.latent_shapes(3) == [(3, 6, 4, 4), (3, 24, 2, 2)]
        x_rec = model.reverse(latents)
    torch.testing.assert_close(x_rec, x, atol=1e-4, rtol=0)


def test_flow_step_logdet_matches_the_jacobian() -> None:
    torch.manual_seed(1)
    step = FlowStep(4, hidden=8).to(F64)
    x = torch.randn(1, 4, 2, 2, dtype=F64)
    _randomise(step, torch.randn(5, 4, 2, 2, dtype=F64))
    _, logdet = step(x)
    jac = jacobian(lambda v: step(v.view_as(x))[0].flatten(), x.flatten())  # (16, 16)
    sign, expected = torch.linalg.slogdet(jac)
    assert sign.item() != 0
    torch.testing.assert_close(logdet, expected.view(1))
    torch.testing.assert_close(step.reverse(step(x)[0]), x)


def test_whole_glow_logdet_matches_the_jacobian() -> None:
    torch.manual_seed(2)
    cfg = GlowConfig(image_size=4, levels=2, steps=1, hidden=8)
    model = Glow(cfg).to(F64)
    x = torch.rand(1, 3, 4, 4, dtype=F64) - 0.5
    _randomise(model, torch.rand(4, 3, 4, 4, dtype=F64) - 0.5)
    _, logdet, _ = model(x)
    jac = jacobian(lambda v: torch.cat([z.flatten() for z in model(v.view_as(x))[0]]), x.flatten())  # (48, 48)
    torch.testing.assert_close(logdet, torch.linalg.slogdet(jac)[1].view(1))


def test_invconv_logdet_is_slogdet_of_w_and_inverse_is_exact() -> None:
    torch.manual_seed(3)
    conv = InvConv1x1LU(6).to(F64)
    with torch.no_grad():  # move off the initial rotation (|det| = 1) so the check is not trivially 0
        conv.log_s.normal_()
        conv.lower.normal_()
        conv.upper.normal_()
    x = torch.randn(2, 6, 3, 5, dtype=F64)
    y, logdet = conv(x)
    sign, logabsdet = torch.linalg.slogdet(conv.weight())
    assert logabsdet.abs() > 0.1
    torch.testing.assert_close(logdet, 3 * 5 * logabsdet)
    torch.testing.assert_close(y, torch.einsum("ij,bjhw->bihw", conv.weight(), x))
    torch.testing.assert_close(conv.reverse(y), x)


def test_invconv_initial_weight_is_a_rotation() -> None:
    conv = InvConv1x1LU(5).to(F64)
    w = conv.weight()
    torch.testing.assert_close(w @ w.T, torch.eye(5, dtype=F64))


def test_glow_parameter_count_by_formula() -> None:
    full = GlowConfig()
    assert glow_param_count(full) == 44_053_968 == get_spec("glow").param_count
    # By hand, per step with C channels and width 512: ActNorm 2C, LU 2C^2 + C, coupling
    # 9 * 512 * C/2 + 512 + 512^2 + 512 + 9 * 512 * C + 2C; C = 12, 24, 48 over the levels.
    per_step = [2 * c + 2 * c * c + c + 9 * 512 * c // 2 + 2 * 512 + 512**2 + 9 * 512 * c + 2 * c for c in (12, 24, 48)]
    priors = (6 * 12 * 9 + 2 * 12) + (12 * 24 * 9 + 2 * 24) + 2 * 48
    assert 32 * sum(per_step) + priors == 44_053_968
    for cfg in (SMOKE, GlowConfig(image_size=16, levels=3, steps=3, hidden=32)):
        assert sum(p.numel() for p in Glow(cfg).parameters()) == glow_param_count(cfg)


def test_glow_train_loss_is_bits_per_dim_near_eight_at_init() -> None:
    # Random 8-bit pixels are uniform: the best model scores exactly 8 bits/dim; the initial flow
    # (ActNorm fitted to the data, couplings near identity) is a Gaussian close to that.
    w = torchgauge.create("glow", mode="train", size="smoke")
    loss = w.step().item()
    assert 8.0 < loss < 9.0
    losses = [w.step().item() for _ in range(5)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < loss


def test_glow_eval_samples_images() -> None:
    w = torchgauge.create("glow", mode="eval", size="smoke", batch_size=3)
    samples = w.step()
    assert samples.shape == (3, 3, 8, 8) and torch.isfinite(samples).all()
    again = torchgauge.create("glow", mode="eval", size="smoke", batch_size=3).step()
    torch.testing.assert_close(again, samples)  # seeded prior noise


def test_sampling_at_zero_temperature_is_the_prior_mean() -> None:
    torch.manual_seed(4)
    model = Glow(SMOKE).to(F64)
    _randomise(model, torch.rand(4, 3, 8, 8, dtype=F64) - 0.5)
    noise = [torch.randn(s, dtype=F64) for s in model.latent_shapes(2)]
    with torch.no_grad():
        a = model.reverse(noise, 0.0)
        b = model.reverse([torch.zeros_like(n) for n in noise], 1.0)
    torch.testing.assert_close(a, b)
