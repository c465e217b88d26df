"""Synthetic detection batches (images, boxes, labels, masks) and the workload that runs a detector.

A batch mimics what Detectron2's ``ImageList`` / torchvision's ``GeneralizedRCNNTransform``
hand to a model after resizing: images of slightly different widths (COCO's varied aspect
ratios) zero-padded into one ``(B, 3, H, W)`` tensor whose sides are multiples of the model's
size divisibility, the true size of each image, and per-image ground truth with a variable
number of boxes. Everything is drawn from the build context's seeded generator on the device.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ....workload import BuildContext, Workload

__all__ = ["BENCHMARK_SCORE_THRESH", "DetectionWorkload", "random_boxes", "synthetic_detection_batch"]

# Test-time score threshold the registered detectors use at every size. With random weights
# every class score sits under the reference thresholds (0.05 for R-CNN and RetinaNet, 0.2 for
# FCOS), which would leave box decoding, NMS and mask pasting out of the timed eval step; at 0
# the per-image detection cap (100 or 300) bounds the work, as a trained model's detections do.
# The configs keep the reference value; pass ``score_thresh`` to override.
BENCHMARK_SCORE_THRESH = 0.0

# Boxes are drawn with sides log-uniform between MIN_BOX_SIDE pixels and this fraction of the
# image's shorter side: COCO has many small objects and a few large ones.
MIN_BOX_SIDE = 8.0
MAX_BOX_FRACTION = 0.6
# Width of the narrowest image in a batch relative to the widest (aspect-ratio variation).
MIN_WIDTH_FRACTION = 0.75


def random_boxes(ctx: BuildContext, count: int, image_size: tuple[int, int], min_side: float = MIN_BOX_SIDE) -> Tensor:
    """``count`` boxes ``(count, 4)`` xyxy lying inside an image of ``(height, width)``."""
    height, width = image_size
    max_side = max(min_side + 1.0, MAX_BOX_FRACTION * min(height, width))
    u = ctx.rand(count, 4)
    sides = torch.exp(math.log(min_side) + u[:, :2] * (math.log(max_side) - math.log(min_side)))  # (w, h)
    x1 = u[:, 2] * (width - sides[:, 0])
    y1 = u[:, 3] * (height - sides[:, 1])
    return torch.stack((x1, y1, x1 + sides[:, 0], y1 + sides[:, 1]), dim=1)


def _ellipse_masks(boxes: Tensor, height: int, width: int) -> Tensor:
    """Instance masks ``(N, H, W)`` uint8: the ellipse inscribed in each box."""
    ys = torch.arange(height, device=boxes.device, dtype=boxes.dtype) + 0.5
    xs = torch.arange(width, device=boxes.device, dtype=boxes.dtype) + 0.5
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    rx, ry = (boxes[:, 2] - boxes[:, 0]) / 2, (boxes[:, 3] - boxes[:, 1]) / 2
    dy = ((ys[None] - cy[:, None]) / ry[:, None]) ** 2  # (N, H)
    dx = ((xs[None] - cx[:, None]) / rx[:, None]) ** 2  # (N, W)
    return (dy[:, :, None] + dx[:, None, :] <= 1.0).to(torch.uint8)


def synthetic_detection_batch(
    ctx: BuildContext,
    image_size: tuple[int, int],
    num_classes: int,
    max_boxes: int,
    size_divisibility: int = 32,
    first_label: int = 0,
    with_masks: bool = False,
    vary_width: bool = True,
) -> tuple[Tensor, list[tuple[int, int]], list[dict[str, Tensor]]]:
    """Images, their sizes and ground truth for one batch of ``ctx.batch_size`` images.

    Args:
        image_size: ``(height, width)`` of the largest image (e.g. 800 x 1333 after resizing).
        num_classes: labels are drawn from ``[first_label, first_label + num_classes)``.
        max_boxes: each image gets between 1 and ``max_boxes`` objects.
        size_divisibility: padded sides are multiples of this (32 for FPN, 128 for BiFPN).
        with_masks: add ``"masks"`` ``(N, H_pad, W_pad)`` uint8 instance masks.
        vary_width: narrow images after the first by up to ``MIN_WIDTH_FRACTION``.

    Returns:
        ``images (B, 3, H_pad, W_pad)`` with pixel values in [0, 255) and zero padding,
        ``image_sizes`` (one ``(h, w)`` per image) and ``targets``: per image a dict of
        ``boxes (N, 4)`` xyxy float, ``labels (N,)`` int64 and optionally ``masks``.
    """
    height, width = image_size
    batch = ctx.batch_size
    fractions = ctx.rand(batch).tolist()
    image_sizes = [
        (
            height,
            width if i == 0 or not vary_width else int(width * (MIN_WIDTH_FRACTION + (1 - MIN_WIDTH_FRACTION) * f)),
        )
        for i, f in enumerate(fractions)
    ]
    divisor = max(size_divisibility, 1)
    pad_h, pad_w = math.ceil(height / divisor) * divisor, math.ceil(width / divisor) * divisor
    images = ctx.rand(batch, 3, pad_h, pad_w) * 255.0
    columns = torch.arange(pad_w, device=ctx.device)
    rows = torch.arange(pad_h, device=ctx.device)
    for i, (h, w) in enumerate(image_sizes):  # zero the padding, as ImageList.from_tensors does
        images[i] *= ((rows[:, None] < h) & (columns[None, :] < w)).to(images.dtype)
    counts = ctx.randint(1, max_boxes + 1, (batch,)).tolist()
    targets = []
    for count, size in zip(counts, image_sizes):
        boxes = random_boxes(ctx, count, size)
        target = {"boxes": boxes, "labels": ctx.randint(first_label, first_label + num_classes, (count,))}
        if with_masks:
            target["masks"] = _ellipse_masks(boxes, pad_h, pad_w)
        targets.append(target)
    return images, image_sizes, targets


class DetectionWorkload(Workload):
    """A detector on a synthetic batch: ``module(images, image_sizes, targets)``.

    In training the module returns a dict of losses, summed here; in evaluation it returns
    the detections (see the package docstring for their format). Targets stay out of eval.
    """

    def forward(self) -> Any:
        images, image_sizes = self.inputs
        if self.module.training:
            return self.module(images, image_sizes, self.targets)
        return self.module(images, image_sizes)

    def compute_loss(self, outputs: dict[str, Tensor]) -> Tensor:
        return sum(outputs.values())
