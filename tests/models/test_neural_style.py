"""Neural style transfer (Gatys et al.): Gram matrix, loss placement and the LBFGS step."""

from __future__ import annotations

import torch

import torchgauge
from torchgauge.models.vision.generation.neural_style import (
    CONTENT_WEIGHT,
    STYLE_WEIGHT,
    ContentLoss,
    StyleLoss,
    gram_matrix,
)


def test_gram_matrix_by_hand() -> None:
    # one image, two channels of two pixels: F = [[1, 2], [3, 4]], F F^T = [[5, 11], [11, 25]], / (1*2*1*2)
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 2, 1, 2)
    torch.testing.assert_close(gram_matrix(x), torch.tensor([[5.0, 11.0], [11.0, 25.0]]) / 4)


def test_gram_matrix_matches_a_slow_double_loop() -> None:
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    rows = x.reshape(6, 20)  # (batch * channel, pixels)
    slow = torch.empty(6, 6, dtype=torch.float64)
    for i in range(6):
        for j in range(6):
            slow[i, j] = sum(rows[i, k] * rows[j, k] for k in range(20)) / x.numel()
    torch.testing.assert_close(gram_matrix(x), slow)


def _total_loss(w) -> float:
    with torch.no_grad():
        w.module.image.clamp_(0, 1)
        style, content = w.module()
    return float(STYLE_WEIGHT * style + CONTENT_WEIGHT * content)


def test_losses_sit_at_the_papers_layers_and_the_net_ends_at_conv5_1() -> None:
    w = torchgauge.create("neural_style", mode="train", size="smoke")
    names = [n for n, _ in w.module.net.named_children()]
    style = [n for n, m in w.module.net.named_children() if isinstance(m, StyleLoss)]
    content = [n for n, m in w.module.net.named_children() if isinstance(m, ContentLoss)]
    assert style == [f"style_loss_conv{i}_1" for i in range(1, 6)]
    assert content == ["content_loss_conv4_2"]
    assert names[-1] == "style_loss_conv5_1"  # layers after the last loss are trimmed
    assert names[names.index("content_loss_conv4_2") - 1] == "conv4_2"
    assert sum(isinstance(m, torch.nn.Conv2d) for m in w.module.net) == 13  # conv1_1 .. conv5_1 of VGG-19


def test_content_loss_is_zero_for_the_content_image_itself() -> None:
    w = torchgauge.create("neural_style", mode="train", size="smoke")
    _, content = w.module()  # the image starts as a copy of the content image
    assert float(content.detach()) == 0.0


def test_one_lbfgs_step_lowers_the_total_loss() -> None:
    w = torchgauge.create("neural_style", mode="train", size="smoke")
    before = _total_loss(w)
    returned = float(w.step())
    after = _total_loss(w)
    assert returned == before  # LBFGS returns the first closure's loss
    assert after < 0.5 * before
