"""Scientific models (FNO, exact GP) against known answers and slow float64 references."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.other.probabilistic.gaussian_process import JITTER, ExactGP, target_function
from torchgauge.models.other.scientific.fourier_neural_operator import (
    A_HIGH,
    A_LOW,
    FNO2d,
    FNOConfig,
    SpectralConv2d,
    darcy_coefficients,
    relative_l2_loss,
)
from torchgauge.workload import BuildContext

F64 = torch.float64


# -- Fourier neural operator -------------------------------------------------------------------------
def _spectral(channels: int, modes1: int, modes2: int, seed: int = 0) -> SpectralConv2d:
    torch.manual_seed(seed)
    return SpectralConv2d(channels, channels, modes1, modes2).double()


def test_spectral_conv_with_all_modes_and_identity_weights_is_the_identity() -> None:
    # an 8 x 10 grid: rows -4..3 are all covered by the two 4-row blocks, rfft columns 0..5 by 6
    conv = _spectral(3, 4, 6)
    with torch.no_grad():
        eye = torch.eye(3, dtype=F64)[:, :, None, None]
        for weights in (conv.weights1, conv.weights2):
            weights.zero_()
            weights[..., 0] = eye  # real part delta_io, imaginary part 0
    x = torch.randn(2, 3, 8, 10, dtype=F64)
    torch.testing.assert_close(conv(x), x)


@pytest.mark.parametrize("k1,k2", [(2, 1), (-3, 2), (0, 3)])
def test_spectral_conv_maps_a_single_mode_as_its_complex_weight_says(k1: int, k2: int) -> None:
    # input c_i cos(theta) with theta = 2 pi (k1 m / H + k2 n / W), 0 < k2 < W / 2:
    # out_o = sum_i c_i Re(W_io e^{i theta}) = sum_i c_i (Re W_io cos(theta) - Im W_io sin(theta))
    h, w, modes = 12, 10, 4
    conv = _spectral(3, modes, modes)
    m, n = torch.meshgrid(torch.arange(h, dtype=F64), torch.arange(w, dtype=F64), indexing="ij")
    theta = 2 * math.pi * (k1 * m / h + k2 * n / w)
    c = torch.tensor([0.5, -1.0, 2.0], dtype=F64)
    x = c.view(1, 3, 1, 1) * torch.cos(theta)
    weights = torch.view_as_complex(conv.weights1 if k1 >= 0 else conv.weights2)
    wk = weights[:, :, k1 if k1 >= 0 else modes + k1, k2].detach()  # (in, out): the block row of frequency k1
    expected = torch.einsum("i,io->o", c.to(wk.dtype), wk)  # sum_i c_i W_io
    expected = expected.real.view(3, 1, 1) * torch.cos(theta) - expected.imag.view(3, 1, 1) * torch.sin(theta)
    torch.testing.assert_close(conv(x)[0], expected)


def test_spectral_conv_drops_modes_it_does_not_keep() -> None:
    conv = _spectral(2, 3, 3)
    m, n = torch.meshgrid(torch.arange(16, dtype=F64), torch.arange(16, dtype=F64), indexing="ij")
    x = torch.cos(2 * math.pi * (5 * m + 4 * n) / 16).expand(1, 2, 16, 16)  # |k1| = 5 > 3 modes
    assert conv(x).abs().max().item() < 1e-12


def test_spectral_conv_is_resolution_invariant_on_band_limited_input() -> None:
    # The same band-limited function sampled on 16 x 16 and 32 x 32: the layer's output on the
    # fine grid, subsampled, is its output on the coarse grid (the FFT scaling cancels).
    conv = _spectral(3, 4, 4)
    gen = torch.Generator().manual_seed(1)
    coef = torch.randn(3, 2, 7, 7, generator=gen, dtype=F64)  # cos/sin amplitudes of k1, k2 in -3..3

    def sample(s: int) -> torch.Tensor:
        grid = torch.arange(s, dtype=F64) / s
        k = torch.arange(-3, 4, dtype=F64)
        phase = 2 * math.pi * (k.view(7, 1, 1, 1) * grid.view(1, 1, s, 1) + k.view(1, 7, 1, 1) * grid.view(1, 1, 1, s))
        return (
            torch.einsum("ckl,klxy->cxy", coef[:, 0], torch.cos(phase))
            + torch.einsum("ckl,klxy->cxy", coef[:, 1], torch.sin(phase))
        ).unsqueeze(0)

    coarse, fine = conv(sample(16)), conv(sample(32))
    assert coarse.abs().max() > 1e-3  # the kept modes carry signal
    torch.testing.assert_close(fine[..., ::2, ::2], coarse)


def test_fno_runs_the_same_weights_on_two_resolutions() -> None:
    torch.manual_seed(0)
    model = FNO2d(FNOConfig(width=8, modes=4, padding=2))
    for s in (16, 32):
        out = model(torch.randn(2, s, s, 1))
        assert out.shape == (2, s, s, 1)
        assert torch.isfinite(out).all()


def test_fno_parameter_count_counts_complex_weights_twice() -> None:
    model = FNO2d(FNOConfig())
    spectral = sum(p.numel() for p in model.spectral.parameters())
    assert spectral == 4 * 2 * (32 * 32 * 12 * 12) * 2  # layers x (k1 >= 0, k1 < 0) x complex x (re, im)
    assert sum(p.numel() for p in model.parameters()) == 2_368_001


@pytest.mark.parametrize("size,shape", [("smoke", (2, 16, 16)), ("full", (1, 85, 85))])
def test_fno_darcy_output_shape(size: str, shape: tuple[int, ...]) -> None:
    w = torchgauge.create("fno_darcy", mode="eval", size=size, batch_size=None if size == "smoke" else 1)
    out = w.step()
    assert out.shape == shape and torch.isfinite(out).all()
    assert w.targets.shape == shape


def test_relative_l2_loss_sums_per_sample_relative_errors() -> None:
    y = torch.tensor([[3.0, 4.0], [1.0, 0.0]])  # norms 5 and 1
    pred = y + torch.tensor([[0.0, 1.0], [0.5, 0.0]])  # errors 1 and 0.5
    assert relative_l2_loss(pred, y).item() == pytest.approx(1 / 5 + 0.5)
    assert relative_l2_loss(2 * y, y).item() == pytest.approx(2.0)


def test_darcy_coefficients_are_piecewise_constant_and_seeded() -> None:
    def draw() -> torch.Tensor:
        ctx = BuildContext(name="fno_darcy", mode="train", device=torch.device("cpu"), batch_size=4, size="full")
        return darcy_coefficients(ctx, 4, 33)

    a = draw()
    assert set(a.unique().tolist()) == {A_LOW, A_HIGH}
    assert 0.1 < (a == A_HIGH).float().mean().item() < 0.9  # a zero-mean field: both phases present
    torch.testing.assert_close(a, draw())


# -- exact Gaussian process ----------------------------------------------------------------------------
def _gp_problem(n: int = 40, m: int = 7, d: int = 3) -> tuple[ExactGP, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    model = ExactGP(d).double()
    with torch.no_grad():  # away from the all-zero initialisation: every hyperparameter matters
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=F64) * 0.5)
    x = torch.rand(n, d, generator=gen, dtype=F64)
    y = target_function(x) + 0.2 * torch.randn(n, generator=gen, dtype=F64)
    x_star = torch.rand(m, d, generator=gen, dtype=F64)
    return model, x, y, x_star


def _slow_kernel(model: ExactGP, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    diff = (x1[:, None, :] - x2[None, :, :]) / model.lengthscale  # every pair explicitly
    return model.outputscale * torch.exp(-0.5 * diff.pow(2).sum(-1))


def _slow_noisy_covariance(model: ExactGP, x: torch.Tensor) -> torch.Tensor:
    eye = torch.eye(x.shape[0], dtype=x.dtype)
    return _slow_kernel(model, x, x) + (model.noise + JITTER * model.outputscale) * eye


def test_gp_marginal_likelihood_matches_multivariate_normal_log_prob() -> None:
    model, x, y, _ = _gp_problem()
    mll = model(x, y)
    mvn = torch.distributions.MultivariateNormal(model.mean_constant.expand(len(y)), _slow_noisy_covariance(model, x))
    expected = mvn.log_prob(y) / len(y)
    torch.testing.assert_close(mll, expected, rtol=1e-10, atol=1e-12)
    # and its gradient through cholesky / cholesky_solve / log det matches the reference's
    grads = torch.autograd.grad(mll, list(model.parameters()))
    expected_grads = torch.autograd.grad(expected, list(model.parameters()))
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=1e-8, atol=1e-10)


def test_gp_predictive_mean_and_variance_match_dense_solves() -> None:
    model, x, y, x_star = _gp_problem()
    with torch.no_grad():
        mean, var = model.predict(x, y, x_star)
        k_y = _slow_noisy_covariance(model, x)
        k_star = _slow_kernel(model, x_star, x)  # (M, N)
        expected_mean = model.mean_constant + k_star @ torch.linalg.solve(k_y, y - model.mean_constant)
        expected_cov = _slow_kernel(model, x_star, x_star) - k_star @ torch.linalg.solve(k_y, k_star.T)
        expected_var = expected_cov.diagonal() + model.noise  # of y*, the likelihood's predictive
    torch.testing.assert_close(mean, expected_mean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(var, expected_var, rtol=1e-10, atol=1e-12)


def test_gp_prediction_interpolates_noise_free_data() -> None:
    # tiny noise and lengthscales well below the point spacing (K well conditioned): the
    # posterior mean at the training inputs reproduces the targets, with almost no variance left
    model, x, y, _ = _gp_problem(n=20, d=2)
    with torch.no_grad():
        model.raw_noise.fill_(-30.0)  # sigma^2 = softplus(-30) + floor ~ 1e-4
        model.raw_lengthscale.fill_(math.log(math.expm1(0.1)))  # lengthscale 0.1
        model.raw_outputscale.fill_(3.0)
        mean, var = model.predict(x, y, x)
    assert (mean - y).abs().max().item() < 1e-3
    assert var.max().item() < 1e-3


def test_gp_cholesky_survives_extreme_hyperparameters_in_float32() -> None:
    # signal-to-noise 1e6 with long lengthscales: K is numerically rank-deficient in fp32, and
    # only the relative jitter keeps it positive definite
    gen = torch.Generator().manual_seed(0)
    model = ExactGP(8)
    with torch.no_grad():
        model.raw_lengthscale.fill_(10.0)
        model.raw_outputscale.fill_(100.0)
        model.raw_noise.fill_(-30.0)
    x = torch.rand(2048, 8, generator=gen)
    y = target_function(x)
    loss = -model(x, y)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_gp_workload_sizes() -> None:
    w = torchgauge.create("gp_exact_regression", mode="eval", size="smoke")
    train_x, train_y, test_x = w.inputs
    assert train_x.shape == (64, 8) and train_y.shape == (64,) and test_x.shape == (16, 8)
    mean, var = w.step()
    assert mean.shape == var.shape == (16,) and (var > 0).all()
    w = torchgauge.create("gp_exact_regression", mode="eval", size="full", batch_size=100)
    assert w.inputs[0].shape == (100, 8) and w.inputs[2].shape == (512, 8)
