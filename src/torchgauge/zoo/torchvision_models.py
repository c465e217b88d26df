"""``torchvision:NAME``: torchvision's classification models (BSD-3-Clause), ``weights=None``."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..registry import ModelSpec, UnknownModelError
from ..workload import BuildContext, Workload
from .image_classifiers import DEFAULT_BATCH_SIZE, DEFAULT_INPUT_SIZE, classifier_workload

__all__ = ["zoo_spec"]

# Classifiers whose reference resolution is not 224 (torchvision's weights transforms' crop size).
_INPUT_SIZES = {"inception_v3": (3, 299, 299)}


def _build(ctx: BuildContext, *, arch: str, **kwargs: Any) -> Workload:
    import torchvision

    module = torchvision.models.get_model(arch, weights=None, **kwargs)
    return classifier_workload(
        ctx, module, input_size=_INPUT_SIZES.get(arch, DEFAULT_INPUT_SIZE), num_classes=kwargs.get("num_classes", 1000)
    )


def zoo_spec(arch: str, torchvision: ModuleType) -> ModelSpec:
    """The spec of ``torchvision:<arch>`` (classification models only)."""
    classifiers = torchvision.models.list_models(module=torchvision.models)
    if arch not in classifiers:
        others = [m for m in torchvision.models.list_models() if m == arch]
        why = (
            "is not a classification model (detection, segmentation and video are not adapted)"
            if others
            else "does not exist"
        )
        raise UnknownModelError(
            f"torchvision model {arch!r} {why}; accepted: one of torchvision.models.list_models("
            f"module=torchvision.models), e.g. {', '.join(sorted(classifiers)[:3])}"
        )
    return ModelSpec(
        name=f"torchvision:{arch}",
        builder=lambda ctx, **kwargs: _build(ctx, arch=arch, **kwargs),
        domain="vision",
        task="classification",
        source=f"torchvision {getattr(torchvision, '__version__', '')} {arch} (BSD-3-Clause), random weights",
        train_batch_size=DEFAULT_BATCH_SIZE[0],
        eval_batch_size=DEFAULT_BATCH_SIZE[1],
        tags=frozenset({"zoo", "torchvision"}),
        module=__name__,
        preload=("torchvision",),
    )
