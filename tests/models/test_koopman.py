"""Known-answer tests of LKIS (learning Koopman invariant subspaces) and its DMD analysis."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchgauge
from torchgauge.models.other.scientific.koopman import (
    LKIS,
    LKISConfig,
    delay_pairs,
    dmd,
    dmd_predict,
    koopman_operator,
    limit_cycle_series,
)
from torchgauge.workload import BuildContext


def _sorted(lam: torch.Tensor) -> torch.Tensor:
    """Eigenvalues in a canonical order (by imaginary, then real part) for comparison."""
    order = sorted(range(lam.numel()), key=lambda i: (round(lam[i].imag.item(), 6), lam[i].real.item()))
    return lam[order]


def _linear_system() -> tuple[torch.Tensor, torch.Tensor]:
    """``A`` (3, 3) with eigenvalues ``0.95 e^{+-0.3i}`` and 0.8 in a random basis, and a trajectory ``(40, 3)``."""
    gen = torch.Generator().manual_seed(0)
    rho, phi = 0.95, 0.3
    block = torch.tensor(
        [
            [rho * math.cos(phi), -rho * math.sin(phi), 0.0],
            [rho * math.sin(phi), rho * math.cos(phi), 0.0],
            [0.0, 0.0, 0.8],
        ],
        dtype=torch.float64,
    )
    basis = torch.randn(3, 3, generator=gen, dtype=torch.float64) + 2 * torch.eye(3, dtype=torch.float64)
    a = basis @ block @ torch.linalg.inv(basis)
    xs = [torch.randn(3, generator=gen, dtype=torch.float64)]
    for _ in range(39):
        xs.append(a @ xs[-1])
    return a, torch.stack(xs)


def _expected_eigenvalues() -> torch.Tensor:
    return _sorted(
        torch.tensor(
            [0.95 * complex(math.cos(0.3), math.sin(0.3)), 0.95 * complex(math.cos(0.3), -math.sin(0.3)), 0.8],
            dtype=torch.complex128,
        )
    )


def test_delay_pairs_on_a_hand_made_sequence() -> None:
    series = torch.arange(6.0).unsqueeze(-1)  # (6, 1): 0 1 2 3 4 5
    y0, y1 = delay_pairs(series, 3)
    assert y0.shape == y1.shape == (3, 3, 1)
    assert y0.squeeze(-1).tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert y1.squeeze(-1).tolist() == [[1, 2, 3], [2, 3, 4], [3, 4, 5]]


def test_delay_pairs_keep_channels_within_each_time_step() -> None:
    series = torch.stack([torch.arange(5.0), 10 + torch.arange(5.0)], dim=-1)  # (5, 2)
    y0, y1 = delay_pairs(series, 2)
    assert y0[1].tolist() == [[1, 11], [2, 12]]
    assert y1[-1].tolist() == [[3, 13], [4, 14]]


def test_least_squares_koopman_operator_of_linear_data_is_the_system_matrix() -> None:
    a, xs = _linear_system()
    k = koopman_operator(xs[:-1], xs[1:])
    torch.testing.assert_close(k, a, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(_sorted(torch.linalg.eigvals(k)), _expected_eigenvalues(), rtol=1e-8, atol=1e-8)


def test_dmd_recovers_eigenvalues_and_predicts_linear_dynamics_exactly() -> None:
    a, xs = _linear_system()
    lam, w, z = dmd(xs[:-1], xs[1:])
    torch.testing.assert_close(_sorted(lam), _expected_eigenvalues(), rtol=1e-8, atol=1e-8)
    torch.testing.assert_close((w.conj() * z).sum(0), torch.ones(3, dtype=lam.dtype))  # w_i^H z_i = 1
    preds = dmd_predict(xs[:5], lam, w, z, horizon=4)  # (4, 5, 3)
    for j in range(4):
        expected = xs[:5] @ torch.linalg.matrix_power(a, j + 1).T
        torch.testing.assert_close(preds[j].real, expected, rtol=1e-8, atol=1e-8)
        assert preds[j].imag.abs().max() < 1e-8


def test_lkis_with_identity_encoder_on_linear_data_estimates_the_system() -> None:
    a, xs = _linear_system()
    cfg = LKISConfig(dim_y=3, delay=1, dim_emb=3, dim_obs=3, dt=0.5)
    model = LKIS(cfg).double().eval()
    model.phi, model.bn, model.g = nn.Identity(), nn.Identity(), nn.Identity()
    outputs = model(xs)
    g0, g1 = outputs[:2]
    torch.testing.assert_close(g0, xs[:-1])
    torch.testing.assert_close(koopman_operator(g0, g1), a, rtol=1e-8, atol=1e-8)
    assert (
        model.loss(outputs) - cfg.alpha * 0.5 * sum(nn.functional.mse_loss(outputs[i], outputs[i + 2]) for i in (2, 3))
        < 1e-20
    )  # Koopman residual ~ 0
    lam, rates, y_preds = model.analyse(xs)
    torch.testing.assert_close(_sorted(lam), _expected_eigenvalues(), rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(rates, torch.log(lam) / 0.5)  # growth log|lam|/dt, frequency arg(lam)/dt
    assert y_preds.shape == (cfg.horizon, 39, 3)


def test_limit_cycle_series_has_the_stated_koopman_eigenvalues() -> None:
    cfg = LKISConfig(dt=0.5)  # 0.5 rad a step: five delays span the cycle well enough to separate modes
    ctx = BuildContext(name="lkis_test", mode="eval", device=torch.device("cpu"), batch_size=1, size="full")
    series = limit_cycle_series(ctx, 400, cfg).double()[100:]  # transient e^{-2t} gone by t = 50
    y0, y1 = delay_pairs(series, 5)
    lam, _, _ = dmd(y0.flatten(1), y1.flatten(1), eps=1e-3)
    step = cfg.omega * cfg.dt
    expected = torch.tensor(
        [complex(math.cos(m * step), math.sin(m * step)) for m in (-2, -1, 0, 1, 2)], dtype=torch.complex128
    )
    torch.testing.assert_close(_sorted(lam), _sorted(expected), rtol=0, atol=1e-3)


def test_loss_falls_on_a_fixed_batch() -> None:
    w = torchgauge.create("lkis_koopman", mode="train", size="smoke")
    first = w.step().item()
    for _ in range(60):
        last = w.step().item()
    assert last < 0.7 * first


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_workload_sizes(mode: str) -> None:
    w = torchgauge.create("lkis_koopman", mode=mode, size="smoke")
    (series,) = w.inputs
    assert series.shape == (64 + 7, 1)
    if mode == "eval":
        lam, rates, y_preds = w.step()
        assert lam.is_complex() and rates.shape == lam.shape
        assert y_preds.shape == (10, 64, 1)
