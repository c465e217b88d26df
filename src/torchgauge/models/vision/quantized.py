"""Quantisation-aware training (QAT) of MobileNetV2 and ResNet-50 with ``torch.ao.quantization``.

Two workflows on the same torchvision architectures:

* TorchBench's ``mobilenet_v2_quantized_qat`` and ``resnet50_quantized_qat``
  (``torchbenchmark/models/*_quantized_qat/__init__.py``): FX graph mode. The plain float
  network (ReLU6 in MobileNetV2, ``x + out`` residual adds) is put in train mode and
  ``quantize_fx.prepare_qat_fx`` traces it with ``{"": get_default_qat_qconfig("fbgemm")}``,
  fusing conv-BN(-ReLU) into QAT modules with fake-quantised weights and activations. Train:
  forward, cross-entropy against class indices drawn inside the step, backward, Adam at its
  defaults. Eval (CPU only): the prepared model goes straight to ``convert_fx`` with no
  calibration pass, as TorchBench's, and the timed step classifies only the first image of
  the batch (``example_inputs[0][0].unsqueeze(0)``): one image per step whatever the batch,
  which ``samples_per_step`` declares so that throughput counts one image.
* ``*_quantized_qat_eager``: eager-mode QAT as in torchvision's
  ``models/quantization/{mobilenetv2,resnet}.py`` (BSD-3-Clause) and the PyTorch
  static-quantisation tutorial: residual adds go through ``FloatFunctional`` so they get
  observers and become quantised adds, conv-BN(-ReLU) triples are fused,
  ``QuantStub``/``DeQuantStub`` mark the int8 region, and ``prepare_qat`` inserts fake-quant
  observers (x86 qconfig: per-channel weights). Like torchvision's quantisable MobileNetV2,
  ReLU6 becomes ReLU so that every conv-BN-activation can be fused. Eval calibrates the
  observers on the input batch, converts to int8 and classifies the whole batch (int8
  throughput per image) with the x86 (fbgemm) engine, which exists on CPU only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace

import torch
import torch.ao.quantization as tq
from torch import nn
from torch.ao.nn.quantized import FloatFunctional
from torch.ao.quantization import quantize_fx
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, UnsupportedError, Workload, image_classification

from ..common.conv_blocks import ConvNormAct, InvertedResidual
from ..common.resnet import SMOKE_WIDTH_MULT, Bottleneck, ResNet
from .mobilenet import MobileNet, mobilenet_v2_config

__all__ = [
    "FxQatClassification",
    "Int8Classifier",
    "QuantStubbed",
    "QuantizableBottleneck",
    "QuantizableInvertedResidual",
]

# Eager-mode qconfig and kernels: "x86" picks fbgemm or onednn kernels per op on x86 CPUs.
QUANT_ENGINE = "x86"
# TorchBench's FX-mode qconfig backend (get_default_qat_qconfig("fbgemm")); the int8 kernels
# are torch's default quantized engine, which TorchBench leaves as it is.
FX_QCONFIG_BACKEND = "fbgemm"


class QuantizableInvertedResidual(InvertedResidual):
    """:class:`InvertedResidual` whose shortcut add is observable and becomes an int8 add."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Only blocks with a shortcut get one: an unused FloatFunctional leaves an uncalibrated observer.
        self.skip_add = FloatFunctional() if self.use_residual else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out if self.skip_add is None else self.skip_add.add(x, out)


class QuantizableBottleneck(Bottleneck):
    """:class:`Bottleneck` with a fused, observable add + ReLU on the shortcut."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.skip_add_relu = FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.act1(self.bn1(self.conv1(x)))
        out = self.act2(self.bn2(self.conv2(out)))
        return self.skip_add_relu.add_relu(self.bn3(self.conv3(out)), shortcut)


def _fuse_mobilenet(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, ConvNormAct):
            tq.fuse_modules_qat(m, [["0", "1", "2"] if len(m) == 3 else ["0", "1"]], inplace=True)


def _fuse_resnet(model: ResNet) -> None:
    tq.fuse_modules_qat(model, [["conv1", "bn1", "act1"]], inplace=True)
    for m in model.modules():
        if isinstance(m, QuantizableBottleneck):
            triples = [["conv1", "bn1", "act1"], ["conv2", "bn2", "act2"], ["conv3", "bn3"]]
            tq.fuse_modules_qat(m, triples, inplace=True)
            if m.downsample is not None:
                tq.fuse_modules_qat(m.downsample, [["0", "1"]], inplace=True)


class QuantStubbed(nn.Module):
    """quantise -> network -> dequantise: float images in, float logits out."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.quant = tq.QuantStub()
        self.model = model
        self.dequant = tq.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequant(self.model(self.quant(x)))


class Int8Classifier(nn.Module):
    """The converted int8 network, next to the fake-quantised float network it was converted from.

    ``forward`` runs only ``int8``. ``qat`` is kept because int8 modules hold packed weights,
    not parameters: it is what ``parameters()`` reports (the float model's weights).
    """

    def __init__(self, qat: nn.Module, int8: nn.Module) -> None:
        super().__init__()
        self.qat = qat
        self.int8 = int8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.int8(x)


# Smoke images: at 32 px MobileNetV2's last maps are 1x1, so with batch 2 its BatchNorms
# normalise two fake-quantised values, often equal (variance 0): gradients grow ~300x per
# such layer and the weights overflow within 4 training steps. At 64 px the maps are 2x2.
SMOKE_IMAGE_SIZE = 64


def _refuse_int8_off_cpu(ctx: BuildContext, engine: str) -> None:
    if not ctx.train:
        if ctx.device.type != "cpu":
            raise UnsupportedError("int8 inference runs on CPU only")
        if engine not in torch.backends.quantized.supported_engines:
            raise UnsupportedError(f"the {engine} quantized engine is not available on this CPU")


def _create_eager_qat(
    ctx: BuildContext, model: nn.Module, fuse: Callable[[nn.Module], None], num_classes: int
) -> Workload:
    _refuse_int8_off_cpu(ctx, QUANT_ENGINE)
    qat = QuantStubbed(model).train()
    fuse(model)  # fusion for QAT needs train mode
    qat.qconfig = tq.get_default_qat_qconfig(QUANT_ENGINE)
    tq.prepare_qat(qat, inplace=True)
    # TorchBench's QAT step: Adam at its defaults, cross-entropy on random labels.
    workload = image_classification(
        ctx, qat, image_size=ctx.pick(224, SMOKE_IMAGE_SIZE), num_classes=num_classes, optimizer="adam", lr=1e-3
    )
    if not ctx.train:
        torch.backends.quantized.engine = QUANT_ENGINE  # process-wide: selects the int8 kernels
        qat.eval()
        with torch.no_grad():  # calibrate activation ranges with eval-mode (folded) BN, as convert will
            qat(workload.inputs[0][:2])
        workload.module = Int8Classifier(qat, tq.convert(qat, inplace=False))
    return workload


class FxQatClassification(Workload):
    """TorchBench's FX-mode QAT step.

    Train: forward, cross-entropy against class indices drawn inside the step (TorchBench's
    ``torch.empty(B).random_(classes)``), backward, Adam. Eval: the int8 model on the first
    image of the batch only, ``images[0].unsqueeze(0)``, as TorchBench's ``eval``.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.label_generator = torch.Generator(device=self.ctx.device)  # the per-step labels, seeded
        self.label_generator.manual_seed(self.ctx.seed)

    def train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            logits = self.forward()
            labels = torch.randint(
                logits.shape[1], (logits.shape[0],), generator=self.label_generator, device=logits.device
            )
            loss = F.cross_entropy(logits, labels)
        self.backward_and_step(loss)
        return loss.detach()

    def forward(self) -> torch.Tensor:
        (images,) = self.inputs
        return self.module(images if self.ctx.train else images[0].unsqueeze(0))


def _create_fx_qat(ctx: BuildContext, model: nn.Module) -> Workload:
    _refuse_int8_off_cpu(ctx, torch.backends.quantized.engine)
    images = ctx.randn(ctx.batch_size, 3, ctx.pick(224, SMOKE_IMAGE_SIZE), ctx.pick(224, SMOKE_IMAGE_SIZE))
    qconfig = {"": tq.get_default_qat_qconfig(FX_QCONFIG_BACKEND)}
    prepared = quantize_fx.prepare_qat_fx(model.train(), qconfig, (images,))
    if ctx.train:
        return FxQatClassification(ctx, prepared, (images,), optimizer=torch.optim.Adam(prepared.parameters()))
    # No calibration: TorchBench converts the freshly prepared model. convert_fx consumes the
    # prepared graph, so it converts a copy and the float model stays to report the parameters.
    int8 = quantize_fx.convert_fx(copy.deepcopy(prepared)).eval()
    return FxQatClassification(ctx, Int8Classifier(prepared, int8), (images,))


def _resnet50(ctx: BuildContext, block: type[Bottleneck], **kwargs) -> ResNet:
    # Fake-quantising, preparing and converting 16 blocks takes seconds on a CPU even at 32 px;
    # smoke: one block per stage at the ResNet family's smoke width.
    smoke = {"width_mult": SMOKE_WIDTH_MULT} if ctx.smoke else {}
    return ResNet(block, ctx.pick((3, 4, 6, 3), (1, 1, 1, 1)), **{**smoke, **kwargs})


_NOTES = "Fake-quantised float training; int8 eval on CPU only; float32 inputs only."
_QAT_META = {"tags": ("quantized",), "unsupported_precisions": ("fp16", "bf16"), "notes": _NOTES}
_FX_NOTES = (
    "TorchBench's FX-mode QAT; eval converts without calibration and classifies the first image "
    "of its batch only (samples_per_step 1). " + _NOTES
)
_FX_META = {**_QAT_META, "notes": _FX_NOTES, "samples_per_step": (None, 1)}


@register_model(
    domain="vision", task="classification", batch_size=(96, 96), param_count=3_504_872,
    source="torchvision mobilenet_v2 with FX-mode QAT, as TorchBench's mobilenet_v2_quantized_qat", **_FX_META,
)  # fmt: skip
def mobilenet_v2_quantized_qat(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's: MobileNetV2 (ReLU6) through prepare_qat_fx; eval runs convert_fx's int8 model on one image."""
    return _create_fx_qat(ctx, MobileNet(replace(mobilenet_v2_config(), **kwargs)))


@register_model(
    domain="vision", task="classification", batch_size=(32, 32), param_count=25_557_032,
    source="torchvision resnet50 with FX-mode QAT, as TorchBench's resnet50_quantized_qat", **_FX_META,
)  # fmt: skip
def resnet50_quantized_qat(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's: ResNet-50 through prepare_qat_fx; eval runs convert_fx's int8 model on one image."""
    return _create_fx_qat(ctx, _resnet50(ctx, Bottleneck, **kwargs))


@register_model(
    domain="vision", task="classification", source="torchvision quantization.mobilenet_v2 with eager-mode QAT",
    batch_size=(96, 96), param_count=3_504_872, **_QAT_META,
)  # fmt: skip
def mobilenet_v2_quantized_qat_eager(ctx: BuildContext, **kwargs) -> Workload:
    """MobileNetV2 (ReLU) with eager-mode QAT; eval calibrates, converts and classifies the whole batch in int8."""
    cfg = replace(mobilenet_v2_config(act=nn.ReLU), **kwargs)
    return _create_eager_qat(ctx, MobileNet(cfg, block=QuantizableInvertedResidual), _fuse_mobilenet, cfg.num_classes)


@register_model(
    domain="vision", task="classification", source="torchvision quantization.resnet50 with eager-mode QAT",
    batch_size=(32, 32), param_count=25_557_032, **_QAT_META,
)  # fmt: skip
def resnet50_quantized_qat_eager(ctx: BuildContext, **kwargs) -> Workload:
    """ResNet-50 with eager-mode QAT; eval calibrates, converts and classifies the whole batch in int8."""
    model = _resnet50(ctx, QuantizableBottleneck, **kwargs)
    return _create_eager_qat(ctx, model, _fuse_resnet, model.head.fc.out_features)
