"""TorchBench's step for its torchvision classifiers: soft random targets, cross-entropy, Adam.

TorchBench's ``TorchVisionModel`` (``torchbenchmark/util/framework/vision/model_factory.py``)
feeds ``randn(B, 3, 224, 224)`` images. A training step first runs the model under
``no_grad`` and draws ``rand_like`` of its logits as (unnormalised, soft) targets, then runs it
again with grad, takes ``CrossEntropyLoss`` against those targets, back-propagates and steps
``torch.optim.Adam`` at its defaults (lr 1e-3). Eval is one forward. Written from that
description; no code copied.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.workload import BuildContext, Workload

__all__ = ["SoftTargetClassification", "torchvision_classification"]


class SoftTargetClassification(Workload):
    """Train: no-grad forward -> ``rand_like`` targets -> forward -> cross-entropy -> Adam step."""

    def train_step(self) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            with torch.no_grad():
                targets = torch.rand_like(self.forward())
            loss = F.cross_entropy(self.forward(), targets)
        self.backward_and_step(loss)
        return loss.detach()


def torchvision_classification(
    ctx: BuildContext, module: nn.Module, *, image_size: int | tuple[int, int] = 224
) -> Workload:
    """TorchBench's torchvision workload: ``randn(B, 3, H, W)`` images, the soft-target step above."""
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    images = ctx.randn(ctx.batch_size, 3, h, w)
    optimizer = torch.optim.Adam(module.parameters()) if ctx.train else None
    return SoftTargetClassification(ctx, module, (images,), optimizer=optimizer)
