"""Losses of the dense (one-stage) detectors: sigmoid focal loss and the GIoU box loss.

Definitions: Lin et al., "Focal Loss for Dense Object Detection" (2017), eq. 5 with the
alpha-balancing of sec. 3.2; Rezatofighi et al., "Generalized Intersection over Union" (2019).
They match ``torchvision.ops.sigmoid_focal_loss`` / ``generalized_box_iou_loss`` (BSD-3-Clause)
and fvcore's ``sigmoid_focal_loss`` / ``giou_loss`` used by Detectron2 (Apache-2.0).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from .boxes import generalized_box_iou

__all__ = ["giou_loss", "sigmoid_focal_loss"]

_REDUCTIONS = ("none", "sum", "mean")


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    if reduction == "none":
        return loss
    raise ValueError(f"unknown reduction {reduction!r}; accepted: {', '.join(_REDUCTIONS)}")


def sigmoid_focal_loss(
    logits: Tensor, targets: Tensor, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "none"
) -> Tensor:
    """Focal loss on independent per-class sigmoids.

    ``FL = -alpha_t * (1 - p_t) ** gamma * log(p_t)`` with ``p_t = p`` for target 1 and ``1 - p``
    for target 0, ``alpha_t = alpha`` / ``1 - alpha`` likewise; ``alpha < 0`` disables the
    balancing. ``targets`` has the shape of ``logits`` (one-hot rows; soft targets allowed).

    Example:
        >>> sigmoid_focal_loss(torch.zeros(1), torch.ones(1), alpha=-1, gamma=0.0)  # plain BCE
        tensor([0.6931])
    """
    probs = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = probs * targets + (1 - probs) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = loss * (alpha * targets + (1 - alpha) * (1 - targets))
    return _reduce(loss, reduction)


def giou_loss(boxes: Tensor, target_boxes: Tensor, reduction: str = "none") -> Tensor:
    """``1 - GIoU`` of matching rows of two ``(N, 4)`` xyxy box tensors, in [0, 2]."""
    return _reduce(1.0 - generalized_box_iou(boxes, target_boxes, pairwise=False), reduction)
