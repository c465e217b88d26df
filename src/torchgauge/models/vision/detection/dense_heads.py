"""Pieces shared by the dense (one-stage) detectors: the RetinaNet-style head and post-processing.

The head follows Lin et al., "Focal Loss for Dense Object Detection" (2017), fig. 3: two
towers of 3x3 convs shared over pyramid levels, one for classification and one for boxes
(Detectron2's ``RetinaNetHead``, torchvision's ``RetinaNetHead``; FCOS adds GroupNorm and a
centerness branch on the box tower, Tian et al., "FCOS", 2019). Post-processing is the
per-level top-k + batched NMS of torchvision's ``RetinaNet.postprocess_detections`` and
Detectron2's ``DenseDetector._decode_multi_level_predictions`` (BSD-3-Clause / Apache-2.0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .boxes import Matcher, batched_nms, box_iou, clip_boxes

__all__ = [
    "PRIOR_PROB",
    "DenseHead",
    "LevelBatchNorm",
    "Tower",
    "dense_detections",
    "flatten_level",
    "match_anchors",
    "one_hot_targets",
    "prior_bias",
]

# Initial foreground probability of every class logit (Focal Loss paper, sec. 4.1): keeps the
# ~100k background anchors from swamping the loss in the first iterations.
PRIOR_PROB = 0.01
# GroupNorm groups of the FCOS towers (Detectron2's "GN" norm).
GN_GROUPS = 32


def prior_bias(prior_prob: float = PRIOR_PROB) -> float:
    """Logit bias giving a sigmoid output of ``prior_prob``: ``-log((1 - p) / p)``."""
    return -math.log((1 - prior_prob) / prior_prob)


def flatten_level(x: Tensor, k: int) -> Tensor:
    """Head output ``(B, A * k, H, W)`` -> ``(B, H * W * A, k)``, the anchors' (y, x, anchor) order."""
    batch, _, height, width = x.shape
    return x.view(batch, -1, k, height, width).permute(0, 3, 4, 1, 2).reshape(batch, -1, k)


class LevelBatchNorm(nn.Module):
    """BatchNorm with running statistics per pyramid level and one affine shared by all levels.

    Detectron2's ``CycleBatchNormList`` (what ``norm="BN"`` builds in ``RetinaNetHead`` and
    ``FCOSHead``): a tower shared over levels sees differently distributed features on each,
    so each level keeps its own statistics (Wu & Johnson, "Rethinking Batch in BatchNorm",
    2021, sec. 5.2). Detectron2 cycles through the levels call by call; here the level is named.
    """

    def __init__(self, channels: int, num_levels: int):
        super().__init__()
        self.norms = nn.ModuleList(nn.BatchNorm2d(channels, affine=False) for _ in range(num_levels))
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor, level: int) -> Tensor:
        return self.norms[level](x) * self.weight.view(1, -1, 1, 1) + self.bias.view(1, -1, 1, 1)


class Tower(nn.Module):
    """``num_convs`` x (3x3 conv, optional norm, ReLU), applied to one pyramid level at a time."""

    def __init__(self, channels: int, num_convs: int, norm: str | None, num_levels: int):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(channels, channels, 3, padding=1) for _ in range(num_convs))
        self.norm = norm
        if norm == "gn":
            self.norms = nn.ModuleList(nn.GroupNorm(GN_GROUPS, channels) for _ in range(num_convs))
        elif norm == "bn":
            self.norms = nn.ModuleList(LevelBatchNorm(channels, num_levels) for _ in range(num_convs))

    def forward(self, x: Tensor, level: int) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if self.norm == "gn":
                x = self.norms[i](x)
            elif self.norm == "bn":
                x = self.norms[i](x, level)
            x = F.relu(x)
        return x


class DenseHead(nn.Module):
    """Classification and box towers shared over all pyramid levels.

    Args:
        channels: pyramid width (256).
        num_anchors: anchors per cell (9 for RetinaNet, 1 for FCOS).
        num_classes: sigmoid logits per anchor (no background logit).
        num_convs: 3x3 convs per tower (4).
        norm: ``None`` (RetinaNet), ``"gn"`` (FCOS) or ``"bn"`` (:class:`LevelBatchNorm`).
        centerness: add FCOS's centerness logit, computed from the box tower.
        num_levels: pyramid levels the head serves (statistics kept per level with ``"bn"``).

    ``forward(features)`` returns per level ``logits (B, N_l, C)``, ``deltas (B, N_l, 4)`` and
    ``centerness (B, N_l)`` (or ``None``), with ``N_l = H_l * W_l * A``.
    """

    def __init__(
        self,
        channels: int,
        num_anchors: int,
        num_classes: int,
        num_convs: int = 4,
        norm: str | None = None,
        centerness: bool = False,
        num_levels: int = 5,
    ):
        super().__init__()
        if norm not in (None, "gn", "bn"):
            raise ValueError(f"unknown head norm {norm!r}; accepted: None, 'gn', 'bn'")
        self.num_classes = num_classes
        self.cls_tower = Tower(channels, num_convs, norm, num_levels)
        self.box_tower = Tower(channels, num_convs, norm, num_levels)
        self.cls_logits = nn.Conv2d(channels, num_anchors * num_classes, 3, padding=1)
        self.box_deltas = nn.Conv2d(channels, num_anchors * 4, 3, padding=1)
        self.centerness = nn.Conv2d(channels, num_anchors, 3, padding=1) if centerness else None
        for module in self.modules():
            if isinstance(module, nn.Conv2d):  # Detectron2 / torchvision: N(0, 0.01), zero bias
                nn.init.normal_(module.weight, std=0.01)
                nn.init.zeros_(module.bias)
        nn.init.constant_(self.cls_logits.bias, prior_bias())

    def forward(self, features: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor], list[Tensor] | None]:
        logits, deltas, centerness = [], [], []
        for level, feature in enumerate(features):
            box_hidden = self.box_tower(feature, level)
            logits.append(flatten_level(self.cls_logits(self.cls_tower(feature, level)), self.num_classes))
            deltas.append(flatten_level(self.box_deltas(box_hidden), 4))
            if self.centerness is not None:
                centerness.append(flatten_level(self.centerness(box_hidden), 1).squeeze(2))
        return logits, deltas, (centerness if self.centerness is not None else None)


def dense_detections(
    scores: Sequence[Tensor],
    deltas: Sequence[Tensor],
    anchors: Sequence[Tensor],
    decode: Callable[[Tensor, Tensor], Tensor],
    image_sizes: Sequence[tuple[int, int]],
    *,
    score_thresh: float,
    topk_candidates: int,
    nms_thresh: float,
    max_detections: int,
    label_offset: int = 0,
) -> list[dict[str, Tensor]]:
    """Final detections of a dense detector, one dict per image (format: package docstring).

    Per image and level: keep the best ``topk_candidates`` (anchor, class) pairs scoring above
    ``score_thresh``, decode their boxes and clip them to the image; then NMS per
    class over all levels and keep the best ``max_detections``.

    Args:
        scores: per level ``(B, N_l, C)`` class probabilities.
        deltas: per level ``(B, N_l, 4)`` box regression outputs.
        anchors: per level ``(N_l, 4)`` reference boxes.
        decode: ``decode(deltas (k, 4), anchors (k, 4)) -> boxes (k, 4)``.
        image_sizes: ``(height, width)`` of each image, for clipping.
        label_offset: added to the class index (1 when class ids start at 1).
    """
    results = []
    for image, size in enumerate(image_sizes):
        image_boxes, image_scores, image_labels = [], [], []
        for level_scores, level_deltas, level_anchors in zip(scores, deltas, anchors):
            flat = level_scores[image].flatten()  # (N_l * C,), index = anchor * C + class
            # Top-k first, then the threshold: the same set as thresholding first (torchvision,
            # Detectron2) without materialising every index above a low threshold (~14M on P3).
            top_scores, candidates = flat.topk(min(topk_candidates, flat.numel()))
            above = top_scores > score_thresh
            top_scores, candidates = top_scores[above], candidates[above]
            anchor_idx = torch.div(candidates, level_scores.shape[2], rounding_mode="floor")
            boxes = decode(level_deltas[image][anchor_idx], level_anchors[anchor_idx])
            image_boxes.append(clip_boxes(boxes, size))
            image_scores.append(top_scores)
            image_labels.append(candidates % level_scores.shape[2])
        boxes, scores_, labels = torch.cat(image_boxes), torch.cat(image_scores), torch.cat(image_labels)
        keep = batched_nms(boxes, scores_, labels, nms_thresh, max_detections)
        results.append({"boxes": boxes[keep], "scores": scores_[keep], "labels": labels[keep] + label_offset})
    return results


def one_hot_targets(labels: Tensor, num_classes: int, dtype: torch.dtype) -> Tensor:
    """``(..., C)`` targets from class ids ``(...)`` where negative ids mean background (all zero)."""
    return F.one_hot(labels.clamp(min=0), num_classes).to(dtype) * (labels >= 0).unsqueeze(-1).to(dtype)


def match_anchors(
    matcher: Matcher, anchors: Tensor, targets: Sequence[dict[str, Tensor]]
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-anchor training targets of a batch from IoU matching against each image's boxes.

    Returns:
        ``labels (B, N)``: the matched box's class where the matcher says foreground, else -1;
        ``matched_boxes (B, N, 4)``: the matched box (the anchor itself for an image without boxes);
        ``match_labels (B, N)``: the matcher's verdicts, 1 foreground, 0 background, -1 ignored.
    """
    labels, matched_boxes, match_labels = [], [], []
    for target in targets:
        gt_boxes = target["boxes"]
        matched, verdict = matcher(box_iou(gt_boxes, anchors))  # (N,), (N,)
        if len(gt_boxes):
            labels.append(torch.where(verdict == 1, target["labels"][matched], -1))
            matched_boxes.append(gt_boxes[matched])
        else:
            labels.append(torch.full_like(matched, -1))
            matched_boxes.append(anchors)
        match_labels.append(verdict)
    return torch.stack(labels), torch.stack(matched_boxes), torch.stack(match_labels)
