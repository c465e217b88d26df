"""Video models: R(2+1)D's channel rule, torchvision's parameter counts, strides and C3D's pooling."""

from __future__ import annotations

import pytest
import torch

import torchgauge
from torchgauge.models.vision import video_resnet as vr
from torchgauge.models.vision.video_resnet import C3D, C3DConfig, Conv2Plus1D, VideoResNet, midplanes


@pytest.mark.parametrize("n_in,n_out,expected", [(64, 64, 144), (64, 128, 230), (128, 128, 288), (512, 512, 1152)])
def test_midplanes_known_values(n_in: int, n_out: int, expected: int) -> None:
    assert midplanes(n_in, n_out) == expected
    # and the factorised conv has (just under) the weights of one 3x3x3 conv
    conv = Conv2Plus1D(n_in, n_out, expected)
    weights = conv[0].weight.numel() + conv[3].weight.numel()
    assert 27 * n_in * n_out - (9 * n_in + 3 * n_out) < weights <= 27 * n_in * n_out


@pytest.mark.parametrize("factorised,count", [(False, 33_371_472), (True, 31_505_325)])
def test_parameter_counts_equal_torchvision(factorised: bool, count: int) -> None:
    stem = vr.r2plus1d_stem() if factorised else vr.r3d_stem()
    model = VideoResNet(Conv2Plus1D if factorised else vr.conv3d_simple, stem)
    assert sum(p.numel() for p in model.parameters()) == count


@pytest.mark.parametrize("factorised", [False, True])
def test_stem_keeps_time_and_stages_halve_time_and_space(factorised: bool) -> None:
    torch.manual_seed(0)
    widths = (4, 8, 8, 16)
    stem = vr.r2plus1d_stem(4) if factorised else vr.r3d_stem(4)
    model = VideoResNet(Conv2Plus1D if factorised else vr.conv3d_simple, stem, widths=widths, num_classes=5).eval()
    x = torch.randn(1, 3, 16, 32, 32)
    feats = model.stem(x)
    assert feats.shape == (1, 4, 16, 16, 16)
    feats = model.layer4(model.layer3(model.layer2(model.layer1(feats))))
    assert feats.shape == (1, 16, 2, 2, 2)
    assert model(x).shape == (1, 5)


def test_conv2plus1d_factorises_space_then_time() -> None:
    # spatial kernel sums the 3x3 neighbourhood, temporal kernel takes the previous frame:
    # out[t, h, w] = relu(BN(box3x3(x)[t - 1]))[h, w], BN in eval at its initial statistics
    conv = Conv2Plus1D(1, 1, 1).eval()
    with torch.no_grad():
        conv[0].weight.fill_(1.0)
        conv[3].weight.copy_(torch.tensor([1.0, 0.0, 0.0]).view(1, 1, 3, 1, 1))
    x = torch.rand(1, 1, 4, 5, 5)
    box = torch.nn.functional.avg_pool2d(x[0], 3, 1, 1, count_include_pad=True) * 9  # (1, 4, 5, 5) per frame
    expected = torch.zeros_like(x)
    expected[0, 0, 1:] = box[0, :-1] / (1 + conv[1].eps) ** 0.5
    torch.testing.assert_close(conv(x), expected)


def test_c3d_pools_to_8192_features_and_predicts_probabilities() -> None:
    assert C3D(C3DConfig()).features == 512 * 1 * 4 * 4  # pool5's spatial padding: 7 x 7 -> 4 x 4
    w = torchgauge.create("c3d", mode="eval", size="smoke")
    probs = w.step()
    assert probs.shape == (2, 487)
    torch.testing.assert_close(probs.sum(1), torch.ones(2))


@pytest.mark.parametrize("name", ["r3d_18", "c3d"])
def test_training_lowers_the_loss_on_a_fixed_batch(name: str) -> None:
    w = torchgauge.create(name, mode="train", size="smoke", batch_size=4)
    w.module.eval()  # no dropout or batch statistics: a deterministic comparison
    first = w.step().item()
    for _ in range(10):
        last = w.step().item()
    assert last < first
