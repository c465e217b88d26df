"""EfficientDet-D0: EfficientNet-B0 features -> 3 BiFPN layers (width 64) -> separable-conv class/box nets.

Reference implementation: Ross Wightman's ``effdet`` (Apache-2.0,
https://github.com/rwightman/efficientdet-pytorch, ``efficientdet.py``, ``anchors.py``,
``loss.py``; config ``efficientdet_d0``), which TorchBench's ``timm_efficientdet`` wraps; the
TF original is google/automl. Paper: Tan, Pang & Le, "EfficientDet: Scalable and Efficient
Object Detection" (2020). The backbone is the suite's EfficientNet-B0 (``mobilenet.py``)
without its 1x1 head conv and classifier, tapped at strides 8, 16 and 32.

Training matches anchors (IoU >= 0.5, plus each box's best anchor) and returns the focal loss
(gamma 1.5) and 50x the Huber box loss; evaluation keeps per-level top-k candidates (no score
threshold, as effdet), decodes them and runs batched NMS to 100 detections per image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ....registry import register_model
from ....workload import BuildContext, Workload
from ..mobilenet import MobileNet, _efficientnet_b0_config
from .batch import DetectionWorkload, synthetic_detection_batch
from .boxes import AnchorGenerator, BoxCoder, Matcher
from .dense_heads import dense_detections, flatten_level, match_anchors, one_hot_targets, prior_bias
from .losses import sigmoid_focal_loss

__all__ = ["BiFPN", "EfficientDet", "EfficientDetConfig", "fast_normalized_fusion", "fusion_weights"]

STRIDES = (8, 16, 32, 64, 128)  # P3..P7
# BiFPN nodes as (output level, inputs); inputs index the list [P3_in..P7_in, node0, node1, ...].
# Top-down P6..P3, then bottom-up P4..P7 (paper fig. 2d; effdet's ``bifpn_config``).
BIFPN_NODES: tuple[tuple[int, tuple[int, ...]], ...] = (
    (3, (3, 4)), (2, (2, 5)), (1, (1, 6)), (0, (0, 7)),
    (1, (1, 7, 8)), (2, (2, 6, 9)), (3, (3, 5, 10)), (4, (4, 11)),
)  # fmt: skip


@dataclass(frozen=True)
class EfficientDetConfig:
    """One EfficientDet variant. Defaults: effdet's ``efficientdet_d0``."""

    num_classes: int = 90  # COCO ids 1..90 mapped to 0..89, as effdet
    fpn_channels: int = 64
    fpn_cells: int = 3
    head_repeats: int = 3  # separable convs per class/box net before the predictor
    anchor_scale: float = 4.0  # base anchor side = anchor_scale * stride
    num_scales: int = 3  # 2**(i / 3)
    aspect_ratios: tuple[tuple[float, float], ...] = ((1.0, 1.0), (1.4, 0.7), (0.7, 1.4))  # (w, h) factors
    redundant_bias: bool = False  # conv bias before BN (tf_efficientdet_d0: True, 3,880,067 params)
    fusion_eps: float = 1e-4  # fast normalised fusion: w / (sum(w) + eps)
    bn_eps: float = 1e-3  # BiFPN/head BatchNorm, TF defaults kept by effdet
    bn_momentum: float = 0.01
    match_threshold: float = 0.5  # foreground at IoU >= 0.5, background below (no ignore band)
    focal_alpha: float = 0.25
    focal_gamma: float = 1.5
    huber_delta: float = 0.1
    box_loss_weight: float = 50.0
    score_thresh: float = 0.0  # effdet keeps the top candidates whatever their score
    topk_candidates: int = 1000  # per level
    nms_thresh: float = 0.5
    detections_per_image: int = 100
    pixel_mean: tuple[float, float, float] = (123.675, 116.28, 103.53)  # ImageNet RGB, 0-255 pixels
    pixel_std: tuple[float, float, float] = (58.395, 57.12, 57.375)

    def anchor_shapes(self) -> list[list[tuple[float, float]]]:
        """Anchor ``(width, height)`` per level: 3 scales x 3 aspect ratios, scales slowest."""
        return [
            [(self.anchor_scale * s * 2 ** (i / self.num_scales) * rw,
              self.anchor_scale * s * 2 ** (i / self.num_scales) * rh)
             for i in range(self.num_scales) for rw, rh in self.aspect_ratios]
            for s in STRIDES
        ]  # fmt: skip


def fusion_weights(weights: Tensor, eps: float = 1e-4) -> Tensor:
    """Fast normalised fusion weights (paper eq. 3): ``relu(w) / (sum(relu(w)) + eps)``."""
    weights = F.relu(weights)
    return weights / (weights.sum() + eps)


def fast_normalized_fusion(inputs: Sequence[Tensor], weights: Tensor, eps: float = 1e-4) -> Tensor:
    """Weighted sum of same-shape feature maps with :func:`fusion_weights`."""
    return (torch.stack(list(inputs), dim=-1) * fusion_weights(weights, eps)).sum(dim=-1)


class SeparableConv(nn.Sequential):
    """Depthwise 3x3 (no bias) -> pointwise 1x1 [-> BatchNorm]: effdet's ``SeparableConv2d``."""

    def __init__(self, in_ch: int, out_ch: int, bias: bool, norm: Callable[[int], nn.Module] | None):
        layers: list[nn.Module] = [
            nn.Conv2d(in_ch, in_ch, 3, padding=1, groups=in_ch, bias=False),
            nn.Conv2d(in_ch, out_ch, 1, bias=bias),
        ]
        if norm is not None:
            layers.append(norm(out_ch))
        super().__init__(*layers)


def _resample(in_ch: int, out_ch: int, bias: bool, norm: Callable[[int], nn.Module]) -> nn.Module:
    """1x1 conv + BN where a backbone level's width differs from the BiFPN's."""
    return nn.Identity() if in_ch == out_ch else nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, bias=bias), norm(out_ch))


class FusionNode(nn.Module):
    """One BiFPN node: resample inputs to its level, fuse with learned weights, SiLU, separable conv + BN."""

    def __init__(
        self,
        level: int,
        in_levels: Sequence[int],
        in_channels: Sequence[int],
        cfg: EfficientDetConfig,
        norm: Callable[[int], nn.Module],
    ):
        super().__init__()
        if in_levels[0] != level:
            raise ValueError(f"a BiFPN node's first input must be on its own level {level}, got {in_levels[0]}")
        self.level, self.in_levels, self.eps = level, tuple(in_levels), cfg.fusion_eps
        self.resample = nn.ModuleList(_resample(c, cfg.fpn_channels, cfg.redundant_bias, norm) for c in in_channels)
        self.weights = nn.Parameter(torch.ones(len(in_levels)))
        self.conv = SeparableConv(cfg.fpn_channels, cfg.fpn_channels, cfg.redundant_bias, norm)

    def forward(self, inputs: Sequence[Tensor]) -> Tensor:
        size = inputs[0].shape[-2:]
        resized = []
        for x, in_level, resample in zip(inputs, self.in_levels, self.resample):
            x = resample(x)
            if in_level > self.level:  # coarser: nearest upsampling
                x = F.interpolate(x, size=size, mode="nearest")
            elif in_level < self.level:  # finer (one level): 3x3 stride-2 max pool, "same" padding
                x = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
            resized.append(x)
        return self.conv(F.silu(fast_normalized_fusion(resized, self.weights, self.eps)))


class BiFPN(nn.Module):
    """P6/P7 from C5 by 1x1 conv + max pooling, then ``fpn_cells`` bidirectional fusion layers.

    ``forward([C3, C4, C5])`` -> ``[P3..P7]``, each ``(B, fpn_channels, H / stride, W / stride)``.
    """

    def __init__(self, in_channels: Sequence[int], cfg: EfficientDetConfig, norm: Callable[[int], nn.Module]):
        super().__init__()
        width = cfg.fpn_channels
        self.p6_resample = _resample(in_channels[-1], width, cfg.redundant_bias, norm)
        channels = list(in_channels) + [width, width]  # P3..P7 widths entering the first layer
        self.cells = nn.ModuleList()
        for _ in range(cfg.fpn_cells):
            node_channels = channels + [width] * len(BIFPN_NODES)
            levels = list(range(5)) + [level for level, _ in BIFPN_NODES]
            self.cells.append(
                nn.ModuleList(
                    FusionNode(level, [levels[i] for i in inputs], [node_channels[i] for i in inputs], cfg, norm)
                    for level, inputs in BIFPN_NODES
                )
            )
            channels = [width] * 5

    def forward(self, features: Sequence[Tensor]) -> list[Tensor]:
        p6 = F.max_pool2d(self.p6_resample(features[-1]), kernel_size=3, stride=2, padding=1)
        levels = [*features, p6, F.max_pool2d(p6, kernel_size=3, stride=2, padding=1)]
        for cell in self.cells:
            nodes = list(levels)
            for node, (_, inputs) in zip(cell, BIFPN_NODES):
                nodes.append(node([nodes[i] for i in inputs]))
            levels = nodes[-5:]  # the last five nodes are P3_out..P7_out
        return levels


class DetectionNet(nn.Module):
    """effdet's ``HeadNet``: separable convs shared over levels, BatchNorm per level, SiLU, predictor."""

    def __init__(
        self, cfg: EfficientDetConfig, num_outputs: int, norm: Callable[[int], nn.Module], bias_init: float = 0.0
    ):
        super().__init__()
        width = cfg.fpn_channels
        self.convs = nn.ModuleList(
            SeparableConv(width, width, cfg.redundant_bias, None) for _ in range(cfg.head_repeats)
        )
        self.norms = nn.ModuleList(nn.ModuleList(norm(width) for _ in STRIDES) for _ in range(cfg.head_repeats))
        self.predict = SeparableConv(width, num_outputs, True, None)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.normal_(module.weight, std=0.01)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.constant_(self.predict[1].bias, bias_init)

    def forward(self, features: Sequence[Tensor]) -> list[Tensor]:
        outputs = []
        for level, x in enumerate(features):
            for conv, norms in zip(self.convs, self.norms):
                x = F.silu(norms[level](conv(x)))
            outputs.append(self.predict(x))  # (B, A * k, H, W)
        return outputs


class EfficientDet(nn.Module):
    """EfficientNet-B0 -> BiFPN -> class and box nets over P3..P7 with 9 anchors per cell.

    ``forward(images, image_sizes, targets=None)``: in training ``{"loss_cls", "loss_box"}``
    (the box loss already weighted); in evaluation per image ``boxes``, ``scores``, ``labels``.
    """

    def __init__(self, cfg: EfficientDetConfig):
        super().__init__()
        self.cfg = cfg
        b0 = _efficientnet_b0_config()
        # Feature taps: the last block at each of strides 8, 16, 32 (outputs of 40, 112, 320 ch).
        stride, taps, tap_channels = 2, [], []
        for index, block in enumerate(b0.blocks, start=1):  # features[0] is the stride-2 stem
            stride *= block.stride
            if stride in (8, 16, 32) and (index == len(b0.blocks) or stride * b0.blocks[index].stride != stride):
                taps.append(index)
                tap_channels.append(block.out_ch)
        self.backbone = MobileNet(b0).features[:-1]  # stem + MBConv blocks; head conv dropped
        self.taps = tuple(taps)
        norm = partial(nn.BatchNorm2d, eps=cfg.bn_eps, momentum=cfg.bn_momentum)
        self.bifpn = BiFPN(tap_channels, cfg, norm)
        shapes = cfg.anchor_shapes()
        num_anchors = len(shapes[0])
        self.anchor_generator = AnchorGenerator(shapes, STRIDES, offset=0.5)
        self.class_net = DetectionNet(cfg, num_anchors * cfg.num_classes, norm, bias_init=prior_bias())
        self.box_net = DetectionNet(cfg, num_anchors * 4, norm)
        self.box_coder = BoxCoder()
        self.matcher = Matcher(cfg.match_threshold, cfg.match_threshold, allow_low_quality_matches=True)
        self.register_buffer("pixel_mean", torch.tensor(cfg.pixel_mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", torch.tensor(cfg.pixel_std).view(1, 3, 1, 1), persistent=False)

    def forward(
        self, images: Tensor, image_sizes: Sequence[tuple[int, int]], targets: Sequence[dict[str, Tensor]] | None = None
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        x = (images - self.pixel_mean) / self.pixel_std
        features = []
        for index, layer in enumerate(self.backbone):
            x = layer(x)
            if index in self.taps:
                features.append(x)
        pyramid = self.bifpn(features)
        logits = [flatten_level(out, self.cfg.num_classes) for out in self.class_net(pyramid)]  # (B, N_l, C)
        deltas = [flatten_level(out, 4) for out in self.box_net(pyramid)]  # (B, N_l, 4)
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
        """effdet's ``DetectionLoss``: focal sum and Huber sum over the batch, divided by (#positives + 1)."""
        cfg = self.cfg
        labels, matched_boxes, _ = match_anchors(self.matcher, anchors, targets)  # (B, N), (B, N, 4)
        foreground = labels >= 0
        num_positives = foreground.sum().to(logits.dtype) + 1.0
        focal = sigmoid_focal_loss(
            logits, one_hot_targets(labels, cfg.num_classes, logits.dtype), cfg.focal_alpha, cfg.focal_gamma, "sum"
        )
        image_idx, anchor_idx = torch.nonzero(foreground, as_tuple=True)
        target_deltas = self.box_coder.encode(anchors[anchor_idx], matched_boxes[image_idx, anchor_idx])
        # in the targets' dtype: boxes stay fp32 in fp16/bf16 runs, and huber_loss's backward needs one dtype
        pred_deltas = deltas[image_idx, anchor_idx].to(target_deltas.dtype)
        huber = F.huber_loss(pred_deltas, target_deltas, delta=cfg.huber_delta, reduction="sum")
        return {"loss_cls": focal / num_positives, "loss_box": cfg.box_loss_weight * huber / (4 * num_positives)}


def _create_efficientdet(
    ctx: BuildContext, *, image_size: int | None = None, max_boxes: int | None = None, **kwargs: Any
) -> Workload:
    """Build an EfficientDet workload; ``kwargs`` are :class:`EfficientDetConfig` fields."""
    cfg = EfficientDetConfig(**kwargs)
    model = EfficientDet(cfg)
    side = image_size or ctx.pick(512, 128)
    if side % STRIDES[-1]:
        raise ValueError(f"EfficientDet image_size must be a multiple of {STRIDES[-1]} (P7's stride), got {side}")
    # Images are letterboxed into a fixed square: narrower images padded to side x side.
    images, image_sizes, targets = synthetic_detection_batch(
        ctx, (side, side), cfg.num_classes, max_boxes or ctx.pick(20, 3), STRIDES[-1]
    )
    optimizer = None
    if ctx.train:  # effdet trains with momentum SGD (lr 0.09 at batch 64; scaled down here)
        optimizer = ctx.optimizer(model.parameters(), "sgd", lr=0.01, weight_decay=4e-5)
    return DetectionWorkload(ctx, model, (images, image_sizes), targets, optimizer=optimizer)


# 3,877,763 = effdet's efficientdet_d0 (3.88M published): B0 trunk 3,595,388 + BiFPN 194,361 +
# class/box nets 88,014; tf_efficientdet_d0's redundant conv biases add 2,304 (3,880,067).
@register_model(
    domain="vision",
    task="object_detection",
    source="effdet efficientdet_d0 (Tan et al., EfficientDet, 2020); TorchBench timm_efficientdet",
    batch_size=(16, 128),  # TorchBench timm_efficientdet DEFAULT_TRAIN_BSIZE / DEFAULT_EVAL_BSIZE
    param_count=3_877_763,
)
def timm_efficientdet(ctx: BuildContext, **kwargs: Any) -> Workload:
    """EfficientDet-D0 at 512x512: EfficientNet-B0, 3 BiFPN layers of width 64, 90 classes."""
    return _create_efficientdet(ctx, **kwargs)
