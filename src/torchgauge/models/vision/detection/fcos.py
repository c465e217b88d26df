"""FCOS: anchor-free one-stage detection with per-level scale ranges, center sampling and centerness.

Reference implementation: Detectron2's ``FCOS`` / ``FCOSHead`` and its COCO config
``fcos_R_50_FPN_1x`` (Apache-2.0, https://github.com/facebookresearch/detectron2,
``modeling/meta_arch/fcos.py``); torchvision's ``fcos_resnet50_fpn`` (BSD-3-Clause) has the
same layers. Paper: Tian et al., "FCOS: Fully Convolutional One-Stage Object Detection" (2019).

Every cell of P3..P7 is a point (Detectron2 represents it as a box of side ``stride`` centred
on the cell). Training assigns each point the smallest ground-truth box that contains it, lies
within ``1.5 * stride`` of the box centre (center sampling) and whose largest side distance
falls in the level's range; losses are focal (classes), GIoU (boxes) and BCE (centerness).
Evaluation scores ``sqrt(class prob * centerness)``, keeps per-level top-k, then batched NMS.
With random weights these scores start near ``sqrt(0.01 * 0.5)``, under the 0.2 test
threshold, so detections are empty, as in TorchBench's run (which loads no weights).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import DETECTRON2_FACTORY
from .backbones import FPN, SMOKE_BACKBONE_WIDTH, SMOKE_FPN_CHANNELS, ResNet
from .batch import BENCHMARK_SCORE_THRESH, DetectionWorkload, synthetic_detection_batch
from .boxes import AnchorGenerator, LinearBoxCoder, box_area, rescale_detections
from .dense_heads import DenseHead, dense_detections, one_hot_targets
from .detectron2_inputs import ResizedDetectionWorkload, mapped_sizes, original_sizes
from .losses import giou_loss, sigmoid_focal_loss

__all__ = ["FCOS", "FCOSConfig", "centerness_targets", "match_points"]

STRIDES = (8, 16, 32, 64, 128)
# Quality given to a (box, point) pair that passes every test: 1e8 minus the box area, so the
# smallest box wins among several (Detectron2's ``match_anchors``).
_MATCH_BASE = 1e8
# Test-time threshold on sqrt(class prob * centerness) (common/models/fcos.py test_score_thresh).
FCOS_TEST_SCORE_THRESH = 0.2


@dataclass(frozen=True)
class FCOSConfig:
    """One FCOS variant. Defaults: Detectron2's ``fcos_R_50_FPN_1x``."""

    num_classes: int = 80
    stride_in_1x1: bool = True  # MSRA ResNet (Detectron2)
    backbone_width: int = 64  # ResNet stem and res2 bottleneck channels (doubling per stage)
    fpn_channels: int = 256  # pyramid and head tower width
    head_convs: int = 4  # normalised 3x3 convs per tower
    head_norm: str = "gn"  # the config's GroupNorm; "bn": per-level BatchNorm (TorchBench's FCOS_USE_BN)
    center_sampling_radius: float = 1.5  # in strides
    # Point assigned on level l only if its largest side distance is in (4 * stride, 8 * stride]
    # (P3 from 0, P7 to infinity): the paper's ranges 0-64-128-256-512-inf.
    range_low: float = 4.0
    range_high: float = 8.0
    focal_alpha: float = 0.25
    focal_gamma: float = 2.0
    score_thresh: float = FCOS_TEST_SCORE_THRESH
    topk_candidates: int = 1000  # per level
    nms_thresh: float = 0.6
    detections_per_image: int = 100
    pixel_mean: tuple[float, float, float] = (103.53, 116.28, 123.675)  # BGR, MSRA models
    # Scaled like the R-CNN family (see rcnn_config.RCNNConfig.pixel_std): unit-variance inputs for
    # random weights instead of Detectron2's raw 0-255 caffe convention.
    pixel_std: tuple[float, float, float] = (57.375, 57.12, 58.395)


def match_points(
    anchors: Tensor,
    num_per_level: Sequence[int],
    gt_boxes: Tensor,
    radius: float = 1.5,
    range_low: float = 4.0,
    range_high: float = 8.0,
) -> Tensor:
    """FCOS target assignment: the index of the ground-truth box of each point, -1 for background.

    Args:
        anchors: ``(N, 4)`` square boxes of side ``stride`` centred on the points, levels
            concatenated finest first with ``num_per_level`` points each.
        gt_boxes: ``(G, 4)`` ground truth.
        radius: center sampling radius in strides.
        range_low, range_high: a point of stride ``s`` takes boxes whose largest centre-to-side
            distance is in ``(range_low * s, range_high * s)``; the finest level has no lower
            bound and the coarsest no upper bound.

    Returns:
        ``(N,)`` int64. Among several qualifying boxes the smallest (by area) wins.
    """
    num = anchors.shape[0]
    if gt_boxes.numel() == 0:
        return torch.full((num,), -1, dtype=torch.int64, device=anchors.device)
    centres = 0.5 * (anchors[:, :2] + anchors[:, 2:])  # (N, 2)
    strides = anchors[:, 2] - anchors[:, 0]  # (N,)
    gt_centres = 0.5 * (gt_boxes[:, :2] + gt_boxes[:, 2:])  # (G, 2)
    centre_dist = (centres[None] - gt_centres[:, None]).abs().amax(dim=2)  # (G, N)
    match = centre_dist < radius * strides[None]
    sides = torch.cat(
        (centres[None] - gt_boxes[:, None, :2], gt_boxes[:, None, 2:] - centres[None]), dim=2
    )  # (G, N, 4) ltrb
    match &= sides.amin(dim=2) > 0  # the point lies inside the box
    lower, upper = strides * range_low, strides * range_high
    lower[: num_per_level[0]] = 0
    upper[num - num_per_level[-1] :] = math.inf
    largest = sides.amax(dim=2)
    match &= (largest > lower[None]) & (largest < upper[None])
    quality = match.to(gt_boxes.dtype) * (_MATCH_BASE - box_area(gt_boxes)[:, None])
    best, matched = quality.max(dim=0)
    return torch.where(best > 1e-5, matched, torch.full_like(matched, -1))


def centerness_targets(anchors: Tensor, boxes: Tensor) -> Tensor:
    """``sqrt(min(l, r) / max(l, r) * min(t, b) / max(t, b))`` of each point in its box ``(N,)``."""
    centres = 0.5 * (anchors[:, :2] + anchors[:, 2:])
    left_top, right_bottom = centres - boxes[:, :2], boxes[:, 2:] - centres  # (N, 2) each
    ratio = torch.min(left_top, right_bottom) / torch.max(left_top, right_bottom)
    return (ratio[:, 0] * ratio[:, 1]).clamp(min=0).sqrt()


class FCOS(nn.Module):
    """ResNet-50 (res3..res5) -> FPN with P6/P7 -> GroupNorm towers with class, box and centerness outputs.

    ``forward(images, image_sizes, targets=None, output_sizes=None)``: in training
    ``{"loss_cls", "loss_box", "loss_ctr"}``; in evaluation per image ``boxes (N, 4)``,
    ``scores (N,)``, ``labels (N,)``, at ``output_sizes`` when given (Detectron2's
    ``detector_postprocess``).
    """

    def __init__(self, cfg: FCOSConfig):
        super().__init__()
        self.cfg = cfg
        levels = ("res3", "res4", "res5")
        self.backbone = ResNet(50, levels, stride_in_1x1=cfg.stride_in_1x1, width=cfg.backbone_width)
        # Detectron2's FCOS config builds P6 from P5 (top_block.in_feature = "p5", 256 channels).
        self.fpn = FPN([self.backbone.out_channels[name] for name in levels], cfg.fpn_channels, top_block="p6p7")
        self.anchor_generator = AnchorGenerator([[(float(s), float(s))] for s in STRIDES], STRIDES, offset=0.5)
        self.head = DenseHead(
            cfg.fpn_channels, 1, cfg.num_classes, cfg.head_convs, norm=cfg.head_norm, centerness=True, num_levels=5
        )
        self.box_coder = LinearBoxCoder(normalize_by_size=True)
        self.register_buffer("pixel_mean", torch.tensor(cfg.pixel_mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(cfg.pixel_std).view(1, 3, 1, 1), persistent=False)

    def forward(
        self,
        images: Tensor,
        image_sizes: Sequence[tuple[int, int]],
        targets: Sequence[dict[str, Tensor]] | None = None,
        output_sizes: Sequence[tuple[int, int]] | None = None,
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        features = self.backbone((images - self.pixel_mean) / self.pixel_std)
        pyramid = self.fpn(list(features.values()))  # P3..P7
        logits, deltas, centerness = self.head(pyramid)
        anchors = self.anchor_generator([p.shape[-2:] for p in pyramid])
        if self.training:
            num_per_level = [a.shape[0] for a in anchors]
            return self._losses(
                torch.cat(anchors),
                num_per_level,
                torch.cat(logits, 1),
                torch.cat(deltas, 1),
                torch.cat(centerness, 1),
                targets,
            )
        cfg = self.cfg
        scores = [torch.sqrt(cls.sigmoid() * ctr.sigmoid()[..., None]) for cls, ctr in zip(logits, centerness)]
        detections = dense_detections(
            scores,
            deltas,
            anchors,
            self.box_coder.decode,
            image_sizes,
            score_thresh=cfg.score_thresh,
            topk_candidates=cfg.topk_candidates,
            nms_thresh=cfg.nms_thresh,
            max_detections=cfg.detections_per_image,
        )
        if output_sizes is not None:
            rescale_detections(detections, image_sizes, output_sizes)
        return detections

    def _losses(
        self,
        anchors: Tensor,
        num_per_level: list[int],
        logits: Tensor,
        deltas: Tensor,
        centerness: Tensor,
        targets: Sequence[dict[str, Tensor]],
    ) -> dict[str, Tensor]:
        """Focal, GIoU and centerness losses, each summed and divided by the batch's foreground count.

        Detectron2 divides by an EMA of that count (momentum 0.9, a host sync per step); the
        plain count keeps the step free of ``.item()`` and differs only in smoothing.
        """
        cfg = self.cfg
        labels, matched_boxes = [], []
        for target in targets:
            gt_boxes = target["boxes"]
            matched = match_points(
                anchors, num_per_level, gt_boxes, cfg.center_sampling_radius, cfg.range_low, cfg.range_high
            )
            foreground = matched >= 0
            safe = matched.clamp(min=0)
            labels.append(torch.where(foreground, target["labels"][safe], -1) if len(gt_boxes) else matched)
            matched_boxes.append(gt_boxes[safe] if len(gt_boxes) else anchors)
        labels, matched_boxes = torch.stack(labels), torch.stack(matched_boxes)  # (B, N), (B, N, 4)
        foreground = labels >= 0
        normalizer = foreground.sum().clamp(min=1).to(logits.dtype)
        loss_cls = sigmoid_focal_loss(
            logits,
            one_hot_targets(labels, cfg.num_classes, logits.dtype),
            cfg.focal_alpha,
            cfg.focal_gamma,
            reduction="sum",
        )
        image_idx, point_idx = torch.nonzero(foreground, as_tuple=True)
        fg_anchors, fg_boxes = anchors[point_idx], matched_boxes[image_idx, point_idx]
        predicted = self.box_coder.decode(deltas[image_idx, point_idx], fg_anchors)
        loss_box = giou_loss(predicted, fg_boxes, reduction="sum")
        loss_ctr = F.binary_cross_entropy_with_logits(
            centerness[image_idx, point_idx], centerness_targets(fg_anchors, fg_boxes), reduction="sum"
        )
        return {"loss_cls": loss_cls / normalizer, "loss_box": loss_box / normalizer, "loss_ctr": loss_ctr / normalizer}


def _create_fcos(
    ctx: BuildContext, *, image_size: tuple[int, int] | None = None, max_boxes: int | None = None, **kwargs: Any
) -> Workload:
    """Build an FCOS workload; ``kwargs`` are :class:`FCOSConfig` fields.

    Images have the sizes of TorchBench's batches after Detectron2's mapper (``detectron2_inputs``)
    unless ``image_size`` is given; evaluation then reports detections at the original size.
    """
    smoke = {"backbone_width": SMOKE_BACKBONE_WIDTH, "fpn_channels": SMOKE_FPN_CHANNELS} if ctx.smoke else {}
    cfg = FCOSConfig(**{"score_thresh": BENCHMARK_SCORE_THRESH, **smoke, **kwargs})
    model = FCOS(cfg)
    source_size = None
    if image_size is None:
        image_size, source_size = mapped_sizes(ctx)
    images, image_sizes, targets = synthetic_detection_batch(
        ctx, image_size, cfg.num_classes, max_boxes or ctx.pick(20, 3)
    )
    optimizer = None
    if ctx.train:  # Detectron2's SGD; lr lowered as for the R-CNN family (random weights)
        optimizer = ctx.optimizer(
            [p for p in model.parameters() if p.requires_grad], "sgd", lr=0.001, weight_decay=1e-4
        )
    if source_size is None:
        return DetectionWorkload(ctx, model, (images, image_sizes), targets, optimizer=optimizer)
    inputs = (images, image_sizes, original_sizes(image_sizes, image_size, source_size))
    return ResizedDetectionWorkload(ctx, model, inputs, targets, optimizer=optimizer)


# torchvision publishes 32,269,600 for fcos_resnet50_fpn (same layers, 91 class logits); with
# Detectron2's 80 classes the class conv loses 11 * (256 * 9 + 1) = 25,355 parameters. The
# per-level BatchNorm has as many parameters as GroupNorm (one shared affine); Detectron2's
# own FCOS built as TorchBench builds it has the same 32,244,245.
@register_model(
    domain="vision",
    task="object_detection",
    source="Detectron2 fcos_R_50_FPN_1x (Tian et al., FCOS, 2019); = torchvision fcos_resnet50_fpn at 80 classes",
    batch_size=(1, 1),  # TorchBench detectron2 DEFAULT_TRAIN_BSIZE / DEFAULT_EVAL_BSIZE
    param_count=32_244_245,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_fcos_r_50_fpn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """FCOS ResNet-50-FPN (Detectron2 ``fcos_R_50_FPN_1x``) as TorchBench runs it.

    TorchBench sets ``model.head.norm = "BN"`` (``FCOS_USE_BN``, a workaround for an
    instantiation error), loads no weights (``model_file = None``) and keeps the config's 0.2
    score threshold: its random-weight scores sit near ``sqrt(0.01 * 0.5)``, so evaluation
    returns no detections, here too. TorchBench has no FCOS training (NotImplementedError);
    the train mode here is this network's own.
    """
    return _create_fcos(ctx, **{"head_norm": "bn", "score_thresh": FCOS_TEST_SCORE_THRESH, **kwargs})
