"""S4D: the FFT convolution with the Vandermonde kernel equals the discretised recurrence."""

from __future__ import annotations

import math

import torch

import torchgauge
from torchgauge.models.other.sequence.s4d import S4D, S4DKernel, fft_convolution

F64 = torch.float64


def _kernel(h: int = 3, n: int = 8, seed: int = 0) -> S4DKernel:
    torch.manual_seed(seed)
    return S4DKernel(h, n, dt_min=1e-3, dt_max=1e-1, ssm_lr=1e-3).double()


def test_s4d_lin_initialisation() -> None:
    k = _kernel(h=4, n=10)
    a = -torch.exp(k.log_A_real) + 1j * k.A_imag
    expected = -0.5 + 1j * math.pi * torch.arange(5, dtype=F64)
    torch.testing.assert_close(a, expected.expand(4, 5).to(a.dtype))
    dt = torch.exp(k.log_dt)
    assert torch.all((dt >= 1e-3) & (dt <= 1e-1))
    assert k.C.shape == (4, 5, 2) and k.log_dt._optim == {"weight_decay": 0.0, "lr": 1e-3}


def test_fft_convolution_equals_direct_causal_convolution() -> None:
    gen = torch.Generator().manual_seed(1)
    u, k = torch.randn(2, 3, 17, generator=gen, dtype=F64), torch.randn(3, 17, generator=gen, dtype=F64)
    direct = torch.zeros_like(u)
    for step in range(17):
        for j in range(step + 1):
            direct[..., step] += k[:, j] * u[..., step - j]
    torch.testing.assert_close(fft_convolution(u, k), direct)


def test_kernel_convolution_equals_the_zoh_discretised_recurrence() -> None:
    # x_l = exp(dt A) x_{l-1} + (exp(dt A) - 1) / A u_l (B = 1), y_l = 2 Re(C x_l): the same map as the kernel
    kernel = _kernel(h=3, n=8, seed=2)
    length = 40
    u = torch.randn(2, 3, length, generator=torch.Generator().manual_seed(3), dtype=F64)
    with torch.no_grad():
        y_conv = fft_convolution(u, kernel(length))
        dt = torch.exp(kernel.log_dt).unsqueeze(-1)  # (H, 1)
        a = -torch.exp(kernel.log_A_real) + 1j * kernel.A_imag  # (H, N/2)
        a_bar, b_bar = torch.exp(dt * a), (torch.exp(dt * a) - 1) / a
        c = torch.view_as_complex(kernel.C)
        x = torch.zeros(2, 3, 4, dtype=c.dtype)
        y_rec = torch.zeros_like(u)
        for step in range(length):
            x = a_bar * x + b_bar * u[..., step, None]
            y_rec[..., step] = 2 * (c * x).sum(-1).real
    torch.testing.assert_close(y_conv, y_rec)


def test_kernel_impulse_response_is_its_first_entries() -> None:
    kernel = _kernel(seed=4)
    with torch.no_grad():
        k = kernel(12)
        impulse = torch.zeros(1, 3, 12, dtype=F64)
        impulse[..., 0] = 1
        torch.testing.assert_close(fft_convolution(impulse, k)[0], k)
        # the kernel does not depend on the length it is computed for (prefix property)
        torch.testing.assert_close(kernel(30)[:, :12], k)


def test_layer_is_causal() -> None:
    torch.manual_seed(5)
    layer = S4D(4, 8, dropout=0.0, dt_min=1e-3, dt_max=1e-1, ssm_lr=None).double().eval()
    u = torch.randn(1, 4, 20, dtype=F64)
    v = u.clone()
    v[..., 12:] += 1.0  # change the future only
    with torch.no_grad():
        torch.testing.assert_close(layer(u)[..., :12], layer(v)[..., :12])


def test_optimizer_puts_ssm_parameters_in_their_own_group() -> None:
    w = torchgauge.create("s4d_scifar", mode="train", size="smoke")
    plain, ssm = w.optimizer.param_groups
    names = {id(p): n for n, p in w.module.named_parameters()}
    assert {names[id(p)].rsplit(".", 1)[-1] for p in ssm["params"]} == {"log_dt", "log_A_real", "A_imag"}
    assert ssm["lr"] == 1e-3 and ssm["weight_decay"] == 0.0
    assert plain["lr"] == 0.01 and plain["weight_decay"] == 0.01


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    w = torchgauge.create("s4d_scifar", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(40)]
    assert losses[-1] < 0.7 * losses[0]
