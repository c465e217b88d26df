"""Image-classification building blocks and workloads (models/vision/*.py) against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import torchgauge
from torchgauge.models.common.conv_blocks import make_divisible
from torchgauge.models.vision.nfnet import NFNet, NFNetConfig, ScaledStdConv2d, _same_padding
from torchgauge.models.vision.quantized import resnet50_quantized_qat, resnet50_quantized_qat_eager
from torchgauge.models.vision.regnet import RegNetConfig, regnet_stages
from torchgauge.models.vision.resnest import SplitAttention
from torchgauge.models.vision.shufflenet import channel_shuffle
from torchgauge.registry import get_spec
from torchgauge.workload import BuildContext, UnsupportedError


@pytest.mark.parametrize(
    "value,divisor,min_value,expected",
    [
        (24.0, 8, None, 24),  # already divisible
        (28.0, 8, None, 32),  # int(28 + 4) // 8 * 8 = 32
        (26.0, 8, None, 24),  # int(30) // 8 * 8 = 24, and 24 >= 0.9 * 26 = 23.4
        (27.0, 8, None, 32),  # 24 again, but 24 < 0.9 * 27 = 24.3: one more divisor
        (20.0, 16, None, 32),  # rounds to 16 < 0.9 * 20, so one more divisor
        (3.0, 8, None, 8),  # never below min_value (the divisor)
        (32.0, 8, 32, 32),  # ResNeSt attention width floor
    ],
)
def test_make_divisible(value: float, divisor: int, min_value: int | None, expected: int) -> None:
    assert make_divisible(value, divisor, min_value) == expected


def test_channel_shuffle_interleaves_groups() -> None:
    x = torch.arange(6.0).view(1, 6, 1, 1)  # groups of 3: [0 1 2 | 3 4 5]
    assert channel_shuffle(x, 2).flatten().tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]


def test_regnety_016_stages() -> None:
    # RegNetY-1.6GF of the paper's Table 7 / pycls: widths 48-120-336-888, depths 2-6-17-2.
    cfg = RegNetConfig(depth=27, w0=48, wa=20.71, wm=2.65, group_size=24)
    assert regnet_stages(cfg) == [(48, 2, 24), (120, 6, 24), (336, 17, 24), (888, 2, 24)]


@pytest.mark.parametrize(
    "size,expected",
    [
        ((5, 5), (1, 1, 1, 1)),  # out 3: (3 - 1) * 2 + 3 - 5 = 2, split evenly
        ((4, 6), (0, 1, 0, 1)),  # out 2x3: 1 pixel each, all on the right / bottom
        ((1, 1), (1, 1, 1, 1)),
    ],
)
def test_same_padding_stride_2(size: tuple[int, int], expected: tuple[int, ...]) -> None:
    assert _same_padding(torch.Size(size), kernel=3, stride=2) == expected


def test_scaled_std_conv_weight_is_standardised() -> None:
    torch.manual_seed(0)
    conv = ScaledStdConv2d(4, 3, 3)
    with torch.no_grad():
        conv.weight.mul_(5).add_(2)  # any scale and offset is removed
        conv.gain[1] = 2.0
    w = conv.standardized_weight().flatten(1)  # (out, fan_in = 36)
    assert torch.allclose(w.mean(1), torch.zeros(3), atol=1e-6)
    # Zero mean and variance var / (var + eps) / fan_in (timm's eps 1e-5 in the denominator):
    # each row's L2 norm is sqrt(var / (var + eps)), just under 1, times its gain.
    var = conv.weight.detach().flatten(1).var(dim=1, correction=0)
    expected = torch.tensor([1.0, 2.0, 1.0]) * torch.sqrt(var / (var + 1e-5))
    assert torch.allclose(w.norm(dim=1), expected, atol=1e-6)
    assert (expected < torch.tensor([1.0, 2.0, 1.0])).all() and torch.allclose(
        expected, torch.tensor([1.0, 2.0, 1.0]), atol=1e-3
    )


def test_nfnet_beta_follows_expected_variance() -> None:
    net = NFNet(NFNetConfig(depths=(1, 2, 1), channels=(16, 32, 64), stem_ch=16, group_size=8))
    betas = [block.beta for stage in net.stages for block in stage]
    # Variance 1 into the net, +alpha^2 = 0.04 per block, reset to 1 by each stage's first block.
    assert betas == pytest.approx([1.0, 1.04**-0.5, 1.04**-0.5, 1.08**-0.5])


def test_split_attention_weights_sum_to_one_over_splits() -> None:
    torch.manual_seed(0)
    attn = SplitAttention(8, 8, radix=2)
    with torch.no_grad():  # the conv has one group per split: 4 input channels -> 8 maps each
        attn.conv.weight[8:] = attn.conv.weight[:8]
    attn.eval()
    half = torch.randn(2, 4, 5, 5)
    x = torch.cat([half, half], 1)  # both splits now produce the same maps ...
    split = attn.act0(attn.bn0(attn.conv(x)))[:, :8]
    # ... and any convex combination of two equal maps is that map.
    assert torch.allclose(attn(x), split, atol=1e-5)


@pytest.mark.parametrize(
    "name,image_size,num_classes",
    [("resnet18", 224, 1000), ("efficientnet_b0", 224, 1000), ("vit_b_16", 224, 1000), ("phlippe_densenet", 32, 10)],
)
def test_full_size_eval_output_shape(name: str, image_size: int, num_classes: int) -> None:
    w = torchgauge.create(name, mode="eval", batch_size=1)
    (images,) = w.inputs
    assert images.shape == (1, 3, image_size, image_size)
    assert w.step().shape == (1, num_classes)


@pytest.mark.parametrize(
    "mode,size,image_size", [("train", "full", 192), ("eval", "full", 256), ("train", "smoke", 32)]
)
def test_nfnet_image_size(mode: str, size: str, image_size: int) -> None:
    narrow = {"channels": (16, 32, 64, 64), "stem_ch": 16, "group_size": 8}  # the sizes, not the weights, matter here
    w = torchgauge.create("dm_nfnet_f0", mode=mode, size=size, batch_size=1, **narrow)
    assert w.inputs[0].shape == (1, 3, image_size, image_size)


def test_architecture_overrides_reach_the_model() -> None:
    w = torchgauge.create("mobilenet_v2", mode="eval", size="smoke", num_classes=10)
    assert w.step().shape == (2, 10)
    train = torchgauge.create("mobilenet_v2", mode="train", size="smoke", num_classes=10)
    assert train.targets is None  # TorchBench's step draws soft targets from the logits each step
    assert torch.isfinite(train.step())


@pytest.mark.parametrize("name", ["mobilenet_v2_quantized_qat_eager", "resnet50_quantized_qat_eager"])
def test_eager_qat_eval_runs_an_int8_model_on_the_whole_batch(name: str) -> None:
    from torch.ao.nn import intrinsic, quantized

    w = torchgauge.create(name, mode="eval", size="smoke")
    int8 = w.module.int8
    kinds = {type(m) for m in int8.modules()}
    assert intrinsic.quantized.ConvReLU2d in kinds  # fused conv-BN-ReLU, int8
    assert quantized.Linear in kinds
    assert quantized.QFunctional in kinds  # the residual adds
    assert not any(isinstance(m, (nn.Conv2d, nn.BatchNorm2d)) for m in int8.modules())  # nothing left in float
    out = w.step()
    assert out.dtype == torch.float32 and out.shape == (2, 1000)


@pytest.mark.parametrize("name", ["mobilenet_v2_quantized_qat", "resnet50_quantized_qat"])
def test_fx_qat_eval_classifies_the_first_image_in_int8(name: str) -> None:
    # TorchBench's eval: convert_fx's int8 model on example_inputs[0][0].unsqueeze(0)
    from torch.ao.nn import quantized
    from torch.fx import GraphModule

    w = torchgauge.create(name, mode="eval", size="smoke")
    int8 = w.module.int8
    assert isinstance(int8, GraphModule) and any(isinstance(m, quantized.Linear) for m in int8.modules())
    assert not any(isinstance(m, (nn.Conv2d, nn.BatchNorm2d)) for m in int8.modules())  # nothing left in float
    out = w.step()
    assert w.batch_size == 2 and out.shape == (1, 1000)
    assert torch.equal(out, int8(w.inputs[0][:1]))
    assert get_spec(name).step_samples("eval", 96) == 1 and get_spec(name).step_samples("train", 96) == 96


def test_qat_train_uses_fake_quantised_modules() -> None:
    from torch.ao.nn.intrinsic import qat
    from torch.ao.quantization import FakeQuantize
    from torch.fx import GraphModule

    for name in ("resnet50_quantized_qat", "resnet50_quantized_qat_eager"):
        w = torchgauge.create(name, mode="train", size="smoke")
        modules = list(w.module.modules())
        assert any(isinstance(m, qat.ConvBnReLU2d) for m in modules)
        assert any(isinstance(m, FakeQuantize) for m in modules)
        assert isinstance(w.module, GraphModule) == (name == "resnet50_quantized_qat")  # FX mode for TorchBench's
        assert math.isfinite(float(w.step()))


@pytest.mark.parametrize("builder", [resnet50_quantized_qat, resnet50_quantized_qat_eager])
def test_qat_eval_is_cpu_only(builder) -> None:
    cuda = torch.device("cuda")  # never touched: the builder refuses before building anything
    ctx = BuildContext(name=builder.__name__, mode="eval", device=cuda, batch_size=1, size="smoke")
    with pytest.raises(UnsupportedError, match="CPU only"):
        builder(ctx)
