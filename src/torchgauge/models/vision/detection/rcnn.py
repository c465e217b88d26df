"""Generalized R-CNN: Faster and Mask R-CNN with C4, dilated-C5 and FPN ResNet backbones.

Reference implementations: Detectron2's ``GeneralizedRCNN`` and its COCO model zoo configs
(Apache-2.0, https://github.com/facebookresearch/detectron2: ``Base-RCNN-C4``,
``Base-RCNN-DilatedC5``, ``Base-RCNN-FPN``), and torchvision's ``maskrcnn_resnet50_fpn``
(BSD-3-Clause). Papers: Ren et al., "Faster R-CNN" (2015); He et al., "Mask R-CNN" (2017);
Lin et al., "Feature Pyramid Networks" (2017). Variants are data in :class:`RCNNConfig`.

Training computes the RPN and RoI-head losses against synthetic ground truth; evaluation runs
proposals, NMS and post-processing to final detections. With random weights the softmax
scores sit near ``1 / (K + 1)``, under the 0.05 test threshold, so the Detectron2 models use
``BENCHMARK_SCORE_THRESH`` (0) and keep the full post-processing (and mask pasting) in the step.
torchvision's Mask R-CNN (``vision_maskrcnn``) wraps this model in its transform and keeps its
0.05 threshold with a class-score prior instead (``torchvision_rcnn``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import DETECTRON2_FACTORY
from .backbones import FPN, STAGE_NAMES, ResNet
from .batch import BENCHMARK_SCORE_THRESH, DetectionWorkload, synthetic_detection_batch
from .detectron2_inputs import ResizedDetectionWorkload, mapped_sizes, original_sizes
from .polygon_masks import ellipse_polygons
from .rcnn_config import RCNNConfig
from .rcnn_heads import RPN, RoIHeads

__all__ = ["TORCHVISION_RCNN", "GeneralizedRCNN", "RCNNConfig", "rcnn_config"]


class GeneralizedRCNN(nn.Module):
    """Backbone (+ FPN) -> RPN -> RoI heads.

    ``forward(images, image_sizes, targets=None, output_sizes=None)``: in training, a dict of
    losses; in evaluation, per image a dict of ``boxes (N, 4)``, ``scores (N,)``, ``labels (N,)``
    and, with ``mask_on``, ``masks (N, 1, H, W)`` (bool at ``mask_threshold``, else
    probabilities). With ``output_sizes`` (each image's size before resizing) boxes and masks
    are reported at that size, as Detectron2's ``detector_postprocess`` does.
    """

    def __init__(self, cfg: RCNNConfig):
        super().__init__()
        if cfg.neck not in ("c4", "dc5", "fpn"):
            raise ValueError(f"unknown neck {cfg.neck!r}; accepted: c4, dc5, fpn")
        self.cfg = cfg
        out_features = {"c4": ("res4",), "dc5": ("res5",), "fpn": STAGE_NAMES}[cfg.neck]
        self.backbone = ResNet(
            cfg.depth,
            out_features,
            res5_dilation=2 if cfg.neck == "dc5" else 1,
            stride_in_1x1=cfg.stride_in_1x1,
            freeze_at=cfg.freeze_at,
            width=cfg.width,
        )
        if cfg.neck == "fpn":
            in_channels = [self.backbone.out_channels[name] for name in STAGE_NAMES]
            self.fpn = FPN(in_channels, cfg.fpn_channels, top_block="maxpool")
            channels, rpn_strides, roi_strides = cfg.fpn_channels, (4, 8, 16, 32, 64), (4, 8, 16, 32)
        else:
            name = out_features[0]
            channels, rpn_strides = self.backbone.out_channels[name], (self.backbone.strides[name],)
            roi_strides = rpn_strides
        self.rpn = RPN(cfg, channels, rpn_strides)
        self.roi_heads = RoIHeads(cfg, channels, roi_strides)
        self.register_buffer("pixel_mean", torch.tensor(cfg.pixel_mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(cfg.pixel_std).view(1, 3, 1, 1), persistent=False)

    def forward(
        self,
        images: Tensor,
        image_sizes: Sequence[tuple[int, int]],
        targets: Sequence[dict[str, Tensor]] | None = None,
        output_sizes: Sequence[tuple[int, int]] | None = None,
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        return self.forward_normalized((images - self.pixel_mean) / self.pixel_std, image_sizes, targets, output_sizes)

    def forward_normalized(
        self,
        images: Tensor,
        image_sizes: Sequence[tuple[int, int]],
        targets: Sequence[dict[str, Tensor]] | None = None,
        output_sizes: Sequence[tuple[int, int]] | None = None,
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        """:meth:`forward` on images already normalised (torchvision's transform does it per image)."""
        features = self.backbone(images)
        if self.cfg.neck == "fpn":
            pyramid = self.fpn([features[name] for name in STAGE_NAMES])  # P2..P6
            rpn_features, roi_features = pyramid, pyramid[:4]  # the RoI heads pool from P2..P5
        else:
            rpn_features = roi_features = list(features.values())
        proposals, rpn_losses = self.rpn(rpn_features, image_sizes, targets)
        if self.training:
            return {**rpn_losses, **self.roi_heads(roi_features, proposals, image_sizes, targets)}
        return self.roi_heads(roi_features, proposals, image_sizes, output_sizes=output_sizes)


# C4 and DC5 configs keep Detectron2's defaults of 12000/6000 proposals before NMS and
# 2000/1000 after (Base-RCNN-C4.yaml, Base-RCNN-DilatedC5.yaml).
_SINGLE_MAP_RPN = dict(rpn_pre_nms_topk=(12000, 6000), rpn_post_nms_topk=(2000, 1000))
# torchvision's maskrcnn_resnet50_fpn: 91 class ids (0 = background), torchvision ResNet,
# legacy RoIAlign with 2x2 sampling, smooth-L1 (beta 1/9) losses, ImageNet normalisation.
TORCHVISION_RCNN = dict(
    num_classes=90,
    background_first=True,
    stride_in_1x1=False,
    round_anchors=True,
    rpn_post_nms_topk=(2000, 1000),
    rpn_min_box_size=1e-3,
    rpn_smooth_l1_beta=1 / 9,
    rpn_loss_normalizer="sampled",
    roi_smooth_l1_beta=1 / 9,
    roi_aligned=False,
    roi_sampling_ratio=2,
    pixel_mean=(123.675, 116.28, 103.53),
    pixel_std=(58.395, 57.12, 57.375),
)
# Smoke size: the same code path on 128x160 images with few proposals and boxes (the C4 head
# runs res5 once per proposal, ~0.7 GMAC each) and at most 10 detections per image (with the
# benchmark's zero score threshold every image keeps the cap, and the mask head runs 4 convs
# and a deconvolution per detection: 100 of them made a smoke eval step take seconds).
_SMOKE = dict(rpn_pre_nms_topk=(64, 64), rpn_post_nms_topk=(8, 8), roi_batch_per_image=16, detections_per_image=10)
# Every variant also gets a narrower ResNet and box head at smoke size (the layer types are
# unchanged): C4 runs res5 on every proposal (~0.7 GMAC each at width 64, 10 s per smoke eval
# step on 2 cores), DC5 has >160M parameters (a 2048x2048 RPN conv and a 100k x 1024 FC), and
# the full-width FPN backbones made a vision_maskrcnn smoke train step 61 GFLOP (42 narrow);
# the 256-channel FPN, RPN and mask head then still held most of it, so they run at 64.
_SMOKE_NARROW = dict(width=16, fc_dim=256, fpn_channels=64, mask_dim=64)
DETECTRON2_SOURCE = "Detectron2 model zoo (Wu et al., 2019), Faster/Mask R-CNN (Ren et al., 2015; He et al., 2017)"


def rcnn_config(ctx: BuildContext, family: dict[str, Any], **kwargs: Any) -> RCNNConfig:
    """The variant's config: ``family`` defaults, then the smoke sizes (at smoke), then ``kwargs``."""
    smoke = {**_SMOKE, **_SMOKE_NARROW} if ctx.smoke else {}
    return RCNNConfig(**{**family, **smoke, **kwargs})


def _create_rcnn(
    ctx: BuildContext,
    *,
    family: dict[str, Any],
    image_size: tuple[int, int] | None = None,
    source_size: tuple[int, int] | None = None,
    max_boxes: int | None = None,
    polygon_masks: bool = False,
    **kwargs: Any,
) -> Workload:
    """Build a Generalized R-CNN workload.

    ``family`` holds the reference config's defaults (e.g. the C4 proposal counts) and
    ``kwargs`` the variant's and the caller's :class:`RCNNConfig` fields. Precedence, lowest
    first: family defaults, smoke sizes, kwargs, so smoke's few proposals replace a family's
    thousands (they did not: C4 smoke evals ran res5 on every one of ~420 proposals).
    ``source_size``: the size ``image_size`` was resized from; evaluation then reports the
    detections at each image's original size (:class:`ResizedDetectionWorkload`).
    ``polygon_masks``: ground-truth masks as polygons (Detectron2's format) instead of bitmasks.
    """
    cfg = rcnn_config(ctx, {"score_thresh": BENCHMARK_SCORE_THRESH, **family}, **kwargs)
    model = GeneralizedRCNN(cfg)
    images, image_sizes, targets = synthetic_detection_batch(
        ctx,
        image_size or ctx.pick((800, 1333), (128, 160)),
        cfg.num_classes,
        max_boxes or ctx.pick(20, 3),
        size_divisibility=cfg.size_divisibility,
        first_label=1 if cfg.background_first else 0,
        with_masks=cfg.mask_on and not polygon_masks,
    )
    if cfg.mask_on and polygon_masks:
        for target in targets:
            target["polygons"] = ellipse_polygons(target["boxes"])
    optimizer = None
    if ctx.train:  # Detectron2's SGD (TorchBench lowers the LR to 0.001 to avoid NaNs)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = ctx.optimizer(trainable, "sgd", lr=0.001, weight_decay=1e-4)
    if source_size is None:
        return DetectionWorkload(ctx, model, (images, image_sizes), targets, optimizer=optimizer)
    inputs = (images, image_sizes, original_sizes(image_sizes, image_size, source_size))
    return ResizedDetectionWorkload(ctx, model, inputs, targets, optimizer=optimizer)


def _detectron2(ctx: BuildContext, **kwargs: Any) -> Workload:
    """A Detectron2 R-CNN on the image sizes of TorchBench's batches (see ``detectron2_inputs``).

    Ground-truth masks are polygons, as Detectron2's mapper keeps them; single-feature-map
    necks take Detectron2's C4/DC5 proposal counts.
    """
    if "image_size" not in kwargs:
        kwargs["image_size"], kwargs["source_size"] = mapped_sizes(ctx)
    family = _SINGLE_MAP_RPN if kwargs.get("neck") in ("c4", "dc5") else {}
    return _create_rcnn(ctx, family=family, **{"polygon_masks": True, **kwargs})


# Parameter counts: those of Detectron2's own models (commit 0df2d73, TorchBench's pin) built
# from the same configs, equal to the last digit (docs/torchbench-fidelity.json).
@register_model(
    domain="vision",
    task="object_detection",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=33_791_644,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_fasterrcnn_r_50_c4(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Faster R-CNN, ResNet-50, res5 in the RoI head (Detectron2 ``faster_rcnn_R_50_C4``)."""
    return _detectron2(ctx, depth=50, neck="c4", **kwargs)


@register_model(
    domain="vision",
    task="object_detection",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=165_581_468,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_fasterrcnn_r_50_dc5(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Faster R-CNN, ResNet-50 with dilated res5 (Detectron2 ``faster_rcnn_R_50_DC5``)."""
    return _detectron2(ctx, depth=50, neck="dc5", **kwargs)


@register_model(
    domain="vision",
    task="object_detection",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=41_699_936,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_fasterrcnn_r_50_fpn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Faster R-CNN, ResNet-50-FPN (Detectron2 ``faster_rcnn_R_50_FPN``)."""
    return _detectron2(ctx, depth=50, neck="fpn", **kwargs)


@register_model(
    domain="vision",
    task="object_detection",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=52_731_548,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_fasterrcnn_r_101_c4(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Faster R-CNN, ResNet-101, res5 in the RoI head (Detectron2 ``faster_rcnn_R_101_C4``)."""
    return _detectron2(ctx, depth=101, neck="c4", **kwargs)


@register_model(
    domain="vision",
    task="object_detection",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=184_521_372,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_fasterrcnn_r_101_dc5(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Faster R-CNN, ResNet-101 with dilated res5 (Detectron2 ``faster_rcnn_R_101_DC5``)."""
    return _detectron2(ctx, depth=101, neck="dc5", **kwargs)


@register_model(
    domain="vision",
    task="object_detection",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=60_639_840,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_fasterrcnn_r_101_fpn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Faster R-CNN, ResNet-101-FPN (Detectron2 ``faster_rcnn_R_101_FPN``)."""
    return _detectron2(ctx, depth=101, neck="fpn", **kwargs)


@register_model(
    domain="vision",
    task="instance_segmentation",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=35_909_612,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_maskrcnn_r_50_c4(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Mask R-CNN, ResNet-50, res5 in the RoI head (Detectron2 ``mask_rcnn_R_50_C4``)."""
    return _detectron2(ctx, depth=50, neck="c4", mask_on=True, **kwargs)


@register_model(
    domain="vision",
    task="instance_segmentation",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    tags=("mlperf",),
    param_count=44_343_216,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_maskrcnn_r_50_fpn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Mask R-CNN, ResNet-50-FPN (Detectron2 ``mask_rcnn_R_50_FPN``; MLPerf's heavy detector)."""
    return _detectron2(ctx, depth=50, neck="fpn", mask_on=True, **kwargs)


@register_model(
    domain="vision",
    task="instance_segmentation",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=54_849_516,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_maskrcnn_r_101_c4(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Mask R-CNN, ResNet-101, res5 in the RoI head (Detectron2 ``mask_rcnn_R_101_C4``)."""
    return _detectron2(ctx, depth=101, neck="c4", mask_on=True, **kwargs)


@register_model(
    domain="vision",
    task="instance_segmentation",
    source=DETECTRON2_SOURCE,
    batch_size=(1, 1),
    param_count=63_283_120,
    torchbench_precision=DETECTRON2_FACTORY,
)
def detectron2_maskrcnn_r_101_fpn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Mask R-CNN, ResNet-101-FPN (Detectron2 ``mask_rcnn_R_101_FPN``)."""
    return _detectron2(ctx, depth=101, neck="fpn", mask_on=True, **kwargs)


@register_model(
    domain="vision", task="instance_segmentation",
    source=DETECTRON2_SOURCE + "; LazyConfig common/models/mask_rcnn_fpn.py (TorchBench detectron2_maskrcnn)",
    batch_size=(1, 1), param_count=44_343_216,
    notes="the network of detectron2_maskrcnn_r_50_fpn built from Detectron2's LazyConfig; "
          "TorchBench trains it by SGD at lr 0",
)  # fmt: skip
def detectron2_maskrcnn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Mask R-CNN R50-FPN from Detectron2's LazyConfig model zoo; training steps ``SGD(params, lr=0.0)``.

    The LazyConfig's ``ResNet`` keeps its default ``freeze_at=0``: stem and res2 train too.
    """
    workload = _detectron2(ctx, depth=50, neck="fpn", mask_on=True, **{"freeze_at": 0, **kwargs})
    if ctx.train:  # TorchBench: torch.optim.SGD(self.model.parameters(), 0.0): no momentum, no decay
        workload.optimizer = torch.optim.SGD([p for p in workload.module.parameters() if p.requires_grad], lr=0.0)
        workload.updates_parameters = False  # lr 0: the step runs, the weights stay
    return workload
