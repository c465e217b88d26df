"""ResNet and ResNeXt classifiers: He et al., "Deep Residual Learning for Image Recognition", 2015;
Xie et al., "Aggregated Residual Transformations for Deep Neural Networks", 2017.

The architecture (torchvision's ``models/resnet.py`` layout, BSD-3-Clause) lives in
:mod:`torchgauge.models.common.resnet`, shared with models of other domains; this module
registers the torchvision classifiers TorchBench runs.
"""

from __future__ import annotations

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from ..common.resnet import SMOKE_WIDTH_MULT, resnet
from ..common.torchbench_precision import TORCHVISION_FACTORY
from .torchvision_step import torchvision_classification

__all__: list[str] = []


def _create_resnet(ctx: BuildContext, depth: int, **kwargs) -> Workload:
    model = resnet(depth, **{"width_mult": ctx.pick(1.0, SMOKE_WIDTH_MULT), **kwargs})
    # Output stride 32: 32 px reaches 1x1 in layer4 at smoke size.
    return torchvision_classification(ctx, model, image_size=ctx.pick(224, 32))


_SOURCE = "He et al., Deep Residual Learning for Image Recognition, 2015; torchvision resnet"


@register_model(
    domain="vision",
    task="classification",
    source=_SOURCE,
    batch_size=(16, 8),
    param_count=11_689_512,
    torchbench_precision=TORCHVISION_FACTORY,
)
def resnet18(ctx: BuildContext, **kwargs) -> Workload:
    """ResNet-18 at 224x224."""
    return _create_resnet(ctx, 18, **kwargs)


@register_model(
    domain="vision", task="classification", source=_SOURCE, batch_size=(32, 32), param_count=25_557_032,
    tags=("mlperf",),
    torchbench_precision=TORCHVISION_FACTORY,
)  # fmt: skip
def resnet50(ctx: BuildContext, **kwargs) -> Workload:
    """ResNet-50 v1.5 at 224x224 (the MLPerf image-classification model)."""
    return _create_resnet(ctx, 50, **kwargs)


@register_model(
    domain="vision",
    task="classification",
    source=_SOURCE,
    batch_size=(32, 32),
    param_count=60_192_808,
    torchbench_precision=TORCHVISION_FACTORY,
)
def resnet152(ctx: BuildContext, **kwargs) -> Workload:
    """ResNet-152 at 224x224."""
    return _create_resnet(ctx, 152, **kwargs)


@register_model(
    domain="vision", task="classification", source="Xie et al., ResNeXt, 2017; torchvision resnext50_32x4d",
    batch_size=(8, 8), param_count=25_028_904,
    torchbench_precision=TORCHVISION_FACTORY,
)  # fmt: skip
def resnext50_32x4d(ctx: BuildContext, **kwargs) -> Workload:
    """ResNeXt-50 with 32 groups of width 4 at 224x224."""
    return _create_resnet(ctx, 50, **{"groups": 32, "width_per_group": 4, **kwargs})
