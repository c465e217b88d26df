"""``timm:NAME``: any timm architecture (Apache-2.0), random weights (``pretrained=False``)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..registry import ModelSpec, UnknownModelError
from ..workload import BuildContext, Workload
from .image_classifiers import DEFAULT_BATCH_SIZE, DEFAULT_INPUT_SIZE, classifier_workload

__all__ = ["zoo_spec"]


def _build(ctx: BuildContext, *, arch: str, **kwargs: Any) -> Workload:
    import timm

    module = timm.create_model(arch, pretrained=False, **kwargs)
    cfg = getattr(module, "pretrained_cfg", None) or {}
    input_size = tuple(cfg.get("input_size") or DEFAULT_INPUT_SIZE)
    return classifier_workload(ctx, module, input_size=input_size, num_classes=getattr(module, "num_classes", 1000))


def zoo_spec(arch: str, timm: ModuleType) -> ModelSpec:
    """The spec of ``timm:<arch>``; UnknownModelError when timm has no such model."""
    if not timm.is_model(arch):
        close = timm.list_models(f"*{arch}*")[:5]
        hint = f"; timm has: {', '.join(close)}" if close else "; see timm.list_models()"
        raise UnknownModelError(f"timm has no model {arch!r}{hint}")
    return ModelSpec(
        name=f"timm:{arch}",
        builder=lambda ctx, **kwargs: _build(ctx, arch=arch, **kwargs),
        domain="vision",
        task="classification",
        source=f"timm {getattr(timm, '__version__', '')} {arch} (Apache-2.0), random weights".replace("  ", " "),
        train_batch_size=DEFAULT_BATCH_SIZE[0],
        eval_batch_size=DEFAULT_BATCH_SIZE[1],
        tags=frozenset({"zoo", "timm"}),
        module=__name__,
        preload=("timm",),
    )
