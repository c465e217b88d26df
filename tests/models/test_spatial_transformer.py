"""Spatial transformer: the identity start, known affine resamplings, and gradients into theta."""

from __future__ import annotations

import torch

import torchgauge
from torchgauge.models.vision.spatial_transformer import SpatialTransformerNet, STNConfig


def _net() -> SpatialTransformerNet:
    torch.manual_seed(0)
    return SpatialTransformerNet(STNConfig()).eval()


def _set_theta(net: SpatialTransformerNet, theta: list[float]) -> None:
    with torch.no_grad():
        net.fc_loc[2].bias.copy_(torch.tensor(theta))  # the weight is zero: theta = bias for every input


def test_transformer_starts_as_the_identity() -> None:
    net = _net()
    x = torch.rand(3, 1, 28, 28)
    torch.testing.assert_close(net.theta(x), torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]).expand(3, 2, 3))
    torch.testing.assert_close(net.stn(x), x)


def test_translation_by_one_pixel_shifts_the_image() -> None:
    net = _net()
    _set_theta(net, [1, 0, 2 / 28, 0, 1, 0])  # output x samples input x + 1 pixel (normalised width 2)
    x = torch.rand(2, 1, 28, 28)
    out = net.stn(x)
    torch.testing.assert_close(out[..., :-1], x[..., 1:])
    assert out[..., -1].abs().max() < 1e-5  # sampled outside: zero padding


def test_mirror_theta_flips_the_image() -> None:
    net = _net()
    _set_theta(net, [-1, 0, 0, 0, 1, 0])
    x = torch.rand(2, 1, 28, 28)
    torch.testing.assert_close(net.stn(x), x.flip(-1))


def test_localisation_network_gets_gradients_through_the_sampler() -> None:
    net = _net().train()
    x = torch.rand(4, 1, 28, 28)
    torch.nn.functional.nll_loss(net(x), torch.tensor([0, 1, 2, 3])).backward()
    assert net.fc_loc[2].weight.grad.abs().sum() > 0
    assert net.localization[0].weight.grad is not None


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    w = torchgauge.create("stn_classifier", mode="train", size="smoke", batch_size=8)
    w.module.eval()  # no dropout: a deterministic comparison
    first = w.step().item()
    for _ in range(30):
        last = w.step().item()
    assert last < first
