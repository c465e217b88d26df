"""SegNet: index-based unpooling, the VGG-16-BN encoder, and the class-balanced loss."""

from __future__ import annotations

import math

import pytest
import torch

import torchgauge
from torchgauge.models.vision.segnet import CAMVID_CLASS_WEIGHTS, CAMVID_VOID, SegNet, SegNetConfig


def test_encoder_is_vgg16_bn_features() -> None:
    model = SegNet(SegNetConfig())
    # torchvision vgg16 features: 14,714,688 conv weights and biases; BN adds 2 per channel (8,448)
    assert sum(p.numel() for p in model.encoders.parameters()) == 14_714_688 + 8_448
    convs = [m for m in model.encoders.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 13


def test_decoder_restores_odd_sizes_through_the_indices() -> None:
    # 40 x 56 -> 20 x 28 -> 10 x 14 -> 5 x 7 -> 2 x 3 -> 1 x 1: the 5 x 7 stage rounds down on pooling
    torch.manual_seed(0)
    model = SegNet(SegNetConfig(widths=(4, 4, 4, 4, 4), num_classes=3)).eval()
    assert model(torch.randn(2, 3, 40, 56)).shape == (2, 3, 40, 56)


def test_pool_unpool_puts_each_maximum_back_where_it_was() -> None:
    model = SegNet(SegNetConfig(widths=(2, 2, 2, 2, 2)))
    x = torch.rand(1, 2, 5, 7) + 0.1  # positive: the zeros unpooling writes are below every maximum
    pooled, indices = model.pool(x)
    up = model.unpool(pooled, indices, output_size=x.shape)
    assert up.shape == x.shape
    for i in range(2):
        for j in range(3):  # each 2x2 window of the 4 x 6 pooled area keeps exactly its maximum
            window = x[0, :, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2]
            torch.testing.assert_close(up[0, :, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2].amax((1, 2)), window.amax((1, 2)))
            assert ((up[0, :, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2] != 0).sum((1, 2)) == 1).all()
    assert (up[0, :, 4, :] == 0).all() and (up[0, :, :, 6] == 0).all()  # the rows/columns pooling dropped


def test_loss_is_class_balanced_and_skips_void() -> None:
    w = torchgauge.create("segnet", mode="train", size="smoke")
    labels, weights = w.targets
    assert (labels == CAMVID_VOID).any()
    logits = torch.randn(labels.shape[0], 11, *labels.shape[1:], dtype=torch.float64)
    # slow reference: sum_i w[y_i] * -log p_i(y_i) / sum_i w[y_i] over labelled pixels
    logp = logits.log_softmax(1).permute(0, 2, 3, 1).reshape(-1, 11)
    y = labels.reshape(-1)
    keep = y != CAMVID_VOID
    wt = torch.tensor(CAMVID_CLASS_WEIGHTS, dtype=torch.float64)[y[keep]]
    expected = (wt * -logp[keep].gather(1, y[keep, None]).squeeze(1)).sum() / wt.sum()
    torch.testing.assert_close(w.compute_loss(logits), expected)
    # uniform logits: every labelled pixel costs log(11), whatever its weight
    assert w.compute_loss(torch.zeros_like(logits)).item() == pytest.approx(math.log(11))


def test_training_lowers_the_loss_on_a_fixed_batch() -> None:
    w = torchgauge.create("segnet", mode="train", size="smoke")
    losses = [w.step().item() for _ in range(15)]
    assert min(losses[-3:]) < losses[0]
