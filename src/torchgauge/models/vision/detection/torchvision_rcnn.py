"""torchvision's Mask R-CNN as one module: ``GeneralizedRCNNTransform`` around the R-CNN.

torchvision's detectors take a list of raw images (``float`` ``(3, H, W)`` in [0, 1], any
size) and, inside the model's forward, normalise each with ImageNet's mean and std, resize it
so its short side is ``min_size`` (long side at most ``max_size``, bilinear), zero-pad the
batch to multiples of ``size_divisible`` and, in training, resize the targets' boxes and masks
with it. In evaluation the detections are mapped back to each image's original size: boxes
scaled, and each detection's 28 x 28 mask probabilities pasted into a full-size image one
detection at a time (``paste_masks_in_image``: the mask padded by one cell, its box grown to
match, resized to the box's integer size and copied into a zero image). This module does the
same steps (torchvision, BSD-3-Clause: ``models/detection/transform.py``,
``models/detection/roi_heads.py``), so TorchBench's ``vision_maskrcnn`` step, which calls
``model(images)`` on a raw COCO image, runs them in the timed step here too.
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
from .batch import DetectionWorkload, _ellipse_masks, random_boxes
from .rcnn import TORCHVISION_RCNN, GeneralizedRCNN, RCNNConfig, rcnn_config

__all__ = ["TorchvisionMaskRCNN", "TransformConfig", "paste_masks_in_image", "resized_size"]


@dataclass(frozen=True)
class TransformConfig:
    """``GeneralizedRCNNTransform``'s settings; defaults are ``maskrcnn_resnet50_fpn``'s."""

    min_size: tuple[int, ...] = (800,)  # short side; training draws one, evaluation takes the last
    max_size: int = 1333  # cap on the long side
    image_mean: tuple[float, float, float] = (0.485, 0.456, 0.406)  # of [0, 1] pixels
    image_std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    size_divisible: int = 32  # padded batch sides are multiples of this


def resized_size(size: tuple[int, int], min_size: float, max_size: float) -> tuple[int, int]:
    """``(height, width)`` torchvision resizes ``size`` to: one scale for both sides (Python floats,
    as its eager path), the short side to ``min_size`` unless the long side would pass ``max_size``;
    ``interpolate(..., recompute_scale_factor=True)`` then floors each side times the scale."""
    scale = min(min_size / min(size), max_size / max(size))
    return math.floor(size[0] * scale), math.floor(size[1] * scale)


class GeneralizedRCNNTransform(nn.Module):
    """Normalise, resize and batch raw images (and their targets); map detections back."""

    def __init__(self, cfg: TransformConfig):
        super().__init__()
        self.cfg = cfg

    def forward(
        self, images: Sequence[Tensor], targets: Sequence[dict[str, Tensor]] | None = None
    ) -> tuple[Tensor, list[tuple[int, int]], list[dict[str, Tensor]] | None]:
        """``images``: ``(3, H_i, W_i)`` floats in [0, 1]. Returns the padded batch ``(B, 3, H, W)``,
        each image's size after resizing, and the resized targets (new dicts; inputs untouched)."""
        resized, sizes, new_targets = [], [], None if targets is None else []
        for i, image in enumerate(images):
            if image.dim() != 3 or not image.is_floating_point():
                raise ValueError(f"images must be float (3, H, W) tensors in [0, 1], got {image.dtype} {image.shape}")
            mean = torch.as_tensor(self.cfg.image_mean, dtype=image.dtype, device=image.device)
            std = torch.as_tensor(self.cfg.image_std, dtype=image.dtype, device=image.device)
            image = (image - mean[:, None, None]) / std[:, None, None]
            target = None if targets is None else dict(targets[i])
            image, target = self._resize(image, target)
            resized.append(image)
            sizes.append((image.shape[-2], image.shape[-1]))
            if new_targets is not None:
                new_targets.append(target)
        return self._batch(resized), sizes, new_targets

    def _resize(self, image: Tensor, target: dict[str, Tensor] | None) -> tuple[Tensor, dict[str, Tensor] | None]:
        if self.training:  # torchvision draws the short side with torch's RNG (one of one by default)
            short = self.cfg.min_size[int(torch.empty(1).uniform_(0.0, float(len(self.cfg.min_size))).item())]
        else:
            short = self.cfg.min_size[-1]
        height, width = image.shape[-2:]
        new_size = resized_size((height, width), float(short), float(self.cfg.max_size))
        image = F.interpolate(image[None], size=new_size, mode="bilinear", align_corners=False)[0]
        if target is None:
            return image, None
        if "masks" in target:  # nearest-neighbour, back to uint8
            masks = F.interpolate(target["masks"][:, None].float(), size=new_size)[:, 0].byte()
            target["masks"] = masks
        target["boxes"] = scale_boxes(target["boxes"], (height, width), new_size)
        return image, target

    def _batch(self, images: list[Tensor]) -> Tensor:
        step = self.cfg.size_divisible
        height = math.ceil(max(img.shape[-2] for img in images) / step) * step
        width = math.ceil(max(img.shape[-1] for img in images) / step) * step
        batch = images[0].new_zeros((len(images), images[0].shape[0], height, width))
        for image, padded in zip(images, batch):
            padded[:, : image.shape[-2], : image.shape[-1]].copy_(image)
        return batch

    def postprocess(
        self,
        detections: list[dict[str, Tensor]],
        image_sizes: Sequence[tuple[int, int]],
        original_sizes: Sequence[tuple[int, int]],
    ) -> list[dict[str, Tensor]]:
        """Boxes scaled to each original image; ``masks (N, 1, M, M)`` probabilities pasted into it."""
        for detection, size, original in zip(detections, image_sizes, original_sizes):
            detection["boxes"] = scale_boxes(detection["boxes"], size, original)
            if "masks" in detection:
                detection["masks"] = paste_masks_in_image(detection["masks"], detection["boxes"], original)
        return detections


def scale_boxes(boxes: Tensor, old_size: Sequence[int], new_size: Sequence[int]) -> Tensor:
    """Boxes ``(N, 4)`` from an image of ``old_size`` to one of ``new_size``, by per-axis float32 ratios."""
    ratio_h, ratio_w = (
        torch.tensor(new, dtype=torch.float32, device=boxes.device)
        / torch.tensor(old, dtype=torch.float32, device=boxes.device)
        for new, old in zip(new_size, old_size)
    )
    x1, y1, x2, y2 = boxes.unbind(1)
    return torch.stack((x1 * ratio_w, y1 * ratio_h, x2 * ratio_w, y2 * ratio_h), dim=1)


def paste_masks_in_image(masks: Tensor, boxes: Tensor, image_size: tuple[int, int], padding: int = 1) -> Tensor:
    """torchvision's mask pasting: ``masks (N, 1, M, M)`` probabilities into ``(N, 1, H, W)``.

    Each mask is padded by ``padding`` cells and its box grown by ``(M + 2 padding) / M`` about
    its centre and cut to integer corners; then, one detection at a time, the mask is resized
    (bilinear) to the box's ``(y2 - y1 + 1, x2 - x1 + 1)`` and the part inside the image copied
    into zeros. The box corners are read back to the host per detection, as torchvision does.
    """
    height, width = image_size
    if masks.shape[0] == 0:
        return masks.new_zeros((0, 1, height, width))
    side = masks.shape[-1]
    scale = (side + 2 * padding) / side
    masks = F.pad(masks, (padding,) * 4)
    centre = (boxes[:, :2] + boxes[:, 2:]) * 0.5
    half = (boxes[:, 2:] - boxes[:, :2]) * 0.5 * scale
    grown = torch.cat((centre - half, centre + half), dim=1).to(torch.int64)
    pasted = []
    for mask, box in zip(masks, grown):
        x1, y1, x2, y2 = box.tolist()
        w, h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        resized = F.interpolate(mask[None], size=(h, w), mode="bilinear", align_corners=False)[0, 0]
        canvas = resized.new_zeros((height, width))
        x0, x_end, y0, y_end = max(x1, 0), min(x2 + 1, width), max(y1, 0), min(y2 + 1, height)
        canvas[y0:y_end, x0:x_end] = resized[y0 - y1 : y_end - y1, x0 - x1 : x_end - x1]
        pasted.append(canvas)
    return torch.stack(pasted)[:, None]


class TorchvisionMaskRCNN(nn.Module):
    """``model(images, targets=None)`` as torchvision's ``MaskRCNN``: raw images in, losses or detections out.

    Detections are torchvision's: per image ``boxes (N, 4)`` at the original size, ``scores``,
    ``labels`` and ``masks (N, 1, H, W)`` probabilities. ``rcnn`` runs with its own pixel
    normalisation switched off (the transform has normalised) and leaves its masks unpasted.
    """

    def __init__(self, cfg: RCNNConfig, transform: TransformConfig):
        super().__init__()
        if cfg.paste_masks:
            raise ValueError("paste_masks=True: the transform pastes masks; accepted: RCNNConfig(paste_masks=False)")
        self.transform = GeneralizedRCNNTransform(transform)
        self.rcnn = GeneralizedRCNN(cfg)

    @property
    def cfg(self) -> RCNNConfig:
        return self.rcnn.cfg

    def forward(
        self, images: Sequence[Tensor], targets: Sequence[dict[str, Tensor]] | None = None
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        original_sizes = [(image.shape[-2], image.shape[-1]) for image in images]
        batch, image_sizes, targets = self.transform(images, targets)
        if self.training:
            return self.rcnn.forward_normalized(batch, image_sizes, targets)
        detections = self.rcnn.forward_normalized(batch, image_sizes)
        return self.transform.postprocess(detections, image_sizes, original_sizes)


class RawImageDetectionWorkload(DetectionWorkload):
    """``inputs = (images,)``: a list of raw ``(3, H, W)`` images, as torchvision's detectors take them."""

    def forward(self) -> Any:
        (images,) = self.inputs
        if self.module.training:
            return self.module(images, self.targets)
        return self.module(images)


# TorchBench feeds the first image of coco_2017_val_100 at its size on disk; which images that
# subset holds is not in TorchBench's repository, so a 480 x 640 photo (COCO's most common size,
# the Detectron2 rows' stand-in) stands for it. Smoke: 96 x 120, evaluated at 128 x 160.
SOURCE_SIZE = (480, 640)
SMOKE_SOURCE_SIZE = (96, 120)
SMOKE_TRANSFORM = TransformConfig(min_size=(128,), max_size=213)


def _raw_coco_batch(ctx: BuildContext, size: tuple[int, int], num_classes: int, max_boxes: int):
    """One raw image ``(3, H, W)`` in [0, 1) and its COCO-style target: boxes, labels 1..K, uint8 masks."""
    image = ctx.rand(3, *size)
    count = int(torch.randint(1, max_boxes + 1, (1,), generator=ctx.generator(), device="cpu"))  # host: meta too
    boxes = random_boxes(ctx, count, size)
    target = {
        "boxes": boxes,
        "labels": ctx.randint(1, num_classes + 1, (count,)),
        "masks": _ellipse_masks(boxes, *size),  # (N, H, W) uint8, as ConvertCocoPolysToMask makes them
    }
    return [image], [target]


# Random weights give every class ~1/91 of a proposal's probability, under torchvision's 0.05
# score threshold: no detection would survive and the mask head and pasting would leave the
# step. A COCO-trained model (TorchBench loads COCO_V1 weights) keeps tens of detections of a
# cluttered image at 0.05, often the cap of 100, each from many proposals scoring one of a few
# classes. So the class-score layer starts with this prior in its bias (its weights keep
# torchvision's std 0.01, so every proposal scores about the prior): background 0.7, two
# classes drawn per seed 0.1 each (over the threshold), the other 88 share 0.1.
PRIOR_BACKGROUND = 0.7
PRIOR_PRESENT = 0.1
PRESENT_CLASSES = 2


def init_detecting_prior(cls_score: nn.Linear, generator: torch.Generator) -> list[int]:
    """Set ``cls_score``'s bias (background first, then K classes) to the log of the prior above.

    Returns the class ids that score over the threshold.
    """
    num_classes = cls_score.out_features - 1
    present = (torch.randperm(num_classes, generator=generator, device="cpu")[:PRESENT_CLASSES] + 1).tolist()
    others = (1.0 - PRIOR_BACKGROUND - PRIOR_PRESENT * PRESENT_CLASSES) / (num_classes - PRESENT_CLASSES)
    prior = torch.full((num_classes + 1,), others, device="cpu")
    prior[0] = PRIOR_BACKGROUND
    prior[present] = PRIOR_PRESENT
    with torch.no_grad():
        cls_score.bias.copy_(prior.log())
    return sorted(present)


@register_model(
    domain="vision",
    task="instance_segmentation",
    source="torchvision maskrcnn_resnet50_fpn (He et al., Mask R-CNN, 2017)",
    batch_size=(1, 1),  # TorchBench vision_maskrcnn DEFAULT_TRAIN_BSIZE / DEFAULT_EVAL_BSIZE
    param_count=44_401_393,
    notes="TorchBench's step: a raw 480x640 image through torchvision's transform (normalise, resize to "
    "800 x 1066, pad to 800 x 1088) inside the model; torchvision's test thresholds",
)
def vision_maskrcnn(ctx: BuildContext, **kwargs: Any) -> Workload:
    """torchvision's Mask R-CNN ResNet-50-FPN (91 class ids) with its transform, on a raw image."""
    family = {**TORCHVISION_RCNN, "mask_threshold": None, "paste_masks": False, "detection_min_size": 1e-2}
    cfg = rcnn_config(ctx, family, **{"depth": 50, "neck": "fpn", "mask_on": True, **kwargs})
    model = TorchvisionMaskRCNN(cfg, ctx.pick(TransformConfig(), SMOKE_TRANSFORM))
    init_detecting_prior(model.rcnn.roi_heads.cls_score, ctx.generator())
    images, targets = _raw_coco_batch(ctx, ctx.pick(SOURCE_SIZE, SMOKE_SOURCE_SIZE), cfg.num_classes, ctx.pick(20, 3))
    optimizer = None
    if ctx.train:  # TorchBench: SGD(lr 0.02, momentum 0.9, weight decay 1e-4) over the trainable weights
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = ctx.optimizer(trainable, "sgd", lr=0.02, weight_decay=1e-4)
    return RawImageDetectionWorkload(ctx, model, (images,), targets, optimizer=optimizer)
