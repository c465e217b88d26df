"""FNO-3D and FourCastNet's AFNO against hand-computed answers and slow complex-arithmetic references."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.other.scientific.afno import AFNO2D, AFNOConfig, AFNONet
from torchgauge.models.other.scientific.fourier_neural_operator import (
    FNO3d,
    FNO3dConfig,
    SpectralConv3d,
    relative_l2_loss,
)

F64 = torch.float64


# -- SpectralConv3d / FNO-3D ----------------------------------------------------------------------------
def _spectral3d(channels: int, modes: tuple[int, int, int], seed: int = 0) -> SpectralConv3d:
    torch.manual_seed(seed)
    return SpectralConv3d(channels, channels, *modes).double()


def _plane_wave(shape: tuple[int, int, int], k: tuple[int, int, int]) -> torch.Tensor:
    grids = torch.meshgrid(*(torch.arange(n, dtype=F64) for n in shape), indexing="ij")
    return 2 * math.pi * sum(ki * g / n for ki, g, n in zip(k, grids, shape))


@pytest.mark.parametrize("k", [(1, 2, 1), (-2, 1, 2), (2, -1, 3), (-1, -2, 1), (0, 0, 2)])
def test_spectral_conv3d_maps_a_single_mode_by_its_corner_weight(k: tuple[int, int, int]) -> None:
    # input c_i cos(theta), 0 < k3 < T / 2: out_o = Re(sum_i c_i W_io e^{i theta}) with W from the
    # corner block holding (k1, k2): weights1 (+,+), weights2 (-,+), weights3 (+,-), weights4 (-,-)
    shape, modes = (8, 8, 10), (3, 3, 4)
    conv = _spectral3d(3, modes)
    theta = _plane_wave(shape, k)
    c = torch.tensor([0.5, -1.0, 2.0], dtype=F64)
    x = c.view(1, 3, 1, 1, 1) * torch.cos(theta)
    block = [conv.weights1, conv.weights2, conv.weights3, conv.weights4][(k[0] < 0) + 2 * (k[1] < 0)]
    i1, i2 = (ki if ki >= 0 else m + ki for ki, m in zip(k[:2], modes[:2]))
    wk = torch.view_as_complex(block.detach())[:, :, i1, i2, k[2]]  # (in, out)
    z = torch.einsum("i,io->o", c.to(wk.dtype), wk).view(3, 1, 1, 1)
    expected = z.real * torch.cos(theta) - z.imag * torch.sin(theta)
    torch.testing.assert_close(conv(x)[0], expected)


@pytest.mark.parametrize("k", [(3, 1, 1), (1, -4, 1), (-1, 3, 2), (1, 1, 4)])
def test_spectral_conv3d_drops_modes_outside_the_corners(k: tuple[int, int, int]) -> None:
    conv = _spectral3d(2, (3, 3, 4))
    x = torch.cos(_plane_wave((8, 8, 10), k)).expand(1, 2, 8, 8, 10)  # kept: k1, k2 in [-3, 3), k3 < 4
    assert conv(x).abs().max().item() < 1e-12


def test_spectral_conv3d_with_all_modes_and_identity_weights_is_the_identity() -> None:
    # 6 x 8 x 6 grid: rows -3..2 and -4..3 are covered by the 3- and 4-wide corners, rfft 0..3 by 4
    conv = _spectral3d(2, (3, 4, 4))
    with torch.no_grad():
        for weights in (conv.weights1, conv.weights2, conv.weights3, conv.weights4):
            weights.zero_()
            weights[..., 0] = torch.eye(2, dtype=F64)[:, :, None, None, None]
    x = torch.randn(2, 2, 6, 8, 6, dtype=F64)
    torch.testing.assert_close(conv(x), x)


def test_fno3d_parameter_count_matches_the_reference_definition() -> None:
    model = FNO3d(FNO3dConfig())
    spectral = sum(p.numel() for p in model.spectral.parameters())
    assert spectral == 4 * 4 * (20 * 20 * 8 * 8 * 8) * 2  # layers x corners x complex x (re, im)
    assert sum(p.numel() for p in model.parameters()) == 6_558_377


def test_fno3d_pads_time_only_and_keeps_the_shape() -> None:
    torch.manual_seed(0)
    model = FNO3d(FNO3dConfig(resolution=8, in_steps=3, out_steps=5, width=4, modes=2, padding=3))
    out = model(torch.randn(2, 8, 8, 5, 3))
    assert out.shape == (2, 8, 8, 5, 1) and torch.isfinite(out).all()


# -- AFNO ----------------------------------------------------------------------------------------------
def _afno(hidden: int = 8, blocks: int = 2, threshold: float = 0.0, fraction: float = 1.0) -> AFNO2D:
    torch.manual_seed(0)
    layer = AFNO2D(hidden, blocks, sparsity_threshold=threshold, hard_thresholding_fraction=fraction)
    with torch.no_grad():  # larger weights than the 0.02 init, so that the spectral path is not negligible
        for p in layer.parameters():
            p.mul_(20)
    return layer


def test_afno_with_a_threshold_above_every_coefficient_returns_the_residual() -> None:
    layer = _afno(threshold=1e6)
    x = torch.randn(2, 6, 8, 8)
    torch.testing.assert_close(layer(x), x)


def test_afno_spectral_mlp_matches_a_complex_block_diagonal_reference() -> None:
    # fraction 1 on a 6 x 8 grid: total_modes = 4 = kept_modes; all 6 rows, rfft columns 0..3 of 0..4
    layer = _afno(threshold=0.05)
    x = torch.randn(2, 6, 8, 8)
    xf = torch.fft.rfft2(x.double(), dim=(1, 2), norm="ortho").reshape(2, 6, 5, 2, 4)  # (B, H, W', blocks, 4)
    w1, b1, w2, b2 = (torch.complex(p[0].double(), p[1].double()) for p in (layer.w1, layer.b1, layer.w2, layer.b2))
    h = torch.einsum("...bi,bio->...bo", xf, w1) + b1
    h = torch.complex(h.real.relu(), h.imag.relu())  # ReLU on real and imaginary parts separately
    o = torch.einsum("...bi,bio->...bo", h, w2) + b2
    shrink = lambda t: t.sign() * (t.abs() - 0.05).clamp_min(0)
    o = torch.complex(shrink(o.real), shrink(o.imag))
    o[:, :, 4:] = 0  # columns past kept_modes are not mixed
    expected = torch.fft.irfft2(o.reshape(2, 6, 5, 8), s=(6, 8), dim=(1, 2), norm="ortho") + x.double()
    torch.testing.assert_close(layer(x).double(), expected, rtol=1e-4, atol=1e-5)


def test_afno_hard_thresholding_keeps_only_the_central_low_modes() -> None:
    # H = 8: total_modes 5, fraction 0.4 -> kept 2: rows 3..6, rfft columns 0..1; other modes give 0
    layer = _afno(threshold=0.0, fraction=0.4)
    x = torch.zeros(1, 8, 8, 8)
    out = layer(x) - x  # the spectral part: the biases alone, where modes are kept
    spec = torch.fft.rfft2(out, dim=(1, 2), norm="ortho")  # (1, 8, 5, C)
    # column 0 is made Hermitian by irfft2 (rows 3..6 mirror onto 2..5), so check columns >= 1
    assert spec[:, :, 2:].abs().max() < 1e-5
    assert spec[:, [0, 1, 2, 7], 1].abs().max() < 1e-5
    assert spec[:, 3:7, 1].abs().min() > 1e-3


def test_afnonet_head_puts_each_token_back_on_its_patch() -> None:
    cfg = AFNOConfig(img_size=(8, 12), patch_size=4, channels=2, embed_dim=8, depth=0, num_blocks=2)
    model = AFNONet(cfg)
    with torch.no_grad():
        model.patch_embed.weight.zero_()
        model.patch_embed.bias.zero_()
        model.pos_embed.zero_()
        model.pos_embed[0, :, 0] = torch.arange(6.0)  # token t = (row, col) = divmod(t, 3) carries t
        model.head.weight.zero_()
        model.head.weight[:, 0] = 1.0
    out = model(torch.zeros(1, 2, 8, 12))
    expected = torch.arange(6.0).view(2, 3).repeat_interleave(4, 0).repeat_interleave(4, 1)
    torch.testing.assert_close(out[0, 0], expected)
    torch.testing.assert_close(out[0, 1], expected)


def test_mean_relative_l2_loss_averages_per_sample_relative_errors() -> None:
    y = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    pred = y + torch.tensor([[0.0, 1.0], [0.5, 0.0]])
    assert relative_l2_loss(pred, y, reduction="mean").item() == pytest.approx((1 / 5 + 0.5) / 2)


@pytest.mark.parametrize("name", ["fno3d_navier_stokes", "fourcastnet_afno"])
def test_loss_falls_on_a_fixed_batch(name: str) -> None:
    torch.manual_seed(0)
    w = torchgauge.create(name, mode="train", size="smoke")
    for group in w.optimizer.param_groups:  # the reference's Adam, a larger step to see progress in 30 steps
        group["lr"] = 1e-2
    losses = [w.step().item() for _ in range(30)]
    assert losses[-1] < 0.7 * losses[0]


def test_fourcastnet_rollout_feeds_predictions_back() -> None:
    w = torchgauge.create("fourcastnet_afno", mode="eval", size="smoke")
    out = w.step()
    assert out.shape == (1, 2, 3, 16, 32)
    with torch.no_grad():
        first = w.module(w.inputs[0])
        torch.testing.assert_close(out[:, 0], first)
        torch.testing.assert_close(out[:, 1], w.module(first))
