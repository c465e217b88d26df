"""YOLOv3: Darknet-53 backbone, three-scale detection head, YOLO loss and NMS post-processing.

Paper: Redmon & Farhadi, "YOLOv3: An Incremental Improvement" (2018). Layers follow Darknet's
``cfg/yolov3.cfg`` (public domain) as ported by ultralytics/yolov3 (GPL-3.0): 61,949,149
parameters with 80 classes, registered here as ``yolov3_416``. ``spp=True`` gives
``cfg/yolov3-spp.cfg`` (62,998,749), which TorchBench's ``yolov3`` runs: max pools of 13, 9
and 5 (stride 1) concatenated with their input after the third conv of the stride-32 head,
then a 1x1 conv back to 512 channels. That workload (ultralytics' loss, burn-in optimizer,
EMA and NMS) is in ``yolov3_torchbench.py``. The loss of ``yolov3_416`` follows the
ultralytics port (GIoU box loss, BCE objectness over every anchor, BCE classes over matched
anchors, weighted by its hyper-parameters), with Darknet's target assignment: each ground-truth
box goes to the single best of the nine anchors by shape IoU, at the cell holding its centre.

Inference decodes every anchor of the three scales, keeps the (box, class) pairs whose
``objectness * class probability`` exceeds ``conf_thresh`` (0.001, the mAP setting), caps
them at ``max_nms`` (30,000) by score and runs class-wise :func:`~.boxes.batched_nms`. Conv
biases start at zero as in Darknet, so with random weights every anchor passes the threshold
and NMS runs at its cap: the worst case of the reference pipeline, not a trained model's load.
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
from ...common.conv_blocks import ConvNormAct
from .batch import DetectionWorkload, synthetic_detection_batch
from .boxes import DEFAULT_SCALE_CLAMP, batched_nms, clip_boxes

__all__ = [
    "Darknet53",
    "SpatialPyramidPooling",
    "YOLOv3",
    "YOLOv3Config",
    "aligned_giou",
    "assign_targets",
    "darknet_conv",
    "decode_level",
]

# The nine COCO anchors of yolov3.cfg as (width, height) in input pixels, smallest first.
COCO_ANCHORS = ((10, 13), (16, 30), (33, 23), (30, 61), (62, 45), (59, 119), (116, 90), (156, 198), (373, 326))
# Anchors used by each output scale, coarsest (stride 32, large objects) first, as in the cfg.
ANCHOR_MASKS = ((6, 7, 8), (3, 4, 5), (0, 1, 2))
STRIDES = (32, 16, 8)
# Residual blocks per Darknet-53 stage (64, 128, 256, 512, 1024 channels).
DARKNET53_BLOCKS = (1, 2, 8, 8, 4)
# Loss gains of the ultralytics port's hyper-parameters (hyp['giou'], hyp['obj'], hyp['cls']).
BOX_GAIN, OBJ_GAIN, CLS_GAIN = 3.54, 64.3, 37.4

OUTPUT_BIASES = ("zero", "ultralytics")
# ultralytics' objectness bias offset: sigmoid(-4.5) ~ 0.011, few objects per cell at start.
OBJECTNESS_BIAS = -4.5
# SPP max-pool kernels in yolov3-spp.cfg's concatenation order (then the input itself).
SPP_KERNELS = (13, 9, 5)

ConvFactory = Callable[..., nn.Module]


def darknet_conv(bn_eps: float = 1e-5, bn_momentum: float = 0.1) -> ConvFactory:
    """``conv(in_ch, out_ch, kernel, stride=1)``: Darknet's conv (no bias) + BatchNorm + leaky ReLU(0.1)."""
    norm = partial(nn.BatchNorm2d, eps=bn_eps, momentum=bn_momentum)
    return partial(ConvNormAct, act_layer=partial(nn.LeakyReLU, 0.1), norm_layer=norm)


_conv = darknet_conv()


@dataclass(frozen=True)
class YOLOv3Config:
    """YOLOv3 with the COCO anchors; defaults are the ultralytics test settings."""

    num_classes: int = 80
    width: int = 32  # Darknet-53 stem channels; stage i has 2**(i+1) x width, the heads follow
    anchors: tuple[tuple[float, float], ...] = COCO_ANCHORS
    spp: bool = False  # yolov3-spp.cfg: spatial pyramid pooling in the stride-32 head
    bn_eps: float = 1e-5  # ultralytics' Darknet port: 1e-4
    bn_momentum: float = 0.1  # ultralytics' Darknet port: 0.03
    input_scale: float = 1 / 255  # images are multiplied by this first (0-255 pixels -> [0, 1])
    # Output conv biases: "zero" (Darknet) or "ultralytics" (PyTorch's default init plus -4.5 on
    # objectness and log(0.6 / (num_classes - 0.99)) on the classes, yolo_models.py's init).
    output_bias: str = "zero"
    conf_thresh: float = 0.001  # objectness * class probability threshold (mAP evaluation)
    iou_thresh: float = 0.6  # class-wise NMS IoU (ultralytics test.py)
    max_nms: int = 30_000  # most (box, class) candidates handed to NMS per image
    detections_per_image: int = 300


class DarknetResidual(nn.Module):
    """1x1 conv halving the channels, 3x3 conv restoring them, identity shortcut."""

    def __init__(self, channels: int, conv: ConvFactory = _conv):
        super().__init__()
        self.conv1 = conv(channels, channels // 2, 1)
        self.conv2 = conv(channels // 2, channels, 3)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(self.conv1(x))


class Darknet53(nn.Module):
    """Darknet-53 feature extractor: returns the stride-8, -16 and -32 maps (256, 512, 1024 ch at width 32)."""

    def __init__(self, width: int = 32, conv: ConvFactory = _conv):
        super().__init__()
        self.stem = conv(3, width, 3)
        stages, in_ch = [], width
        for index, blocks in enumerate(DARKNET53_BLOCKS):
            out_ch = 2 * width * 2**index
            residuals = (DarknetResidual(out_ch, conv) for _ in range(blocks))
            stages.append(nn.Sequential(conv(in_ch, out_ch, 3, 2), *residuals))
            in_ch = out_ch
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> list[Tensor]:
        x = self.stem(x)
        outputs = []
        for stage in self.stages:
            x = stage(x)
            outputs.append(x)
        return outputs[2:]  # (B, 256, H/8, W/8), (B, 512, H/16, W/16), (B, 1024, H/32, W/32)


class SpatialPyramidPooling(nn.Module):
    """yolov3-spp.cfg's SPP: stride-1 max pools of 13, 9 and 5 concatenated with the input (4x channels)."""

    def __init__(self, kernels: Sequence[int] = SPP_KERNELS):
        super().__init__()
        self.pools = nn.ModuleList(nn.MaxPool2d(k, stride=1, padding=(k - 1) // 2) for k in kernels)

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([pool(x) for pool in self.pools] + [x], dim=1)


class YOLOHeadBlock(nn.Module):
    """Five alternating 1x1/3x3 convs (the route point), then a 3x3 conv and the linear 1x1 output.

    With ``spp``, the pyramid pooling and a 1x1 conv back to ``mid_ch`` follow the third conv.
    """

    def __init__(self, in_ch: int, mid_ch: int, out_ch: int, conv: ConvFactory = _conv, spp: bool = False):
        super().__init__()
        pooling = [SpatialPyramidPooling(), conv(4 * mid_ch, mid_ch, 1)] if spp else []
        self.body = nn.Sequential(
            conv(in_ch, mid_ch, 1), conv(mid_ch, 2 * mid_ch, 3), conv(2 * mid_ch, mid_ch, 1), *pooling,
            conv(mid_ch, 2 * mid_ch, 3), conv(2 * mid_ch, mid_ch, 1),
        )  # fmt: skip
        self.head = nn.Sequential(conv(mid_ch, 2 * mid_ch, 3), nn.Conv2d(2 * mid_ch, out_ch, 1))
        nn.init.zeros_(self.head[1].bias)  # Darknet starts every bias at zero

    def ultralytics_bias_init(self, num_anchors: int, num_classes: int) -> None:
        """ultralytics' output bias: PyTorch's default conv bias plus objectness and class offsets."""
        output = self.head[1]
        bound = 1 / math.sqrt(output.weight[0].numel())  # nn.Conv2d's reset_parameters
        with torch.no_grad():
            nn.init.uniform_(output.bias, -bound, bound)
            bias = output.bias.view(num_anchors, 5 + num_classes)
            bias[:, 4] += OBJECTNESS_BIAS
            bias[:, 5:] += math.log(0.6 / (num_classes - 0.99))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        route = self.body(x)
        return route, self.head(route)


def _wh_iou(wh1: Tensor, wh2: Tensor) -> Tensor:
    """IoU ``(N, M)`` of boxes given by shape only (both centred on the origin)."""
    inter = torch.min(wh1[:, None], wh2[None]).prod(dim=2)
    return inter / (wh1.prod(dim=1)[:, None] + wh2.prod(dim=1)[None] - inter)


def assign_targets(
    targets: Sequence[dict[str, Tensor]],
    anchors: Tensor,
    anchor_masks: Sequence[Sequence[int]],
    strides: Sequence[int],
    grid_sizes: Sequence[tuple[int, int]],
) -> list[dict[str, Tensor]]:
    """Darknet's best-anchor assignment of ground-truth boxes to output cells.

    Each box is matched to the one anchor (of all scales) whose shape has the highest IoU with
    the box's shape; it becomes a positive of that anchor's scale at the cell containing the
    box centre.

    Args:
        targets: per image ``boxes (N, 4)`` xyxy pixels and ``labels (N,)``.
        anchors: ``(A, 2)`` anchor (width, height) in pixels, all scales.
        anchor_masks: anchor indices used by each scale.
        strides: stride of each scale in pixels.
        grid_sizes: ``(height, width)`` of each scale's output grid.

    Returns:
        Per scale a dict of ``image``, ``anchor`` (index within the scale), ``gy``, ``gx``
        (int64, ``(P,)`` each), ``box (P, 4)``: the target centre offset within its cell and
        its width and height, all in grid units, and ``label (P,)``.
    """
    device = anchors.device
    boxes = torch.cat([t["boxes"] for t in targets]).to(anchors.dtype)
    labels = torch.cat([t["labels"] for t in targets])
    image = torch.cat(
        [torch.full((len(t["boxes"]),), i, dtype=torch.int64, device=device) for i, t in enumerate(targets)]
    )
    wh = boxes[:, 2:] - boxes[:, :2]
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    best = _wh_iou(wh, anchors).argmax(dim=1)  # (N,) index among all anchors
    assigned = []
    for mask, stride, (height, width) in zip(anchor_masks, strides, grid_sizes):
        mask_t = torch.as_tensor(mask, device=device)
        hit = best[:, None] == mask_t[None]  # (N, A_level)
        chosen, anchor = hit.nonzero(as_tuple=True)
        grid_xy = centre[chosen] / stride
        cell = grid_xy.floor().long()
        gx, gy = cell[:, 0].clamp(0, width - 1), cell[:, 1].clamp(0, height - 1)
        offset = grid_xy - torch.stack((gx, gy), dim=1).to(grid_xy.dtype)
        box = torch.cat((offset, wh[chosen] / stride), dim=1)
        assigned.append(
            {"image": image[chosen], "anchor": anchor, "gy": gy, "gx": gx, "box": box, "label": labels[chosen]}
        )
    return assigned


def decode_level(raw: Tensor, anchors: Tensor, stride: int) -> tuple[Tensor, Tensor, Tensor]:
    """Decode one scale's raw output ``(B, A, H, W, 5 + C)`` into boxes and probabilities.

    ``x = (sigmoid(tx) + cell_x) * stride``, ``w = anchor_w * exp(tw)`` (and the same for y, h);
    ``tw``/``th`` are clamped at :data:`~.boxes.DEFAULT_SCALE_CLAMP` so that random weights
    cannot overflow ``exp``.

    Returns:
        ``boxes (B, A*H*W, 4)`` xyxy pixels, ``objectness (B, A*H*W)`` and
        ``class_probs (B, A*H*W, C)``, ordered (anchor, y, x).
    """
    batch, num_anchors, height, width, _ = raw.shape
    ys = torch.arange(height, device=raw.device, dtype=raw.dtype)
    xs = torch.arange(width, device=raw.device, dtype=raw.dtype)
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    cx = (raw[..., 0].sigmoid() + grid_x) * stride  # (B, A, H, W)
    cy = (raw[..., 1].sigmoid() + grid_y) * stride
    anchor_wh = anchors.to(raw.dtype).view(1, num_anchors, 1, 1, 2)
    wh = raw[..., 2:4].clamp(max=DEFAULT_SCALE_CLAMP).exp() * anchor_wh
    boxes = torch.stack((cx - wh[..., 0] / 2, cy - wh[..., 1] / 2, cx + wh[..., 0] / 2, cy + wh[..., 1] / 2), dim=-1)
    objectness = raw[..., 4].sigmoid().reshape(batch, -1)
    class_probs = raw[..., 5:].sigmoid().reshape(batch, -1, raw.shape[-1] - 5)
    return boxes.reshape(batch, -1, 4), objectness, class_probs


def aligned_giou(box1: Tensor, box2: Tensor) -> Tensor:
    """Generalised IoU ``(N,)`` of paired boxes ``(N, 4)`` given as (cx, cy, w, h)."""
    a1, a2 = box1[:, :2] - box1[:, 2:] / 2, box1[:, :2] + box1[:, 2:] / 2
    b1, b2 = box2[:, :2] - box2[:, 2:] / 2, box2[:, :2] + box2[:, 2:] / 2
    inter = (torch.min(a2, b2) - torch.max(a1, b1)).clamp(min=0).prod(dim=1)
    union = box1[:, 2:].prod(dim=1) + box2[:, 2:].prod(dim=1) - inter + 1e-9
    hull = (torch.max(a2, b2) - torch.min(a1, b1)).prod(dim=1) + 1e-9
    return inter / union - (hull - union) / hull


class YOLOv3(nn.Module):
    """Darknet-53 + three-scale head.

    ``forward(images, image_sizes, targets=None)`` takes 0-255 pixels ``(B, 3, H, W)`` (H, W
    multiples of 32); in training it returns ``loss_box``, ``loss_obj`` and ``loss_cls``, in
    evaluation per image ``boxes``, ``scores`` and ``labels`` (the format of this package).
    """

    def __init__(self, cfg: YOLOv3Config):
        super().__init__()
        if cfg.output_bias not in OUTPUT_BIASES:
            raise ValueError(f"invalid YOLOv3 output_bias {cfg.output_bias!r}; accepted: {', '.join(OUTPUT_BIASES)}")
        self.cfg = cfg
        num_anchors = len(ANCHOR_MASKS[0])
        out_ch = num_anchors * (5 + cfg.num_classes)
        w = cfg.width  # 32: the published widths written in the comments
        conv = darknet_conv(cfg.bn_eps, cfg.bn_momentum)
        self.backbone = Darknet53(w, conv)
        self.head32 = YOLOHeadBlock(32 * w, 16 * w, out_ch, conv, spp=cfg.spp)  # 1024 -> 512
        self.route16 = conv(16 * w, 8 * w, 1)  # 512 -> 256, then 2x upsample and concat with the stride-16 map
        self.head16 = YOLOHeadBlock(8 * w + 16 * w, 8 * w, out_ch, conv)  # 256 + 512 -> 256
        self.route8 = conv(8 * w, 4 * w, 1)  # 256 -> 128
        self.head8 = YOLOHeadBlock(4 * w + 8 * w, 4 * w, out_ch, conv)  # 128 + 256 -> 128
        if cfg.output_bias == "ultralytics":
            for head in (self.head32, self.head16, self.head8):
                head.ultralytics_bias_init(num_anchors, cfg.num_classes)
        self.register_buffer("anchors", torch.tensor(cfg.anchors, dtype=torch.float32), persistent=False)

    def raw_outputs(self, images: Tensor) -> list[Tensor]:
        """Per scale (strides 32, 16, 8) raw predictions ``(B, 3, H_s, W_s, 5 + C)``."""
        if self.cfg.input_scale != 1.0:
            images = images * self.cfg.input_scale
        c8, c16, c32 = self.backbone(images)
        route, out32 = self.head32(c32)
        route, out16 = self.head16(torch.cat((F.interpolate(self.route16(route), scale_factor=2.0), c16), dim=1))
        _, out8 = self.head8(torch.cat((F.interpolate(self.route8(route), scale_factor=2.0), c8), dim=1))
        outputs = []
        for out in (out32, out16, out8):
            batch, _, height, width = out.shape
            outputs.append(out.view(batch, len(ANCHOR_MASKS[0]), -1, height, width).permute(0, 1, 3, 4, 2))
        return outputs

    def forward(
        self, images: Tensor, image_sizes: Sequence[tuple[int, int]], targets: Sequence[dict[str, Tensor]] | None = None
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        outputs = self.raw_outputs(images)
        if self.training:
            return self.losses(outputs, targets)
        return self.detect(outputs, image_sizes)

    def losses(self, outputs: Sequence[Tensor], targets: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """GIoU box loss and class BCE over assigned anchors, objectness BCE over all anchors."""
        grid_sizes = [tuple(out.shape[2:4]) for out in outputs]
        assigned = assign_targets(targets, self.anchors, ANCHOR_MASKS, STRIDES, grid_sizes)
        zero = outputs[0].sum() * 0.0
        loss_box, loss_obj, loss_cls = zero, zero, zero
        for out, match, mask, stride in zip(outputs, assigned, ANCHOR_MASKS, STRIDES):
            obj_target = torch.zeros_like(out[..., 4])
            if match["image"].numel():
                pred = out[match["image"], match["anchor"], match["gy"], match["gx"]]  # (P, 5 + C)
                anchor_wh = self.anchors[list(mask)][match["anchor"]] / stride  # grid units
                pred_box = torch.cat(
                    (pred[:, :2].sigmoid(), pred[:, 2:4].clamp(max=DEFAULT_SCALE_CLAMP).exp() * anchor_wh), dim=1
                )
                loss_box = loss_box + (1.0 - aligned_giou(pred_box, match["box"])).mean()
                obj_target[match["image"], match["anchor"], match["gy"], match["gx"]] = 1.0
                class_target = F.one_hot(match["label"], self.cfg.num_classes).to(pred.dtype)
                loss_cls = loss_cls + F.binary_cross_entropy_with_logits(pred[:, 5:], class_target)
            loss_obj = loss_obj + F.binary_cross_entropy_with_logits(out[..., 4], obj_target)
        return {"loss_box": BOX_GAIN * loss_box, "loss_obj": OBJ_GAIN * loss_obj, "loss_cls": CLS_GAIN * loss_cls}

    def detect(self, outputs: Sequence[Tensor], image_sizes: Sequence[tuple[int, int]]) -> list[dict[str, Tensor]]:
        """Decode, threshold, cap at ``max_nms`` candidates and run class-wise NMS per image."""
        cfg = self.cfg
        decoded = [
            decode_level(out, self.anchors[list(mask)], stride)
            for out, mask, stride in zip(outputs, ANCHOR_MASKS, STRIDES)
        ]
        boxes = torch.cat([d[0] for d in decoded], dim=1)  # (B, N, 4)
        scores = torch.cat([d[1] for d in decoded], dim=1)[..., None] * torch.cat(
            [d[2] for d in decoded], dim=1
        )  # (B, N, C)
        detections = []
        for image_boxes, image_scores, size in zip(boxes, scores, image_sizes):
            flat = image_scores.flatten()
            candidates = torch.nonzero(flat > cfg.conf_thresh).squeeze(1)
            if candidates.numel() > cfg.max_nms:
                candidates = candidates[flat[candidates].topk(cfg.max_nms).indices]
            anchor, label = candidates // cfg.num_classes, candidates % cfg.num_classes
            box, score = clip_boxes(image_boxes[anchor], size), flat[candidates]
            keep = batched_nms(box, score, label, cfg.iou_thresh, cfg.detections_per_image)
            detections.append({"boxes": box[keep], "scores": score[keep], "labels": label[keep]})
        return detections


def _create_yolov3(
    ctx: BuildContext, *, image_size: int | None = None, max_boxes: int | None = None, **kwargs: Any
) -> Workload:
    """YOLOv3 on letterboxed synthetic COCO-like batches; ``kwargs`` are :class:`YOLOv3Config` fields."""
    # Smoke: a quarter of the width (every Darknet and head conv kept) on 64x64 images, and 8
    # classes: with random weights nearly every (anchor, class) pair passes conf_thresh, and at
    # 80 classes the 20,160 candidates of a 64 px image made NMS run per class, 80 times a step.
    smoke = {"width": 8, "num_classes": 8} if ctx.smoke else {}
    cfg = YOLOv3Config(**{**smoke, **kwargs})
    side = image_size or ctx.pick(416, 64)
    if side < 32 or side % 32:
        raise ValueError(f"invalid YOLOv3 image_size {side}; accepted: a positive multiple of 32 (e.g. 320, 416, 608)")
    images, image_sizes, targets = synthetic_detection_batch(
        ctx, (side, side), cfg.num_classes, max_boxes or ctx.pick(20, 3)
    )
    model = YOLOv3(cfg)
    optimizer = None
    if ctx.train:  # yolov3.cfg: learning_rate=0.001, momentum=0.9, decay=0.0005
        optimizer = ctx.optimizer(model.parameters(), "sgd", lr=0.001, weight_decay=5e-4)
    return DetectionWorkload(ctx, model, (images, image_sizes), targets, optimizer=optimizer)


@register_model(
    domain="vision",
    task="object_detection",
    source="Redmon & Farhadi, YOLOv3, 2018; Darknet yolov3.cfg via ultralytics/yolov3",
    batch_size=(16, 8),
    param_count=61_949_149,
)
def yolov3_416(ctx: BuildContext, **kwargs: Any) -> Workload:
    """YOLOv3 (yolov3.cfg: Darknet-53, 80 COCO classes) at 416x416 (smoke: 64x64, a quarter of the width, 8 classes)."""
    return _create_yolov3(ctx, **kwargs)
