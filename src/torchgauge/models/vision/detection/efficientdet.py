"""EfficientDet: EfficientNet features -> BiFPN layers -> separable-conv class/box nets.

Reference implementation: Ross Wightman's ``effdet`` (Apache-2.0,
https://github.com/rwightman/efficientdet-pytorch at d43c9e34, the commit TorchBench pins:
``efficientdet.py``, ``anchors.py``, ``loss.py``, ``bench.py``, ``config/model_config.py``);
the TF original is google/automl. Paper: Tan, Pang & Le, "EfficientDet: Scalable and
Efficient Object Detection" (2020). The backbone is the suite's EfficientNet
(``mobilenet.py``) without its 1x1 head conv and classifier, tapped at strides 8, 16 and 32.

- ``timm_efficientdet`` is TorchBench's: effdet ``tf_efficientdet_d1`` (its ``args.py``
  default), 6,625,898 parameters: EfficientNet-B1 with TensorFlow "same" padding and
  BatchNorm, stochastic depth 0.2, 4 BiFPN layers of width 88, conv biases before every
  BatchNorm, 640x640 inputs.
- ``efficientdet_d0`` is effdet's PyTorch-native ``efficientdet_d0`` (3,877,763 parameters,
  512x512), the model this name used to be.

As TorchBench runs them: images arrive normalised (its loader's prefetcher), training targets
arrive as per-level anchor labels (its loader's ``AnchorLabeler``: IoU >= 0.5 plus each box's
best anchor), computed here once at build time. A training step is ``DetBenchTrain``'s loss
(focal loss, gamma 1.5, over every anchor and class, plus 50x the Huber loss of the positive
anchors' boxes, both over the positives + 1), backward, gradient-norm clipping at 10 and
momentum SGD (timm's ``momentum``: lr 1e-4 at warm-up, weight decay 4e-5 off biases and 1-d
weights). Evaluation is ``DetBenchPredict``: the top 5,000 (anchor, class) logits over all
levels, decoded, batched NMS at IoU 0.5, 100 detections per image.
"""

from __future__ import annotations

import math
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
from .boxes import AnchorGenerator, BoxCoder, Matcher, batched_nms, clip_boxes
from .dense_heads import flatten_level, match_anchors, one_hot_targets, prior_bias
from .tf_efficientnet import StochasticDepthMBConv, downsample, tf_backbone

__all__ = ["BiFPN", "EfficientDet", "EfficientDetConfig", "anchor_labels", "fast_normalized_fusion", "fusion_weights"]

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
    backbone_depth: float = 1.0  # EfficientNet depth multiplier: B0 1.0, B1 1.1
    tf_padding: bool = False  # tf_ variants: TF "same" padding where convs and pools stride, TF BatchNorm
    drop_path_rate: float = 0.0  # backbone stochastic depth in training, rising linearly over the blocks
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
    max_detection_points: int = 5000  # top (anchor, class) logits over all levels kept before NMS
    nms_thresh: float = 0.5
    detections_per_image: int = 100
    image_size: int = 512
    lr: float = 1e-4  # TorchBench's: timm's cosine schedule sits at its warm-up lr 1e-4 in epoch 0
    weight_decay: float = 4e-5

    def anchor_shapes(self) -> list[list[tuple[float, float]]]:
        """Anchor ``(width, height)`` per level: 3 scales x 3 aspect ratios, scales slowest."""
        return [
            [(self.anchor_scale * s * 2 ** (i / self.num_scales) * rw,
              self.anchor_scale * s * 2 ** (i / self.num_scales) * rh)
             for i in range(self.num_scales) for rw, rh in self.aspect_ratios]
            for s in STRIDES
        ]  # fmt: skip


# effdet's tf_efficientdet_d1, TorchBench's model (effdet's defaults fill in the rest).
TF_EFFICIENTDET_D1 = {
    "backbone_depth": 1.1, "tf_padding": True, "drop_path_rate": 0.2, "fpn_channels": 88, "fpn_cells": 4,
    "redundant_bias": True, "image_size": 640,
}  # fmt: skip
EFFICIENTDET_D0 = {"drop_path_rate": 0.1}  # effdet's efficientdet_d0: the config defaults otherwise
# The loader's normalisation of 0-255 pixels (ImageNet RGB mean and std; letterbox fill = mean).
PIXEL_MEAN, PIXEL_STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


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
        self.level, self.in_levels, self.eps, self.tf_padding = level, tuple(in_levels), cfg.fusion_eps, cfg.tf_padding
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
            elif in_level < self.level:  # finer (one level): 3x3 stride-2 max pool
                x = downsample(x, self.tf_padding)
            resized.append(x)
        return self.conv(F.silu(fast_normalized_fusion(resized, self.weights, self.eps)))


class BiFPN(nn.Module):
    """P6/P7 from C5 by 1x1 conv + max pooling, then ``fpn_cells`` bidirectional fusion layers.

    ``forward([C3, C4, C5])`` -> ``[P3..P7]``, each ``(B, fpn_channels, H / stride, W / stride)``.
    """

    def __init__(self, in_channels: Sequence[int], cfg: EfficientDetConfig, norm: Callable[[int], nn.Module]):
        super().__init__()
        width = cfg.fpn_channels
        self.tf_padding = cfg.tf_padding
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
        p6 = downsample(self.p6_resample(features[-1]), self.tf_padding)
        levels = [*features, p6, downsample(p6, self.tf_padding)]
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
    """EfficientNet -> BiFPN -> class and box nets over P3..P7 with 9 anchors per cell.

    ``forward(images, image_sizes, labels=None)`` takes normalised images: in training, with
    the per-level anchor labels of :func:`anchor_labels`, ``{"loss_cls", "loss_box"}`` (the box
    loss already weighted); in evaluation per image ``boxes``, ``scores``, ``labels``.
    """

    def __init__(self, cfg: EfficientDetConfig):
        super().__init__()
        self.cfg = cfg
        trunk = _efficientnet_b0_config(cfg.backbone_depth)
        # Feature taps: the last block at each of strides 8, 16, 32 (outputs of 40, 112, 320 ch).
        stride, taps, tap_channels = 2, [], []
        for index, block in enumerate(trunk.blocks, start=1):  # features[0] is the stride-2 stem
            stride *= block.stride
            if stride in (8, 16, 32) and (index == len(trunk.blocks) or stride * trunk.blocks[index].stride != stride):
                taps.append(index)
                tap_channels.append(block.out_ch)
        self.backbone = MobileNet(trunk, block=StochasticDepthMBConv).features[:-1]  # head conv dropped
        blocks = [m for m in self.backbone if isinstance(m, StochasticDepthMBConv)]
        for index, block in enumerate(blocks):  # timm: drop_path_rate * block_idx / block_count
            block.drop_prob = cfg.drop_path_rate * index / len(blocks)
        if cfg.tf_padding:
            tf_backbone(self.backbone)
        self.taps = tuple(taps)
        norm = partial(nn.BatchNorm2d, eps=cfg.bn_eps, momentum=cfg.bn_momentum)
        self.bifpn = BiFPN(tap_channels, cfg, norm)
        shapes = cfg.anchor_shapes()
        self.num_anchors = len(shapes[0])
        self.anchor_generator = AnchorGenerator(shapes, STRIDES, offset=0.5)
        self.class_net = DetectionNet(cfg, self.num_anchors * cfg.num_classes, norm, bias_init=prior_bias())
        self.box_net = DetectionNet(cfg, self.num_anchors * 4, norm)
        self.box_coder = BoxCoder()
        self.matcher = Matcher(cfg.match_threshold, cfg.match_threshold, allow_low_quality_matches=True)

    def forward(
        self, images: Tensor, image_sizes: Sequence[tuple[int, int]], labels: dict[str, Tensor] | None = None
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        x, features = images, []
        for index, layer in enumerate(self.backbone):
            x = layer(x)
            if index in self.taps:
                features.append(x)
        pyramid = self.bifpn(features)
        class_out, box_out = self.class_net(pyramid), self.box_net(pyramid)  # per level (B, A * k, H, W)
        if self.training:
            return self._losses(class_out, box_out, labels)
        anchors = torch.cat(self.anchor_generator([p.shape[-2:] for p in pyramid]))
        return self._detections(class_out, box_out, anchors, image_sizes)

    def _losses(self, class_out: list[Tensor], box_out: list[Tensor], labels: dict[str, Tensor]) -> dict[str, Tensor]:
        """effdet's ``DetectionLoss`` on precomputed labels: dense focal sum, masked Huber sum, / (#positives + 1)."""
        cfg = self.cfg
        normalizer = labels["num_positives"].sum() + 1.0
        loss_cls, loss_box = [], []
        for level, (logits, deltas) in enumerate(zip(class_out, box_out)):
            cls_target = labels[f"cls_{level}"]  # (B, H, W, A): class id, -1 background, -2 ignored
            box_target = labels[f"box_{level}"]  # (B, H, W, A * 4): zero off the positives
            logits = logits.permute(0, 2, 3, 1).float()  # (B, H, W, A * C)
            onehot = one_hot_targets(cls_target.long(), cfg.num_classes, logits.dtype).flatten(-2)
            probs = logits.sigmoid()  # effdet's new_focal_loss, written out
            p_t = onehot * probs + (1.0 - onehot) * (1.0 - probs)
            alpha = onehot * cfg.focal_alpha + (1.0 - onehot) * (1.0 - cfg.focal_alpha)
            ce = F.binary_cross_entropy_with_logits(logits, onehot, reduction="none")
            focal = (1 / normalizer) * alpha * (1.0 - p_t) ** cfg.focal_gamma * ce
            focal = focal.view(*cls_target.shape, cfg.num_classes) * (cls_target != -2).unsqueeze(-1)
            loss_cls.append(focal.sum())
            deltas = deltas.permute(0, 2, 3, 1).float()
            huber = F.huber_loss(deltas, box_target, delta=cfg.huber_delta, reduction="none") * (box_target != 0.0)
            loss_box.append(huber.sum() / (normalizer * 4.0))
        return {"loss_cls": torch.stack(loss_cls).sum(), "loss_box": cfg.box_loss_weight * torch.stack(loss_box).sum()}

    def _detections(
        self, class_out: list[Tensor], box_out: list[Tensor], anchors: Tensor, image_sizes: Sequence[tuple[int, int]]
    ) -> list[dict[str, Tensor]]:
        """effdet's ``DetBenchPredict``: top (anchor, class) logits over all levels, decode, batched NMS per image."""
        cfg = self.cfg
        logits = torch.cat([flatten_level(out, cfg.num_classes) for out in class_out], 1)  # (B, N, C)
        deltas = torch.cat([flatten_level(out, 4) for out in box_out], 1)  # (B, N, 4)
        batch = logits.shape[0]
        top_logits, top = logits.reshape(batch, -1).topk(min(cfg.max_detection_points, logits[0].numel()), dim=1)
        anchor_idx, classes = top // cfg.num_classes, top % cfg.num_classes
        top_deltas = deltas.gather(1, anchor_idx.unsqueeze(2).expand(-1, -1, 4))
        results = []
        for image, size in enumerate(image_sizes):
            boxes = clip_boxes(self.box_coder.decode(top_deltas[image], anchors[anchor_idx[image]]), size)
            scores = top_logits[image].sigmoid()
            keep = batched_nms(boxes, scores, classes[image], cfg.nms_thresh, cfg.detections_per_image)
            results.append({"boxes": boxes[keep], "scores": scores[keep], "labels": classes[image][keep]})
        return results


def anchor_labels(model: EfficientDet, image_side: int, targets: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """effdet's ``AnchorLabeler`` for a batch: per level ``cls_{l} (B, H, W, A)`` and ``box_{l} (B, H, W, A * 4)``.

    Also ``num_positives (B,)``. Float32 throughout, as TorchBench's prefetcher casts them.
    """
    sizes = [(math.ceil(image_side / s), math.ceil(image_side / s)) for s in STRIDES]
    anchors = model.anchor_generator(sizes)
    flat_anchors = torch.cat(anchors)
    labels, matched_boxes, _ = match_anchors(model.matcher, flat_anchors, targets)  # (B, N), (B, N, 4)
    foreground = labels >= 0
    deltas = model.box_coder.encode(flat_anchors.repeat(len(targets), 1), matched_boxes.flatten(0, 1))
    deltas = (deltas.view_as(matched_boxes) * foreground.unsqueeze(-1)).float()
    out: dict[str, Tensor] = {"num_positives": foreground.sum(dim=1).float()}
    start = 0
    for level, ((height, width), level_anchors) in enumerate(zip(sizes, anchors)):
        end = start + len(level_anchors)
        out[f"cls_{level}"] = labels[:, start:end].reshape(len(targets), height, width, -1).float()
        out[f"box_{level}"] = deltas[:, start:end].reshape(len(targets), height, width, -1)
        start = end
    return out


def _effdet_sgd(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.SGD:
    """timm's ``create_optimizer(opt="momentum")``: SGD, momentum 0.9, no weight decay on biases and 1-d weights."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if param.ndim <= 1 or name.endswith(".bias") else decay).append(param)
    groups = [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]
    return torch.optim.SGD(groups, lr=lr, momentum=0.9, nesterov=False)


class EfficientDetWorkload(DetectionWorkload):
    """effdet's training bench: the loss, gradient-norm clipping at 10 (TorchBench's ``--clip-grad``), SGD."""

    max_grad_norm = 10.0


def _create_efficientdet(
    ctx: BuildContext, variant: dict[str, Any], *, max_boxes: int | None = None, **kwargs: Any
) -> Workload:
    """Build an EfficientDet workload; ``variant`` and ``kwargs`` (winning) are :class:`EfficientDetConfig` fields."""
    # Smoke: 128 px images (P7 is 1x1) and 8 classes; every layer kept.
    smoke = {"num_classes": 8} if ctx.smoke else {}
    cfg = EfficientDetConfig(**{**variant, **smoke, **kwargs})
    model = EfficientDet(cfg)
    side = kwargs.get("image_size") or ctx.pick(cfg.image_size, 128)
    if side <= 0 or side % STRIDES[-1]:
        raise ValueError(
            f"EfficientDet image_size must be a positive multiple of {STRIDES[-1]} (P7's stride), got {side}"
        )
    # Images are letterboxed into a fixed square (narrower ones filled with the mean, 0 once normalised).
    images, image_sizes, targets = synthetic_detection_batch(
        ctx, (side, side), cfg.num_classes, max_boxes or ctx.pick(20, 3), STRIDES[-1]
    )
    mean = torch.tensor(PIXEL_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(PIXEL_STD, device=images.device).view(1, 3, 1, 1)
    images = (images - mean) / std * (images.sum(dim=1, keepdim=True) > 0)
    if not ctx.train:
        return EfficientDetWorkload(ctx, model, (images, image_sizes))
    with torch.no_grad():  # the loader's labeler, outside the timed step
        labels = anchor_labels(model, side, targets)
    optimizer = _effdet_sgd(model, cfg.lr, cfg.weight_decay)
    return EfficientDetWorkload(ctx, model, (images, image_sizes), labels, optimizer=optimizer)


# 6,625,898 = effdet tf_efficientdet_d1 built from effdet d43c9e34 with timm 1.0.31 (published 6.6M):
# backbone 6,101,024 + BiFPN 390,972 + class net 101,394 + box net 32,508.
@register_model(
    domain="vision",
    task="object_detection",
    source="effdet tf_efficientdet_d1 (Tan et al., EfficientDet, 2020); TorchBench timm_efficientdet",
    batch_size=(16, 128),  # TorchBench timm_efficientdet DEFAULT_TRAIN_BSIZE / DEFAULT_EVAL_BSIZE
    param_count=6_625_898,
)
def timm_efficientdet(ctx: BuildContext, **kwargs: Any) -> Workload:
    """TorchBench's EfficientDet-D1 (effdet tf_efficientdet_d1) at 640x640 (smoke: 128 px, 8 classes)."""
    return _create_efficientdet(ctx, TF_EFFICIENTDET_D1, **kwargs)


# 3,877,763 = effdet's efficientdet_d0 (3.88M published): B0 trunk 3,595,388 + BiFPN 194,361 +
# class/box nets 88,014; tf_efficientdet_d0's redundant conv biases add 2,304 (3,880,067).
@register_model(
    domain="vision",
    task="object_detection",
    source="effdet efficientdet_d0 (Tan et al., EfficientDet, 2020)",
    batch_size=(16, 128),
    param_count=3_877_763,
)
def efficientdet_d0(ctx: BuildContext, **kwargs: Any) -> Workload:
    """effdet's EfficientDet-D0 at 512x512: EfficientNet-B0, 3 BiFPN layers of width 64, 90 classes."""
    return _create_efficientdet(ctx, EFFICIENTDET_D0, **kwargs)
