"""The workload of a zoo image classifier: synthetic images and labels, cross-entropy on the logits.

Shared by the timm and torchvision adapters. Some classifiers return a tuple or a named
tuple with auxiliary heads in training (torchvision's Inception v3 and GoogLeNet): the loss
takes the main ``logits``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from ..workload import BuildContext, Workload

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_INPUT_SIZE", "classifier_workload", "main_logits"]

DEFAULT_INPUT_SIZE = (3, 224, 224)  # (C, H, W): ImageNet's, when the zoo gives none
DEFAULT_BATCH_SIZE = (32, 64)  # (train, eval): the ResNet reference's training batch per GPU, and 2x for inference


def main_logits(outputs: Any) -> Any:
    """The classifier's logits: ``outputs.logits`` if present, the first element of a tuple, or ``outputs``."""
    if hasattr(outputs, "logits"):
        return outputs.logits
    if isinstance(outputs, (tuple, list)):
        return outputs[0]
    return outputs


def classifier_workload(
    ctx: BuildContext, module: nn.Module, *, input_size: tuple[int, int, int], num_classes: int
) -> Workload:
    """Images ``(B, C, H, W)``, labels ``(B,)``, SGD, cross-entropy on :func:`main_logits`."""
    channels, height, width = input_size
    images = ctx.randn(ctx.batch_size, channels, height, width)
    labels = ctx.randint(0, num_classes, (ctx.batch_size,))
    optimizer = ctx.optimizer(module.parameters(), "sgd", lr=1e-3) if ctx.train else None
    loss: Callable[[Any, Any], Any] = lambda out, target: nn.functional.cross_entropy(main_logits(out), target)
    return Workload(ctx, module, (images,), labels, loss_fn=loss, optimizer=optimizer)
