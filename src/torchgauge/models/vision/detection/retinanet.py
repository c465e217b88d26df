"""RetinaNet: ResNet-50-FPN, P3-P7 anchors, focal-loss classification (the MLPerf single-stage detector).

Reference implementation: torchvision's ``retinanet_resnet50_fpn`` (BSD-3-Clause,
https://github.com/pytorch/vision, ``models/detection/retinanet.py``), the code base of the
MLPerf Training single-stage-detector reference (which swaps in a ResNeXt-50-32x4d backbone
and OpenImages' 264 classes at 800x800). Detectron2's ``RetinaNet`` (Apache-2.0) differs in
choices exposed by :class:`RetinaNetConfig` (box loss, anchor rounding, ResNet stride layout,
class count) and in building P6 from C5 instead of P5 (+4.1M parameters), not modelled here.
Paper: Lin et al., "Focal Loss for Dense Object Detection" (2017).

Training matches anchors to synthetic ground truth (IoU >= 0.5 foreground, < 0.4 background,
plus each box's best anchors) and returns ``loss_cls`` (focal) and ``loss_box``; evaluation
decodes the per-level top-k candidates and runs batched NMS to final detections. With random
weights every class probability starts at ``PRIOR_PROB`` (0.01), under the 0.05 test
threshold, so the registered model uses ``BENCHMARK_SCORE_THRESH`` (0) to keep the whole
post-processing in the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ....registry import register_model
from ....workload import BuildContext, Workload
from .backbones import FPN, SMOKE_BACKBONE_WIDTH, SMOKE_FPN_CHANNELS, ResNet
from .batch import BENCHMARK_SCORE_THRESH, DetectionWorkload, synthetic_detection_batch
from .boxes import AnchorGenerator, BoxCoder, Matcher, anchor_shapes
from .dense_heads import DenseHead, dense_detections, match_anchors, one_hot_targets
from .losses import giou_loss, sigmoid_focal_loss

__all__ = ["RetinaNet", "RetinaNetConfig"]

BOX_LOSSES = ("l1", "smooth_l1", "giou")


@dataclass(frozen=True)
class RetinaNetConfig:
    """One RetinaNet variant. Defaults: torchvision's ``retinanet_resnet50_fpn`` (MLPerf reference)."""

    num_classes: int = 91  # torchvision's COCO layout: ids 1..90 used, logit 0 never a target
    stride_in_1x1: bool = False  # torchvision ResNet (stride in the 3x3); Detectron2: True
    backbone_width: int = 64  # ResNet stem and res2 bottleneck channels (doubling per stage)
    fpn_channels: int = 256  # pyramid and head tower width
    anchor_sizes: tuple[float, ...] = (32, 64, 128, 256, 512)  # base size on P3..P7
    scales_per_octave: int = 3  # sizes x * 2**(i/3): 3 scales x 3 ratios = 9 anchors per cell
    anchor_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    round_anchors: bool = True  # torchvision rounds anchor corners to integers
    head_convs: int = 4
    fg_iou: float = 0.5
    bg_iou: float = 0.4
    focal_alpha: float = 0.25
    focal_gamma: float = 2.0
    box_loss: str = "l1"  # torchvision/MLPerf "l1"; Detectron2 "smooth_l1" (beta 0.1); or "giou"
    smooth_l1_beta: float = 0.1
    score_thresh: float = 0.05
    topk_candidates: int = 1000  # per level, before NMS
    nms_thresh: float = 0.5
    detections_per_image: int = 300  # torchvision's detections_per_img (Detectron2: 100)
    pixel_mean: tuple[float, float, float] = (123.675, 116.28, 103.53)  # ImageNet RGB, 0-255 pixels
    pixel_std: tuple[float, float, float] = (58.395, 57.12, 57.375)

    def level_anchor_sizes(self) -> list[list[float]]:
        """Anchor sizes per level; torchvision truncates the intermediate octave sizes to ints."""
        return [
            [float(int(size * 2 ** (i / self.scales_per_octave))) for i in range(self.scales_per_octave)]
            for size in self.anchor_sizes
        ]


class RetinaNet(nn.Module):
    """ResNet-50 (res3..res5) -> FPN with P6/P7 -> shared class/box towers over P3..P7.

    ``forward(images, image_sizes, targets=None)``: in training ``{"loss_cls", "loss_box"}``;
    in evaluation per image ``boxes (N, 4)``, ``scores (N,)``, ``labels (N,)``.
    """

    def __init__(self, cfg: RetinaNetConfig):
        super().__init__()
        if cfg.box_loss not in BOX_LOSSES:
            raise ValueError(f"unknown box_loss {cfg.box_loss!r}; accepted: {', '.join(BOX_LOSSES)}")
        self.cfg = cfg
        levels = ("res3", "res4", "res5")
        self.backbone = ResNet(50, levels, stride_in_1x1=cfg.stride_in_1x1, width=cfg.backbone_width)
        # P6 = conv(P5), P7 = conv(relu(P6)): torchvision's LastLevelP6P7(256, 256).
        self.fpn = FPN([self.backbone.out_channels[name] for name in levels], cfg.fpn_channels, top_block="p6p7")
        shapes = [anchor_shapes(sizes, cfg.anchor_ratios, cfg.round_anchors) for sizes in cfg.level_anchor_sizes()]
        self.anchor_generator = AnchorGenerator(shapes, strides=(8, 16, 32, 64, 128))
        self.head = DenseHead(cfg.fpn_channels, len(shapes[0]), cfg.num_classes, cfg.head_convs)
        self.box_coder = BoxCoder()
        self.matcher = Matcher(cfg.bg_iou, cfg.fg_iou, allow_low_quality_matches=True)
        self.register_buffer("pixel_mean", torch.tensor(cfg.pixel_mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(cfg.pixel_std).view(1, 3, 1, 1), persistent=False)

    def forward(
        self, images: Tensor, image_sizes: Sequence[tuple[int, int]], targets: Sequence[dict[str, Tensor]] | None = None
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        features = self.backbone((images - self.pixel_mean) / self.pixel_std)
        pyramid = self.fpn(list(features.values()))  # P3..P7, strides 8..128
        logits, deltas, _ = self.head(pyramid)
        anchors = self.anchor_generator([p.shape[-2:] for p in pyramid])
        if self.training:
            return self._losses(torch.cat(anchors), torch.cat(logits, 1), torch.cat(deltas, 1), targets)
        cfg = self.cfg
        return dense_detections(
            [level.sigmoid() for level in logits],
            deltas,
            anchors,
            self.box_coder.decode,
            image_sizes,
            score_thresh=cfg.score_thresh,
            topk_candidates=cfg.topk_candidates,
            nms_thresh=cfg.nms_thresh,
            max_detections=cfg.detections_per_image,
        )

    def _losses(
        self, anchors: Tensor, logits: Tensor, deltas: Tensor, targets: Sequence[dict[str, Tensor]]
    ) -> dict[str, Tensor]:
        """Focal and box losses, each normalised per image by its foreground count, then averaged."""
        cfg = self.cfg
        labels, matched_boxes, match_labels = match_anchors(self.matcher, anchors, targets)  # (B, N), (B, N, 4), (B, N)
        valid = match_labels >= 0  # anchors between the IoU thresholds are ignored
        foreground = labels >= 0
        num_fg = foreground.sum(1).clamp(min=1).to(logits.dtype)  # (B,)
        focal = sigmoid_focal_loss(
            logits, one_hot_targets(labels, cfg.num_classes, logits.dtype), cfg.focal_alpha, cfg.focal_gamma
        )
        loss_cls = ((focal.sum(2) * valid).sum(1) / num_fg).mean()

        image_idx, anchor_idx = torch.nonzero(foreground, as_tuple=True)
        fg_deltas, fg_anchors, fg_boxes = (
            deltas[image_idx, anchor_idx],
            anchors[anchor_idx],
            matched_boxes[image_idx, anchor_idx],
        )
        if cfg.box_loss == "giou":
            per_box = giou_loss(self.box_coder.decode(fg_deltas, fg_anchors), fg_boxes)
        else:
            target_deltas = self.box_coder.encode(fg_anchors, fg_boxes)
            if cfg.box_loss == "l1":
                per_box = F.l1_loss(fg_deltas, target_deltas, reduction="none").sum(1)
            else:
                per_box = F.smooth_l1_loss(fg_deltas, target_deltas, beta=cfg.smooth_l1_beta, reduction="none").sum(1)
        # per_box is fp32 when the targets are (fp16/bf16 runs keep boxes fp32): sum it in its dtype
        per_image = per_box.new_zeros(num_fg.shape).index_add_(0, image_idx, per_box)
        return {"loss_cls": loss_cls, "loss_box": (per_image / num_fg).mean()}


def _create_retinanet(
    ctx: BuildContext, *, image_size: tuple[int, int] | None = None, max_boxes: int | None = None, **kwargs: Any
) -> Workload:
    """Build a RetinaNet workload; ``kwargs`` are :class:`RetinaNetConfig` fields."""
    smoke = {"backbone_width": SMOKE_BACKBONE_WIDTH, "fpn_channels": SMOKE_FPN_CHANNELS} if ctx.smoke else {}
    cfg = RetinaNetConfig(**{"score_thresh": BENCHMARK_SCORE_THRESH, **smoke, **kwargs})
    model = RetinaNet(cfg)
    images, image_sizes, targets = synthetic_detection_batch(
        ctx,
        image_size or ctx.pick((800, 1333), (96, 128)),
        cfg.num_classes - 1,
        max_boxes or ctx.pick(20, 3),
        first_label=1,
    )
    optimizer = None
    if ctx.train:  # torchvision detection reference: SGD, momentum 0.9, weight decay 1e-4, lr 0.01
        optimizer = ctx.optimizer([p for p in model.parameters() if p.requires_grad], "sgd", lr=0.01, weight_decay=1e-4)
    return DetectionWorkload(ctx, model, (images, image_sizes), targets, optimizer=optimizer)


# 34,014,999 is torchvision's published count for retinanet_resnet50_fpn (91 class logits,
# FrozenBatchNorm so BN affine terms are buffers); with Detectron2's 80 classes it is 33,786,804.
@register_model(
    domain="vision",
    task="object_detection",
    source=(
        "torchvision retinanet_resnet50_fpn, code base of MLPerf's single-stage detector "
        "(Lin et al., Focal Loss, 2017); 91 class logits"
    ),
    batch_size=(2, 1),
    tags=("mlperf",),
    param_count=34_014_999,
)
def retinanet_r_50_fpn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """RetinaNet ResNet-50-FPN at 800x1333 (torchvision configuration, L1 box loss)."""
    return _create_retinanet(ctx, **kwargs)
