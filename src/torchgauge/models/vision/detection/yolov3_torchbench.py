"""TorchBench's ``yolov3``: YOLOv3-SPP with ultralytics' training step and NMS.

TorchBench (``torchbenchmark/models/yolov3``) runs the ultralytics/yolov3 port (GPL-3.0) of
Darknet's ``yolov3-spp.cfg``: 62,998,749 parameters, BatchNorm eps 1e-4 and momentum 0.03,
output biases starting at -4.5 (objectness) and log(0.6 / 79.01) (classes). Written from its
``__init__.py``, ``yolo_train.py``, ``yolo_models.py`` and ``yolo_utils/utils.py``; no code copied.

- **eval**: ``Darknet(rand(B, 3, 384, 512))`` (no pixel scaling) returns the decoded
  predictions ``(B, N, 85)`` and the raw maps, then ``non_max_suppression(conf 0.3, IoU 0.6,
  best class only)`` with its box-merging step. TorchBench returns the network outputs and
  drops the NMS result; the step here does the same work and returns the same tensors.
- **train**: one ``train()`` of TorchBench is one batch of its loop at iteration 0: uint8
  images ``/ 255``, forward, ultralytics' loss (its per-scale anchor matching at shape IoU >
  0.2, GIoU box loss, BCE objectness and classes) times ``batch / 64``, backward, Nesterov
  SGD with three parameter groups at their burn-in values for iteration 0 (BatchNorm and
  conv weights at learning rate 0, biases at 0.1, momentum 0.9, no weight decay), then the
  model EMA update. Every call repeats iteration 0, so the learning rates never move.
"""

from __future__ import annotations

import math
from copy import deepcopy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ....registry import register_model
from ....workload import BuildContext, Workload
from .batch import random_boxes
from .boxes import box_iou, nms
from .yolov3 import ANCHOR_MASKS, STRIDES, YOLOv3, YOLOv3Config, aligned_giou

__all__ = [
    "ModelEMA",
    "UltralyticsDarknet",
    "burn_in_sgd",
    "build_targets",
    "non_max_suppression",
    "ultralytics_loss",
]

# ultralytics' Darknet port as TorchBench builds it (yolov3-spp.cfg).
TORCHBENCH_CONFIG = {"spp": True, "bn_eps": 1e-4, "bn_momentum": 0.03, "input_scale": 1.0, "output_bias": "ultralytics"}
# yolo_train.py's hyper-parameters: loss gains, matching threshold, burn-in start values.
GIOU_GAIN, OBJ_GAIN, CLS_GAIN = 3.54, 64.3, 37.4
MATCH_IOU = 0.20  # hyp["iou_t"]: an anchor takes a target whose shape IoU with it exceeds this
GIOU_RATIO = 0.0  # model.gr at iteration 0: objectness target 1 for every match
NOMINAL_BATCH = 64  # the loss is scaled by batch / 64
BIAS_LR, BURN_IN_MOMENTUM = 0.1, 0.9  # iteration 0 of the burn-in: weights at lr 0, biases at 0.1
EMA_DECAY, EMA_RAMP = 0.9999, 2000  # ModelEMA: decay * (1 - exp(-updates / ramp))
# Eval post-processing (TorchBench's eval()): thresholds, box size limits, merge cut-off.
CONF_THRESH, NMS_IOU = 0.3, 0.6
MIN_WH, MAX_WH = 2, 4096
MERGE_MAX = 3000  # boxes are merged (score-weighted mean of the overlapping ones) below this count
# Synthetic training labels per image: up to this many (a coco128 mosaic holds ~20 on average).
MAX_TARGETS = 40


class UltralyticsDarknet(YOLOv3):
    """YOLOv3 returning what ultralytics' ``Darknet`` returns.

    ``forward(images)`` with images in [0, 1): in training the raw maps ``[(B, 3, H_s, W_s, 5 + C)]``
    (strides 32, 16, 8); in evaluation ``(decoded, raw)``, ``decoded (B, N, 5 + C)`` holding
    box centre and size in pixels and sigmoid objectness and class scores, ordered (scale,
    anchor, y, x).
    """

    def forward(self, images: Tensor) -> list[Tensor] | tuple[Tensor, tuple[Tensor, ...]]:  # type: ignore[override]
        raw = self.raw_outputs(images)
        if self.training:
            return raw
        decoded = [self.decode(out, mask, stride) for out, mask, stride in zip(raw, ANCHOR_MASKS, STRIDES)]
        return torch.cat(decoded, dim=1), tuple(raw)

    def decode(self, raw: Tensor, mask: tuple[int, ...], stride: int) -> Tensor:
        """``(B, A, H, W, 5 + C)`` -> ``(B, A*H*W, 5 + C)``: xy = (sigmoid(t) + cell) * stride, wh = exp(t) * anchor."""
        batch, num_anchors, height, width, outputs = raw.shape
        ys = torch.arange(height, device=raw.device, dtype=raw.dtype)
        xs = torch.arange(width, device=raw.device, dtype=raw.dtype)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        grid = torch.stack((grid_x, grid_y), dim=-1)  # (H, W, 2) as (x, y)
        anchor_wh = self.anchors[list(mask)].to(raw.dtype).view(1, num_anchors, 1, 1, 2)
        xy = (raw[..., :2].sigmoid() + grid) * stride
        wh = raw[..., 2:4].exp() * anchor_wh
        return torch.cat((xy, wh, raw[..., 4:].sigmoid()), dim=-1).view(batch, -1, outputs)


def build_targets(
    outputs: list[Tensor], targets: Tensor, anchors: Tensor
) -> list[tuple[tuple[Tensor, Tensor, Tensor, Tensor], Tensor, Tensor, Tensor]]:
    """ultralytics' target assignment: at each scale, every anchor whose shape IoU with a target exceeds 0.2.

    Args:
        outputs: raw maps per scale ``(B, A, H, W, 5 + C)``, strides 32, 16, 8.
        targets: ``(N, 6)`` rows of (image, class, x, y, w, h), box centre and size normalised to [0, 1].
        anchors: ``(9, 2)`` anchor sizes in pixels.

    Returns:
        Per scale ``((image, anchor, gy, gx), box, anchor_wh, label)``: the cell of each match,
        its box as (offset in cell, size) and its anchor's size, both in grid units.
    """
    assigned = []
    for out, mask, stride in zip(outputs, ANCHOR_MASKS, STRIDES):
        anchor_wh = anchors[list(mask)] / stride  # (A, 2) grid units
        height, width = out.shape[2:4]
        gain = torch.tensor([1.0, 1.0, width, height, width, height], device=targets.device, dtype=targets.dtype)
        scaled = targets * gain
        wh = scaled[:, 4:6]
        inter = torch.min(anchor_wh[:, None], wh[None]).prod(dim=2)  # (A, N)
        iou = inter / (anchor_wh.prod(dim=1)[:, None] + wh.prod(dim=1)[None] - inter)
        anchor_idx, target_idx = (iou > MATCH_IOU).nonzero(as_tuple=True)
        matched = scaled[target_idx]
        image, label = matched[:, :2].long().T
        grid_xy = matched[:, 2:4]
        cell = grid_xy.long()
        gx, gy = cell.T
        box = torch.cat((grid_xy - cell, matched[:, 4:6]), dim=1)
        assigned.append(((image, anchor_idx, gy, gx), box, anchor_wh[anchor_idx], label))
    return assigned


def ultralytics_loss(outputs: list[Tensor], targets: Tensor, anchors: Tensor, num_classes: int) -> Tensor:
    """ultralytics' ``compute_loss`` at iteration 0: GIoU box, BCE objectness (all cells), BCE classes (matches)."""
    zero = outputs[0].sum() * 0.0
    loss_box, loss_obj, loss_cls = zero, zero, zero
    for out, ((image, anchor, gy, gx), box, anchor_wh, label) in zip(outputs, build_targets(outputs, targets, anchors)):
        obj_target = torch.zeros_like(out[..., 0])
        if image.numel():
            pred = out[image, anchor, gy, gx]  # (P, 5 + C)
            pred_box = torch.cat((pred[:, :2].sigmoid(), pred[:, 2:4].exp().clamp(max=1e3) * anchor_wh), dim=1)
            giou = aligned_giou(pred_box, box)
            loss_box = loss_box + (1.0 - giou).mean()
            obj_target[image, anchor, gy, gx] = (1.0 - GIOU_RATIO) + GIOU_RATIO * giou.detach().clamp(0).to(out.dtype)
            if num_classes > 1:
                class_target = torch.zeros_like(pred[:, 5:])
                class_target[torch.arange(len(label), device=label.device), label] = 1.0
                loss_cls = loss_cls + F.binary_cross_entropy_with_logits(pred[:, 5:], class_target)
        loss_obj = loss_obj + F.binary_cross_entropy_with_logits(out[..., 4], obj_target)
    return GIOU_GAIN * loss_box + OBJ_GAIN * loss_obj + CLS_GAIN * loss_cls


def non_max_suppression(
    prediction: Tensor, conf_thresh: float = CONF_THRESH, iou_thresh: float = NMS_IOU
) -> list[Tensor]:
    """ultralytics' NMS with one (best) class per box and box merging; per image ``(n, 6)`` (xyxy, score, class).

    Keeps predictions with objectness above ``conf_thresh`` and sides in (2, 4096) pixels,
    scores them ``objectness * best class probability`` (again above ``conf_thresh``), runs
    NMS per class and, for 2 to 2,999 candidates, replaces each kept box by the score-weighted
    mean of the candidates overlapping it by more than ``iou_thresh``.
    """
    detections = []
    for x in prediction:  # (N, 5 + C) per image
        x = x[x[:, 4] > conf_thresh]
        x = x[((x[:, 2:4] > MIN_WH) & (x[:, 2:4] < MAX_WH)).all(dim=1)]
        class_scores = x[:, 5:] * x[:, 4:5]
        box = torch.cat((x[:, :2] - x[:, 2:4] / 2, x[:, :2] + x[:, 2:4] / 2), dim=1)
        score, label = class_scores.max(dim=1)
        x = torch.cat((box, score[:, None], label[:, None].to(x.dtype)), dim=1)[score > conf_thresh]
        count = x.shape[0]
        if count:
            shifted = x[:, :4] + x[:, 5:6] * MAX_WH  # classes never overlap each other
            keep = nms(shifted, x[:, 4], iou_thresh)
            if 1 < count < MERGE_MAX:
                weights = (box_iou(shifted[keep], shifted) > iou_thresh) * x[:, 4][None]
                x[keep, :4] = torch.mm(weights, x[:, :4]) / weights.sum(dim=1, keepdim=True)
            x = x[keep]
        detections.append(x)
    return detections


def burn_in_sgd(model: nn.Module) -> torch.optim.SGD:
    """yolo_train.py's Nesterov SGD with its three groups (BatchNorm weights, conv weights, biases) at iteration 0."""
    norm_weights, conv_weights, biases = [], [], []
    for name, param in model.named_parameters():
        if name.endswith(".bias"):
            biases.append(param)
        elif param.ndim == 4:
            conv_weights.append(param)
        else:
            norm_weights.append(param)
    groups = [{"params": norm_weights}, {"params": conv_weights}, {"params": biases, "lr": BIAS_LR}]
    return torch.optim.SGD(groups, lr=0.0, momentum=BURN_IN_MOMENTUM, nesterov=True, weight_decay=0.0)


class ModelEMA:
    """ultralytics' (and timm's) model EMA: a copy whose floating-point state follows the model's.

    ``update(model)``: every floating-point entry of the state dict becomes ``d * ema + (1 - d)
    * model`` with ``d = decay * (1 - exp(-updates / ramp))``.
    """

    def __init__(self, model: nn.Module, decay: float = EMA_DECAY, ramp: float = EMA_RAMP):
        self.module = deepcopy(model).eval()
        for param in self.module.parameters():
            param.requires_grad_(False)
        self.decay, self.ramp, self.updates = decay, ramp, 0

    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.ramp))
        with torch.no_grad():
            current = model.state_dict()
            for key, value in self.module.state_dict().items():
                if value.dtype.is_floating_point:
                    value *= d
                    value += (1.0 - d) * current[key].detach()


class UltralyticsYOLOWorkload(Workload):
    """TorchBench's step for :class:`UltralyticsDarknet` (see the module docstring).

    ``inputs`` is ``(images,)``: uint8 ``(B, 3, H, W)`` in training, float [0, 1) in eval;
    ``targets`` the ``(N, 6)`` label rows of :func:`build_targets`.
    """

    def __init__(self, ctx: BuildContext, module: UltralyticsDarknet, inputs: tuple, targets: Tensor | None, **kw: Any):
        super().__init__(ctx, module, inputs, targets, **kw)
        self.ema = ModelEMA(module) if ctx.train else None

    def forward(self) -> Any:
        (images,) = self.inputs
        if self.module.training:
            return self.module(images.float() / 255.0)  # yolo_train.py converts inside its loop
        decoded, raw = self.module(images)
        non_max_suppression(decoded)  # TorchBench's eval() runs NMS and returns the network outputs
        return (decoded, *raw)

    def compute_loss(self, outputs: list[Tensor]) -> Tensor:
        loss = ultralytics_loss(outputs, self.targets, self.module.anchors, self.module.cfg.num_classes)
        return loss * (self.batch_size / NOMINAL_BATCH)

    def train_step(self) -> Tensor:
        loss = super().train_step()
        self.ema.update(self.module)
        return loss


def _synthetic_targets(ctx: BuildContext, side: int, num_classes: int, max_targets: int) -> Tensor:
    """``(N, 6)`` label rows (image, class, x, y, w, h) normalised to the ``side``-pixel square image."""
    counts = torch.randint(1, max_targets + 1, (ctx.batch_size,), generator=ctx.generator(), device="cpu").tolist()
    rows = []
    for image, count in enumerate(counts):
        boxes = random_boxes(ctx, count, (side, side)) / side  # xyxy in [0, 1]
        centre, size = (boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]
        labels = ctx.randint(0, num_classes, (count,)).to(boxes.dtype)
        index = torch.full((count,), float(image), device=boxes.device)
        rows.append(torch.cat((index[:, None], labels[:, None], centre, size), dim=1))
    return torch.cat(rows)


def _create_torchbench_yolov3(ctx: BuildContext, *, max_targets: int | None = None, **kwargs: Any) -> Workload:
    """TorchBench's yolov3 workload; ``kwargs`` are :class:`~.yolov3.YOLOv3Config` fields."""
    # Smoke: a quarter of the width (every conv and the SPP block kept) and 8 classes, small images.
    smoke = {"width": 8, "num_classes": 8} if ctx.smoke else {}
    cfg = YOLOv3Config(**{**TORCHBENCH_CONFIG, **smoke, **kwargs})
    model = UltralyticsDarknet(cfg).to(ctx.device)  # on the device before the EMA copies it
    if not ctx.train:  # TorchBench's eval input: torch.rand(B, 3, 384, 512), no pixel scaling
        height, width = ctx.pick((384, 512), (64, 96))
        return UltralyticsYOLOWorkload(ctx, model, (ctx.rand(ctx.batch_size, 3, height, width),), None)
    side = ctx.pick(416, 64)  # yolo_train.py --img 416: square mosaic batches
    images = (ctx.rand(ctx.batch_size, 3, side, side) * 256).to(torch.uint8)
    targets = _synthetic_targets(ctx, side, cfg.num_classes, max_targets or ctx.pick(MAX_TARGETS, 3))
    return UltralyticsYOLOWorkload(ctx, model, (images,), targets, optimizer=burn_in_sgd(model))


@register_model(
    domain="vision",
    task="object_detection",
    source="TorchBench yolov3: ultralytics/yolov3 Darknet(yolov3-spp.cfg); Redmon & Farhadi, YOLOv3, 2018",
    batch_size=(16, 8),
    param_count=62_998_749,
    torchbench_precision={"cuda": {"eval": "amp"}},  # TorchBench models/yolov3/__init__.py:49
)
def yolov3(ctx: BuildContext, **kwargs: Any) -> Workload:
    """TorchBench's YOLOv3-SPP: train 416x416 uint8 batches, eval rand(B, 3, 384, 512) + NMS (smoke: 64 px, narrow)."""
    return _create_torchbench_yolov3(ctx, **kwargs)
