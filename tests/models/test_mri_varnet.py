"""E2E-VarNet (fastMRI): centred FFTs, RSS, data consistency, SSIM and the mask."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from torchgauge.models.vision.mri_varnet import (
    NormUnet,
    SensitivityModel,
    SSIMLoss,
    VarNetBlock,
    complex_mul,
    equispaced_mask,
    fft2c,
    ifft2c,
    rss,
    rss_complex,
)
from torchgauge.workload import BuildContext

F64 = torch.float64


def _slow_fft2c(x: torch.Tensor) -> torch.Tensor:
    """Centred orthonormal DFT by explicit matrices: shift indices so that index n // 2 is 0."""
    h, w = x.shape[-3], x.shape[-2]

    def dft(n: int) -> torch.Tensor:
        k = torch.arange(n, dtype=F64) - n // 2
        return torch.exp(-2j * math.pi * k[:, None] * k[None, :] / n) / math.sqrt(n)

    z = torch.view_as_complex(x)
    return torch.view_as_real(dft(h) @ z @ dft(w).T)


@pytest.mark.parametrize("shape", [(6, 8), (5, 7)])
def test_fft2c_matches_a_slow_centred_dft_and_ifft2c_inverts_it(shape: tuple[int, int]) -> None:
    x = torch.randn(2, 3, *shape, 2, dtype=F64)
    k = fft2c(x)
    torch.testing.assert_close(k, _slow_fft2c(x))
    torch.testing.assert_close(ifft2c(k), x)
    torch.testing.assert_close(fft2c(ifft2c(x)), x)
    torch.testing.assert_close(k.pow(2).sum(), x.pow(2).sum())  # orthonormal: Parseval


def test_fft2c_of_a_constant_image_is_a_spike_at_the_centre() -> None:
    x = torch.zeros(1, 4, 6, 2, dtype=F64)
    x[..., 0] = 2.0
    k = fft2c(x)
    expected = torch.zeros_like(k)
    expected[0, 2, 3, 0] = 2.0 * math.sqrt(24)
    torch.testing.assert_close(k, expected)


def test_rss_by_hand() -> None:
    torch.testing.assert_close(rss(torch.tensor([[3.0, 1.0], [4.0, 0.0]]), dim=0), torch.tensor([5.0, 1.0]))
    x = torch.tensor([[1.0, 2.0], [2.0, 0.0]])  # coils 1 + 2i and 2: sqrt(1 + 4 + 4) = 3
    torch.testing.assert_close(rss_complex(x, dim=0), torch.tensor(3.0))


def test_complex_mul_by_hand() -> None:
    # (1 + 2i)(3 - i) = 3 - i + 6i + 2 = 5 + 5i
    torch.testing.assert_close(
        complex_mul(torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])), torch.tensor([5.0, 5.0])
    )


class _Zero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)


def test_data_consistency_pulls_sampled_lines_towards_the_measurement_by_the_weight() -> None:
    block = VarNetBlock(_Zero()).double()
    with torch.no_grad():
        block.dc_weight.fill_(0.25)
    k = torch.randn(1, 3, 4, 6, 2, dtype=F64)
    k0 = torch.randn(1, 3, 4, 6, 2, dtype=F64)
    mask = torch.tensor([True, False, True, True, False, False]).view(1, 1, 1, 6, 1)
    sens = torch.randn(1, 3, 4, 6, 2, dtype=F64)
    out = block(k, k0, mask, sens)
    m = mask.expand_as(k)
    torch.testing.assert_close(out[m], k[m] - 0.25 * (k[m] - k0[m]))  # a quarter of the way to k0
    torch.testing.assert_close(out[~m], k[~m])  # unsampled lines: only the (zero) regulariser acts


def test_ssim_of_an_image_with_itself_is_one_and_below_one_otherwise() -> None:
    ssim = SSIMLoss().double()
    x = torch.rand(2, 1, 16, 12, dtype=F64)
    data_range = x.flatten(1).amax(1)
    torch.testing.assert_close(ssim(x, x, data_range), torch.tensor(0.0, dtype=F64))  # loss = 1 - SSIM
    assert float(ssim(x, torch.rand_like(x), data_range)) > 0.1


def test_ssim_matches_a_slow_single_window_computation() -> None:
    x, y = torch.rand(1, 1, 7, 7, dtype=F64), torch.rand(1, 1, 7, 7, dtype=F64)  # exactly one window
    c1, c2 = (0.01 * 1.0) ** 2, (0.03 * 1.0) ** 2
    mx, my = x.mean(), y.mean()
    vx, vy = x.var(), y.var()  # unbiased, as the reference's cov_norm
    cov = ((x - mx) * (y - my)).sum() / 48
    slow = (2 * mx * my + c1) * (2 * cov + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    torch.testing.assert_close(SSIMLoss().double()(x, y, torch.ones(1, dtype=F64)), 1 - slow)


def test_sensitivity_maps_have_unit_rss_over_coils() -> None:
    torch.manual_seed(0)
    net = SensitivityModel(chans=2, pools=2).double()
    maps = net(torch.randn(2, 4, 16, 12, 2, dtype=F64), num_low_frequencies=4)
    torch.testing.assert_close(rss_complex(maps, dim=1), torch.ones(2, 16, 12, dtype=F64))


def test_norm_unet_keeps_odd_shapes() -> None:
    x = torch.randn(1, 1, 13, 21, 2)
    assert NormUnet(chans=2, pools=2)(x).shape == x.shape


def test_equispaced_mask_has_the_acs_block_and_a_quarter_of_the_lines() -> None:
    ctx = BuildContext(name="e2e_varnet", mode="train", device=torch.device("cpu"), batch_size=1, size="full")
    mask, num_low = equispaced_mask(ctx, 368, 4, 0.08)
    lines = mask.flatten()
    assert num_low == 29
    pad = (368 - 29 + 1) // 2
    assert lines[pad : pad + num_low].all()
    assert abs(int(lines.sum()) - 368 / 4) <= 2
