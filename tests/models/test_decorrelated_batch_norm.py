"""Decorrelated BatchNorm: whitened groups have identity covariance; running statistics in eval; gradients."""

from __future__ import annotations

import torch

import torchgauge
from torchgauge.models.vision.decorrelated_batch_norm import DecorrelatedBatchNorm2d

F64 = torch.float64


def _correlated(b: int, c: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    mix = torch.randn(c, c, generator=gen, dtype=F64)
    x = torch.randn(b, c, h, w, generator=gen, dtype=F64)
    return torch.einsum("dc,bchw->bdhw", mix, x) + 3.0  # strongly correlated channels, non-zero mean


def _group_cov(y: torch.Tensor, channels: slice) -> torch.Tensor:
    flat = y[:, channels].transpose(0, 1).reshape(channels.stop - channels.start, -1)
    flat = flat - flat.mean(1, keepdim=True)
    return flat @ flat.T / flat.shape[1]


def test_training_output_has_zero_mean_and_identity_covariance_per_group() -> None:
    dbn = DecorrelatedBatchNorm2d(8, group_size=4, eps=0.0).double()
    y = dbn(_correlated(6, 8, 5, 5)).detach()
    torch.testing.assert_close(y.mean((0, 2, 3)), torch.zeros(8, dtype=F64), atol=1e-10, rtol=0)
    for g in (slice(0, 4), slice(4, 8)):
        torch.testing.assert_close(_group_cov(y, g), torch.eye(4, dtype=F64))


def test_whitening_matrix_is_the_symmetric_inverse_square_root() -> None:
    dbn = DecorrelatedBatchNorm2d(4, group_size=4).double()
    x = _correlated(3, 4, 4, 4).transpose(0, 1).reshape(1, 4, -1)
    _, wm = dbn.whitening_matrix(x)
    xc = x - x.mean(-1, keepdim=True)
    sigma = xc @ xc.transpose(1, 2) / x.shape[-1] + dbn.eps * torch.eye(4, dtype=F64)
    torch.testing.assert_close(wm, wm.transpose(1, 2))  # ZCA, not PCA: symmetric
    torch.testing.assert_close(wm @ wm, torch.linalg.inv(sigma))


def test_groups_are_whitened_independently() -> None:
    x = _correlated(4, 8, 3, 3)
    both = DecorrelatedBatchNorm2d(8, group_size=4).double()(x)
    first = DecorrelatedBatchNorm2d(4, group_size=4).double()(x[:, :4])
    second = DecorrelatedBatchNorm2d(4, group_size=4).double()(x[:, 4:])
    torch.testing.assert_close(both, torch.cat([first, second], 1))


def test_eval_uses_the_running_whitening() -> None:
    dbn = DecorrelatedBatchNorm2d(4, group_size=4, momentum=1.0).double()  # running stats = last batch
    x = _correlated(4, 4, 3, 3)
    train_out = dbn(x)
    dbn.eval()
    torch.testing.assert_close(dbn(x), train_out)
    torch.testing.assert_close(dbn(x[:1]), train_out[:1])  # per-sample in eval: no batch statistics


def test_gradient_through_the_eigendecomposition_matches_finite_differences() -> None:
    dbn = DecorrelatedBatchNorm2d(3, group_size=3).double()
    x = _correlated(3, 3, 2, 2, seed=1).requires_grad_()
    weights = torch.randn(3, 3, 2, 2, dtype=F64)
    assert torch.autograd.gradcheck(lambda t: (dbn(t) * weights).sum(), (x,))


def test_first_norm_of_the_resnet_is_dbn_and_the_loss_falls() -> None:
    w = torchgauge.create("dbn_resnet56", mode="train", size="smoke")
    assert isinstance(w.module.stem[1], DecorrelatedBatchNorm2d)
    assert sum(isinstance(m, DecorrelatedBatchNorm2d) for m in w.module.modules()) == 1
    losses = [w.step().item() for _ in range(5)]
    assert losses[-1] < losses[0]
