"""Box operations shared by every detector: IoU, box coding, NMS, anchors, matching, sampling.

Plain-PyTorch counterparts of ``torchvision.ops`` (BSD-3-Clause) and Detectron2's
``Box2BoxTransform`` / ``Matcher`` / ``subsample_labels`` / ``DefaultAnchorGenerator``
(Apache-2.0), written from the definitions in Ren et al., "Faster R-CNN" (2015) and
Lin et al., "Feature Pyramid Networks" (2017). Boxes are ``(N, 4)`` float tensors of
absolute ``(x1, y1, x2, y2)`` pixel coordinates.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "AnchorGenerator",
    "BoxCoder",
    "LinearBoxCoder",
    "Matcher",
    "anchor_shapes",
    "batched_nms",
    "box_area",
    "box_iou",
    "clip_boxes",
    "generalized_box_iou",
    "nms",
    "nonempty_boxes",
    "rescale_detections",
    "sample_labels",
]

# Deltas dw/dh are clamped to log(1000/16) before exp(), as in Detectron2 and torchvision,
# so that a wild prediction cannot produce a box more than ~60x its anchor.
DEFAULT_SCALE_CLAMP = math.log(1000.0 / 16)
# batched_nms offsets boxes per category up to this many boxes (one NMS); above it, it runs one
# NMS per category, each on fewer boxes (torchvision switches at 4000 on CPU).
BATCHED_NMS_SINGLE_MATRIX_MAX = 4000
# NMS resolves this many score-sorted boxes per vectorised step (see ``nms``).
NMS_BLOCK = 512


def box_area(boxes: Tensor) -> Tensor:
    """Areas ``(N,)`` of boxes ``(N, 4)``."""
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise IoU ``(N, M)``; pairs that do not overlap (or degenerate boxes) give 0."""
    top_left = torch.max(boxes1[:, None, :2], boxes2[None, :, :2])  # (N, M, 2)
    bottom_right = torch.min(boxes1[:, None, 2:], boxes2[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(dim=2)  # (N, M)
    union = box_area(boxes1)[:, None] + box_area(boxes2)[None, :] - inter
    return torch.where(inter > 0, inter / union, torch.zeros_like(inter))


def clip_boxes(boxes: Tensor, image_size: tuple[int, int]) -> Tensor:
    """Clip boxes ``(..., 4)`` to an image of ``(height, width)``."""
    height, width = image_size
    x = boxes[..., 0::2].clamp(min=0, max=width)
    y = boxes[..., 1::2].clamp(min=0, max=height)
    return torch.stack((x[..., 0], y[..., 0], x[..., 1], y[..., 1]), dim=-1)


def nonempty_boxes(boxes: Tensor, min_size: float = 0.0) -> Tensor:
    """Boolean ``(N,)``: width and height both larger than ``min_size``."""
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
    return (widths > min_size) & (heights > min_size)


class BoxCoder:
    """Faster R-CNN box parameterisation: deltas ``(dx, dy, dw, dh)`` of a box w.r.t. a reference.

    ``dx = wx * (cx - ref_cx) / ref_w``, ``dw = ww * log(w / ref_w)`` and the same for y/h.
    """

    def __init__(self, weights: Sequence[float] = (1.0, 1.0, 1.0, 1.0), scale_clamp: float = DEFAULT_SCALE_CLAMP):
        self.weights = tuple(float(w) for w in weights)
        self.scale_clamp = scale_clamp

    def encode(self, reference: Tensor, target: Tensor) -> Tensor:
        """Deltas ``(N, 4)`` that turn ``reference`` boxes into ``target`` boxes (both ``(N, 4)``)."""
        wx, wy, ww, wh = self.weights
        ref_w = reference[:, 2] - reference[:, 0]
        ref_h = reference[:, 3] - reference[:, 1]
        ref_cx = reference[:, 0] + 0.5 * ref_w
        ref_cy = reference[:, 1] + 0.5 * ref_h
        w = target[:, 2] - target[:, 0]
        h = target[:, 3] - target[:, 1]
        cx = target[:, 0] + 0.5 * w
        cy = target[:, 1] + 0.5 * h
        return torch.stack(
            (
                wx * (cx - ref_cx) / ref_w,
                wy * (cy - ref_cy) / ref_h,
                ww * torch.log(w / ref_w),
                wh * torch.log(h / ref_h),
            ),
            dim=1,
        )

    def decode(self, deltas: Tensor, reference: Tensor) -> Tensor:
        """Boxes ``(N, 4k)`` from deltas ``(N, 4k)`` (k boxes per reference, e.g. one per class)."""
        reference = reference.to(deltas.dtype)
        wx, wy, ww, wh = self.weights
        ref_w = (reference[:, 2] - reference[:, 0])[:, None]
        ref_h = (reference[:, 3] - reference[:, 1])[:, None]
        ref_cx = reference[:, 0, None] + 0.5 * ref_w
        ref_cy = reference[:, 1, None] + 0.5 * ref_h
        dx, dy = deltas[:, 0::4] / wx, deltas[:, 1::4] / wy
        dw = (deltas[:, 2::4] / ww).clamp(max=self.scale_clamp)
        dh = (deltas[:, 3::4] / wh).clamp(max=self.scale_clamp)
        cx, cy = dx * ref_w + ref_cx, dy * ref_h + ref_cy
        half_w, half_h = 0.5 * torch.exp(dw) * ref_w, 0.5 * torch.exp(dh) * ref_h
        boxes = torch.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h), dim=2)  # (N, k, 4)
        return boxes.reshape(deltas.shape)


def _overlaps_above(boxes1: Tensor, boxes2: Tensor, iou_threshold: float) -> Tensor:
    """Boolean ``(N, M)``: IoU > threshold, via ``inter > t * union`` (no division, few temporaries)."""
    inter_w = torch.min(boxes1[:, None, 2], boxes2[None, :, 2]) - torch.max(boxes1[:, None, 0], boxes2[None, :, 0])
    inter_h = torch.min(boxes1[:, None, 3], boxes2[None, :, 3]) - torch.max(boxes1[:, None, 1], boxes2[None, :, 1])
    inter = inter_w.clamp_(min=0).mul_(inter_h.clamp_(min=0))
    union = box_area(boxes1)[:, None] + box_area(boxes2)[None, :] - inter
    return inter > union.mul_(iou_threshold)


def _bit_rows(matrix: Tensor) -> list[int]:
    """Each row of a boolean ``(N, M)`` matrix as a Python int whose bit j is ``matrix[i, j]``.

    The rows are packed to bytes in one tensor expression and read back as one ``bytes``
    object, so Python handles N integers, not N * M booleans.
    """
    rows, cols = matrix.shape
    width = -(-cols // 8)  # bytes per row
    padded = F.pad(matrix.to(torch.uint8), (0, width * 8 - cols)).view(rows, width, 8)
    shifts = torch.arange(8, dtype=torch.uint8, device=matrix.device)
    packed = (padded << shifts).sum(dim=2, dtype=torch.uint8).cpu().contiguous()  # (N, width)
    buffer = ctypes.string_at(packed.data_ptr(), rows * width)
    return [int.from_bytes(buffer[i * width : (i + 1) * width], "little") for i in range(rows)]


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float, max_output: int | None = None) -> Tensor:
    """Greedy non-maximum suppression; indices of kept boxes, highest score first.

    torchvision's algorithm (its CUDA kernel): the overlap test runs as one vectorised
    matrix, and the greedy scan (a box survives iff no higher-scored survivor overlaps it by
    more than ``iou_threshold``) walks that matrix's rows as bit masks, one Python integer
    operation per box instead of a tensor operation per box or per round. Boxes go in
    score-sorted blocks of ``NMS_BLOCK``: a block is checked against all earlier survivors at
    once, then scanned, so ``max_output`` (keep only the top survivors, as every detector
    does) stops after the block that fills it.
    """
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=boxes.device)
    order = scores.argsort(descending=True)
    boxes = boxes[order]
    num = boxes.shape[0]
    max_output = num if max_output is None else max_output
    kept: list[int] = []
    survivors = boxes[:0]
    for start in range(0, num, NMS_BLOCK):
        block = boxes[start : start + NMS_BLOCK]
        dead = _overlaps_above(survivors, block, iou_threshold).any(dim=0)
        (removed,) = _bit_rows(dead[None])
        suppresses = _bit_rows(_overlaps_above(block, block, iou_threshold).triu_(diagonal=1))
        block_kept = []
        for j, row in enumerate(suppresses):
            if not (removed >> j) & 1:
                block_kept.append(j)
                removed |= row
        kept.extend(start + j for j in block_kept)
        survivors = torch.cat((survivors, block[block_kept]))
        if len(kept) >= max_output:
            break
    return order[torch.tensor(kept[:max_output], dtype=torch.int64, device=order.device)]


def batched_nms(
    boxes: Tensor, scores: Tensor, categories: Tensor, iou_threshold: float, max_output: int | None = None
) -> Tensor:
    """NMS within each category (class or pyramid level); indices kept, highest score first."""
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.int64, device=boxes.device)
    if boxes.shape[0] <= BATCHED_NMS_SINGLE_MATRIX_MAX:
        # Shift each category to its own region of the plane so that boxes of different
        # categories never overlap, then run a single NMS.
        offsets = categories.to(boxes) * (boxes.max() - boxes.min() + 1)
        return nms(boxes + offsets[:, None], scores, iou_threshold, max_output)
    keep_mask = torch.zeros_like(scores, dtype=torch.bool)
    for category in torch.unique(categories).tolist():
        members = torch.nonzero(categories == category).squeeze(1)
        keep_mask[members[nms(boxes[members], scores[members], iou_threshold, max_output)]] = True
    kept = torch.nonzero(keep_mask).squeeze(1)
    return kept[scores[kept].argsort(descending=True)][:max_output]


def anchor_shapes(
    sizes: Sequence[float], aspect_ratios: Sequence[float], round_to_int: bool = False
) -> list[tuple[float, float]]:
    """Anchor ``(width, height)`` per size and aspect ratio (height / width), area ``size**2``.

    Sizes vary slowest (Detectron2's order). ``round_to_int`` rounds the corners as
    torchvision's ``AnchorGenerator`` does.
    """
    shapes = []
    for size in sizes:
        for ratio in aspect_ratios:
            width = math.sqrt(size * size / ratio)
            height = width * ratio
            if round_to_int:
                width, height = 2 * round(width / 2), 2 * round(height / 2)
            shapes.append((float(width), float(height)))
    return shapes


class AnchorGenerator(nn.Module):
    """Anchors on every feature-map cell of every pyramid level.

    Args:
        shapes_per_level: anchor ``(width, height)`` list per level (A anchors per cell).
        strides: feature stride of each level in input pixels.
        offset: anchor centre within a cell, in strides (0.0: top-left corner, 0.5: centre).

    ``forward`` returns, per level, anchors ``(H * W * A, 4)`` ordered (y, x, anchor), the
    order in which heads flatten their ``(B, A * k, H, W)`` outputs.
    """

    def __init__(
        self, shapes_per_level: Sequence[Sequence[tuple[float, float]]], strides: Sequence[int], offset: float = 0.0
    ):
        super().__init__()
        if len(shapes_per_level) != len(strides):
            raise ValueError(f"{len(shapes_per_level)} anchor shape lists for {len(strides)} strides")
        self.strides = tuple(int(s) for s in strides)
        self.offset = offset
        self.num_anchors = tuple(len(shapes) for shapes in shapes_per_level)
        for level, shapes in enumerate(shapes_per_level):
            wh = torch.tensor(shapes, dtype=torch.float32)
            cell = torch.cat((-0.5 * wh, 0.5 * wh), dim=1)  # (A, 4) centred on the origin
            self.register_buffer(f"cell_anchors_{level}", cell, persistent=False)

    def forward(self, feature_sizes: Sequence[tuple[int, int]]) -> list[Tensor]:
        anchors = []
        for level, ((height, width), stride) in enumerate(zip(feature_sizes, self.strides)):
            cell = getattr(self, f"cell_anchors_{level}")
            xs = (torch.arange(width, device=cell.device, dtype=torch.float32) + self.offset) * stride
            ys = (torch.arange(height, device=cell.device, dtype=torch.float32) + self.offset) * stride
            grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
            centres = torch.stack((grid_x, grid_y, grid_x, grid_y), dim=-1).reshape(-1, 1, 4)  # (H*W, 1, 4)
            anchors.append((centres + cell[None]).reshape(-1, 4))
        return anchors


class Matcher:
    """Assign each prediction (anchor/proposal) the ground-truth box it overlaps most.

    Labels: 1 foreground (IoU >= ``high``), 0 background (IoU < ``low``), -1 ignored in
    between. ``allow_low_quality_matches`` also makes foreground, for each ground-truth box,
    the predictions tied for its highest IoU (so every box gets at least one match).
    """

    def __init__(self, low: float, high: float, allow_low_quality_matches: bool = False):
        if low > high:
            raise ValueError(f"low threshold {low} above high threshold {high}")
        self.low, self.high = low, high
        self.allow_low_quality_matches = allow_low_quality_matches

    def __call__(self, quality: Tensor) -> tuple[Tensor, Tensor]:
        """``quality`` is ``(G, N)`` (e.g. IoU of G boxes with N predictions).

        Returns ``matched_idx (N,)`` int64 and ``labels (N,)`` int8.
        """
        num_gt, num_pred = quality.shape
        if num_gt == 0:
            zeros = torch.zeros(num_pred, dtype=torch.int64, device=quality.device)
            return zeros, zeros.to(torch.int8)
        best, matched_idx = quality.max(dim=0)
        labels = torch.ones(num_pred, dtype=torch.int8, device=quality.device)
        labels[best < self.high] = -1
        labels[best < self.low] = 0
        if self.allow_low_quality_matches:
            best_per_gt = quality.max(dim=1, keepdim=True).values
            labels[(quality == best_per_gt).any(dim=0)] = 1
        return matched_idx, labels


def sample_labels(labels: Tensor, num_samples: int, positive_fraction: float, background: int) -> tuple[Tensor, Tensor]:
    """Random balanced subset of foreground and background indices (Detectron2's ``subsample_labels``).

    ``labels`` holds class ids, ``background`` for background and -1 for ignored entries. At
    most ``num_samples * positive_fraction`` foreground indices are drawn; background fills the
    rest. Draws use the global torch RNG (seeded by the workload).
    """
    positive = torch.nonzero((labels != -1) & (labels != background)).squeeze(1)
    negative = torch.nonzero(labels == background).squeeze(1)
    num_pos = min(positive.numel(), int(num_samples * positive_fraction))
    num_neg = min(negative.numel(), num_samples - num_pos)
    positive = positive[torch.randperm(positive.numel(), device=labels.device)[:num_pos]]
    negative = negative[torch.randperm(negative.numel(), device=labels.device)[:num_neg]]
    return positive, negative


# -- appended for the one-stage detectors (RetinaNet, FCOS, EfficientDet) ------------------------
def generalized_box_iou(boxes1: Tensor, boxes2: Tensor, pairwise: bool = True) -> Tensor:
    """Generalized IoU (Rezatofighi et al., 2019): ``IoU - (hull - union) / hull``, in [-1, 1].

    ``hull`` is the area of the smallest box enclosing both. ``pairwise=True`` gives ``(N, M)``
    for every pair; ``pairwise=False`` gives ``(N,)`` for matching rows of two ``(N, 4)`` inputs
    (what a box loss needs). Boxes must be non-degenerate (positive area).
    """
    if pairwise:
        boxes1, boxes2 = boxes1[:, None, :], boxes2[None, :, :]  # broadcast to (N, M, 4)
    elif boxes1.shape != boxes2.shape:
        raise ValueError(f"paired GIoU needs equal shapes, got {tuple(boxes1.shape)} and {tuple(boxes2.shape)}")
    area1 = (boxes1[..., 2] - boxes1[..., 0]) * (boxes1[..., 3] - boxes1[..., 1])
    area2 = (boxes2[..., 2] - boxes2[..., 0]) * (boxes2[..., 3] - boxes2[..., 1])
    inter_wh = (torch.min(boxes1[..., 2:], boxes2[..., 2:]) - torch.max(boxes1[..., :2], boxes2[..., :2])).clamp(min=0)
    inter = inter_wh[..., 0] * inter_wh[..., 1]
    union = area1 + area2 - inter
    hull_wh = torch.max(boxes1[..., 2:], boxes2[..., 2:]) - torch.min(boxes1[..., :2], boxes2[..., :2])
    hull = hull_wh[..., 0] * hull_wh[..., 1]
    return inter / union - (hull - union) / hull


class LinearBoxCoder:
    """FCOS box parameterisation: distances ``(l, t, r, b)`` from a reference point to the box sides.

    The point is the centre of a reference box (an "anchor" of side ``stride``); with
    ``normalize_by_size`` the distances are in units of that side (Detectron2's
    ``Box2BoxTransformLinear(normalize_by_size=True)``). Decoding applies ReLU, so a box
    never has negative extent.
    """

    def __init__(self, normalize_by_size: bool = True):
        self.normalize_by_size = normalize_by_size

    def _centres_and_sizes(self, reference: Tensor) -> tuple[Tensor, Tensor]:
        centres = 0.5 * (reference[:, :2] + reference[:, 2:])  # (N, 2)
        sizes = (reference[:, 2:] - reference[:, :2]) if self.normalize_by_size else torch.ones_like(centres)
        return centres, sizes

    def encode(self, reference: Tensor, target: Tensor) -> Tensor:
        """Distances ``(N, 4)`` from the centres of ``reference`` to the sides of ``target`` (both ``(N, 4)``)."""
        centres, sizes = self._centres_and_sizes(reference)
        return torch.cat((centres - target[:, :2], target[:, 2:] - centres), dim=1) / sizes.repeat(1, 2)

    def decode(self, deltas: Tensor, reference: Tensor) -> Tensor:
        """Boxes ``(N, 4)`` from distances ``(N, 4)`` around the centres of ``reference``."""
        centres, sizes = self._centres_and_sizes(reference.to(deltas.dtype))
        distances = F.relu(deltas) * sizes.repeat(1, 2)
        return torch.cat((centres - distances[:, :2], centres + distances[:, 2:]), dim=1)


def rescale_detections(
    detections: list[dict[str, Tensor]],
    image_sizes: Sequence[tuple[int, int]],
    output_sizes: Sequence[tuple[int, int]],
) -> list[Tensor]:
    """Detections from input to output image size: boxes scaled, clipped, empty ones dropped.

    Detectron2's ``detector_postprocess``. Updates ``boxes``, ``scores`` and ``labels`` of each
    dict in place and returns, per image, the indices of the detections kept.
    """
    kept = []
    for detection, (in_h, in_w), (out_h, out_w) in zip(detections, image_sizes, output_sizes):
        scale = detection["boxes"].new_tensor([out_w / in_w, out_h / in_h, out_w / in_w, out_h / in_h])
        boxes = clip_boxes(detection["boxes"] * scale, (out_h, out_w))
        keep = torch.nonzero(nonempty_boxes(boxes)).squeeze(1)
        detection.update(boxes=boxes[keep], scores=detection["scores"][keep], labels=detection["labels"][keep])
        kept.append(keep)
    return kept
