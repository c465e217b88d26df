"""DBNet text detector: docTR's ``db_resnet50`` (the network behind TorchBench's ``doctr_det_predictor``).

Paper: Liao et al., "Real-time Scene Text Detection with Differentiable Binarization" (2019).
Layers follow docTR's ``doctr/models/detection/differentiable_binarization/pytorch.py``
(Apache-2.0, https://github.com/mindee/doctr): a torchvision ResNet-50 (this package's
:class:`~torchgauge.models.vision.resnet.ResNet` without its classifier) feeding a feature
pyramid whose four levels are each reduced to 64 channels, upsampled to stride 4 and
concatenated; a probability head and a threshold head (3x3 conv, two stride-2 transposed
convs) return full-resolution maps.

Two registrations. ``doctr_det_predictor`` is TorchBench's benchmark: eval only (its ``train()``
raises NotImplementedError; CPU is ``not_implemented`` in its metadata), batch 1, the bare
detection model (``predictor.det_predictor.model``) called on ``randn(B, 3, 1024, 1024)`` with
``return_model_output=True``, which also post-processes the probability map: docTR's
pre-processor is not part of the call, so the pages are not normalised here either.
``db_resnet50`` is the same network as docTR's training reference runs it: 0-255 pages normalised
by docTR's mean and std inside the model, training at batch 2, evaluation at batch 1. 25,412,162
parameters, as docTR's ``db_resnet50`` (torchvision ResNet-50 to layer4, FPN, two heads).

Training loss (docTR <= 0.5, after the paper): ``5 * balanced BCE`` on the probability map
(all positives, the hardest negatives up to 3x as many) ``+ dice`` on the approximate binary
map ``1 / (1 + exp(-50 (P - T)))`` ``+ 10 * masked L1`` on the threshold map. Targets come from
synthetic axis-aligned text boxes with the paper's Vatti offset ``D = A (1 - r^2) / L``
(``r = 0.4``) computed exactly for rectangles; they are built once with the batch, whereas docTR
builds them with NumPy/OpenCV inside every loss call.

Evaluation output (one dict per image; the detection format of this package with one class)::

    {"boxes": Tensor (N, 4) float xyxy in input pixels, "scores": Tensor (N,) float mean
     probability of the region, "labels": Tensor (N,) int64, all 0 ("words")}

Post-processing (docTR's ``DBPostProcessor`` for straight pages) binarises the probability map
at 0.3, finds 8-connected regions, drops regions under 2 px or scoring under 0.1 and expands
each region's bounding box by ``D' = A * 1.5 / L``. Documented simplification: regions are
found by tensor connected-component labelling (:func:`connected_components`) and boxed by
their pixel extent, instead of OpenCV contours and polygon offsetting; for the axis-aligned
boxes docTR keeps on straight pages the resulting boxes are the same, and the score is the mean
probability over the region's pixels rather than over its bounding rectangle.
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
from ...common.resnet import SMOKE_WIDTH_MULT, Bottleneck, ResNet

__all__ = [
    "DBNet",
    "DBNetConfig",
    "TextDetectionWorkload",
    "balanced_bce_loss",
    "connected_components",
    "db_targets",
    "dice_loss",
    "differentiable_binarization",
    "masked_l1_loss",
    "regions_to_boxes",
    "synthetic_text_boxes",
]

# Amplifying factor k of the paper's approximate step function B = 1 / (1 + exp(-k (P - T))).
DB_K = 50.0
# Negatives kept per positive by the balanced BCE (the paper's hard-negative ratio).
NEGATIVE_RATIO = 3.0
# Loss weights of docTR <= 0.5 (the paper's alpha and beta): 5 * BCE + dice + 10 * L1.
BCE_WEIGHT, L1_WEIGHT = 5.0, 10.0
# Regions with a side under this many pixels are dropped (docTR's min_size_box).
MIN_REGION_SIDE = 2


@dataclass(frozen=True)
class DBNetConfig:
    """docTR ``db_resnet50`` with its default post-processing."""

    head_chans: int = 256  # FPN width; each of the 4 levels contributes head_chans // 4
    backbone_width_mult: float = 1.0  # ResNet-50 stage widths (see resnet.ResNet's width_mult)
    shrink_ratio: float = 0.4  # r of the text-kernel offset D = A (1 - r^2) / L
    thresh_min: float = 0.3  # threshold-map target range
    thresh_max: float = 0.7
    bin_thresh: float = 0.3  # probability above which a pixel is text
    box_thresh: float = 0.1  # minimum mean probability of a kept region
    unclip_ratio: float = 1.5  # region expansion D' = A * ratio / L
    # docTR's page normalisation (db_resnet50 default_cfgs)
    mean: tuple[float, float, float] = (0.798, 0.785, 0.772)
    std: tuple[float, float, float] = (0.264, 0.2749, 0.287)
    normalize: bool = True  # False: the pages go to the network as given (TorchBench's bare-model call)


class FeatureFusion(nn.Module):
    """docTR's DB feature pyramid: per level 1x1 conv-BN-ReLU to ``out_ch``, top-down sum with
    bilinear 2x upsampling, then 3x3 conv-BN-ReLU to ``out_ch / L`` upsampled to the finest
    level, and concatenation to ``(B, out_ch, H/4, W/4)``."""

    def __init__(self, in_channels: Sequence[int], out_ch: int):
        super().__init__()
        level_ch = out_ch // len(in_channels)
        self.in_branches = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True))
            for c in in_channels
        )
        self.out_branches = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(out_ch, level_ch, 3, padding=1, bias=False), nn.BatchNorm2d(level_ch), nn.ReLU(inplace=True)
            )
            for _ in in_channels
        )

    def forward(self, features: Sequence[Tensor]) -> Tensor:
        lateral = [branch(x) for branch, x in zip(self.in_branches, features)]
        merged = [lateral[-1]]
        for x in lateral[-2::-1]:  # coarse to fine
            merged.insert(0, x + F.interpolate(merged[0], size=x.shape[-2:], mode="bilinear", align_corners=True))
        size = merged[0].shape[-2:]
        outs = [branch(x) for branch, x in zip(self.out_branches, merged)]
        outs = [outs[0]] + [F.interpolate(x, size=size, mode="bilinear", align_corners=True) for x in outs[1:]]
        return torch.cat(outs, dim=1)


def _map_head(in_ch: int) -> nn.Sequential:
    """3x3 conv-BN-ReLU, 2x transposed conv-BN-ReLU, 2x transposed conv to one channel (stride 4 -> 1)."""
    mid = in_ch // 4
    return nn.Sequential(
        nn.Conv2d(in_ch, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
        nn.ConvTranspose2d(mid, mid, 2, stride=2, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
        nn.ConvTranspose2d(mid, 1, 2, stride=2),
    )  # fmt: skip


# -- loss pieces (pure functions) --------------------------------------------------------------
def differentiable_binarization(prob: Tensor, thresh: Tensor, k: float = DB_K) -> Tensor:
    """Approximate binary map ``1 / (1 + exp(-k (prob - thresh)))`` (the paper's eq. 2)."""
    return torch.sigmoid(k * (prob - thresh))


def balanced_bce_loss(logits: Tensor, target: Tensor, mask: Tensor, negative_ratio: float = NEGATIVE_RATIO) -> Tensor:
    """BCE over all positive pixels and the hardest ``negative_ratio`` x as many negatives.

    Only pixels with ``mask`` set count. Returns the summed BCE of the kept pixels divided by
    their number (0 when there are none). The hard negatives are ranked without a host sync.
    """
    mask = mask.bool()
    bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")[mask]
    positive = target[mask]
    num_pos = positive.sum()
    num_neg = torch.minimum((1 - positive).sum(), negative_ratio * num_pos)
    negative_bce = (bce * (1 - positive)).sort(descending=True).values
    rank = torch.arange(negative_bce.numel(), device=bce.device)
    hard_negative = torch.where(rank < num_neg, negative_bce, torch.zeros_like(negative_bce)).sum()
    return ((bce * positive).sum() + hard_negative) / (num_pos + num_neg).clamp(min=1.0)


def dice_loss(binary: Tensor, target: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """``1 - 2 |B n G| / (|B| + |G|)`` over the masked pixels."""
    inter = (binary * target * mask).sum()
    cardinality = ((binary + target) * mask).sum()
    return 1.0 - 2.0 * inter / (cardinality + eps)


def masked_l1_loss(pred: Tensor, target: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Mean absolute error over the pixels where ``mask`` is set."""
    return ((pred - target).abs() * mask).sum() / (mask.sum() + eps)


# -- targets -------------------------------------------------------------------------------------
def _offset(boxes: Tensor, ratio: float) -> Tensor:
    """Vatti offset ``A * ratio / L`` of rectangles ``(N, 4)``: area A, perimeter L."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    return w * h * ratio / (2 * (w + h)).clamp(min=1e-6)


def db_targets(
    boxes: Sequence[Tensor],
    height: int,
    width: int,
    shrink_ratio: float = 0.4,
    thresh_min: float = 0.3,
    thresh_max: float = 0.7,
) -> dict[str, Tensor]:
    """Probability and threshold targets ``(B, 1, H, W)`` for axis-aligned text boxes.

    ``seg_target`` is 1 on each box shrunk by ``D = A (1 - r^2) / L``; ``seg_mask`` is 0 on
    boxes too small to shrink (they are ignored, as in docTR). ``thresh_target`` is
    ``thresh_min + (thresh_max - thresh_min) * (1 - min(dist / D, 1))`` with ``dist`` the
    distance of the pixel centre to the box outline, maximised over boxes; ``thresh_mask``
    covers every box dilated by ``D``.
    """
    device = boxes[0].device if len(boxes) else torch.device("cpu")
    batch = len(boxes)
    seg_target = torch.zeros(batch, 1, height, width, device=device)
    seg_mask = torch.ones_like(seg_target)
    thresh_value = torch.zeros_like(seg_target)
    thresh_mask = torch.zeros_like(seg_target)
    ys = torch.arange(height, device=device, dtype=torch.float32) + 0.5
    xs = torch.arange(width, device=device, dtype=torch.float32) + 0.5
    for i, image_boxes in enumerate(boxes):
        offsets = _offset(image_boxes, 1 - shrink_ratio**2).tolist()
        for (x1, y1, x2, y2), d in zip(image_boxes.tolist(), offsets):
            inside_y, inside_x = (ys >= y1) & (ys < y2), (xs >= x1) & (xs < x2)
            if x2 - x1 - 2 * d < 1 or y2 - y1 - 2 * d < 1 or d <= 0:
                seg_mask[i, 0][inside_y[:, None] & inside_x[None, :]] = 0.0
                continue
            shrunk = ((ys >= y1 + d) & (ys < y2 - d))[:, None] & ((xs >= x1 + d) & (xs < x2 - d))[None, :]
            seg_target[i, 0][shrunk] = 1.0
            # distance to the rectangle outline: inside, to the nearest side; outside, to the rectangle
            dx_out = torch.clamp(torch.maximum(x1 - xs, xs - x2), min=0)
            dy_out = torch.clamp(torch.maximum(y1 - ys, ys - y2), min=0)
            dx_in = torch.clamp(torch.minimum(xs - x1, x2 - xs), min=0)
            dy_in = torch.clamp(torch.minimum(ys - y1, y2 - ys), min=0)
            outside = torch.hypot(dy_out[:, None], dx_out[None, :])
            inside = torch.minimum(dy_in[:, None], dx_in[None, :])
            dist = torch.where(outside > 0, outside, inside)
            dilated = ((ys >= y1 - d) & (ys < y2 + d))[:, None] & ((xs >= x1 - d) & (xs < x2 + d))[None, :]
            value = torch.where(dilated, 1.0 - (dist / d).clamp(max=1.0), torch.zeros_like(dist))
            thresh_value[i, 0] = torch.maximum(thresh_value[i, 0], value)
            thresh_mask[i, 0][dilated] = 1.0
    thresh_target = thresh_min + (thresh_max - thresh_min) * thresh_value
    return {"seg_target": seg_target, "seg_mask": seg_mask, "thresh_target": thresh_target, "thresh_mask": thresh_mask}


# -- post-processing -----------------------------------------------------------------------------
def connected_components(mask: Tensor) -> Tensor:
    """8-connected component labels ``(B, H, W)`` int64 of a boolean ``(B, H, W)`` mask.

    Background is 0; each component is labelled ``1 +`` its largest flat pixel index. Labels
    start as ``1 + index`` and grow by 3x3 max-pooling within the mask; after each round every
    label ``L`` is replaced by the label of pixel ``L - 1`` (same component, never smaller),
    which doubles the distance labels travel per round. Each round ends with one host sync.
    """
    batch, height, width = mask.shape
    # float32 holds integers exactly up to 2**24; larger maps need float64
    dtype = torch.float32 if height * width < 2**24 else torch.float64
    index = torch.arange(1, height * width + 1, device=mask.device, dtype=dtype).view(1, height, width)
    labels = torch.where(mask, index, torch.zeros((), device=mask.device, dtype=dtype))
    while True:
        pooled = F.max_pool2d(labels[:, None], 3, stride=1, padding=1)[:, 0]
        flat = torch.where(mask, pooled, torch.zeros_like(pooled)).view(batch, -1)
        jumped = torch.gather(flat, 1, (flat.long() - 1).clamp(min=0))
        new = torch.where(flat > 0, torch.maximum(flat, jumped), flat).view(batch, height, width)
        if torch.equal(new, labels):
            return labels.long()
        labels = new


def regions_to_boxes(
    prob: Tensor,
    bin_thresh: float = 0.3,
    box_thresh: float = 0.1,
    unclip_ratio: float = 1.5,
    min_side: int = MIN_REGION_SIDE,
) -> list[dict[str, Tensor]]:
    """Text boxes from probability maps ``(B, H, W)``: threshold, label regions, score, expand.

    Returns per image ``boxes (N, 4)`` xyxy pixels (clipped to the map), ``scores (N,)`` and
    ``labels (N,)`` zeros, regions sorted by score.
    """
    batch, height, width = prob.shape
    labels = connected_components(prob > bin_thresh).view(-1)
    image = torch.arange(batch, device=prob.device).repeat_interleave(height * width)
    flat_index = torch.arange(height * width, device=prob.device).repeat(batch)
    fg = labels > 0
    keys, region = torch.unique(image[fg] * (height * width + 1) + labels[fg], return_inverse=True)
    count = keys.numel()
    ys, xs = (flat_index[fg] // width).to(prob.dtype), (flat_index[fg] % width).to(prob.dtype)

    def reduce(values: Tensor, how: str, init: float) -> Tensor:
        out = torch.full((count,), init, device=prob.device, dtype=prob.dtype)
        return out.scatter_reduce(0, region, values, reduce=how, include_self=False)

    x1, y1 = reduce(xs, "amin", 0.0), reduce(ys, "amin", 0.0)
    x2, y2 = reduce(xs, "amax", 0.0) + 1, reduce(ys, "amax", 0.0) + 1  # pixel (x, y) spans [x, x + 1)
    scores = reduce(prob.reshape(-1)[fg], "mean", 0.0)
    boxes = torch.stack((x1, y1, x2, y2), dim=1)
    keep = (x2 - x1 >= min_side) & (y2 - y1 >= min_side) & (scores >= box_thresh)
    d = _offset(boxes, unclip_ratio)[:, None]
    boxes = boxes + torch.cat((-d, -d, d, d), dim=1)
    limit = torch.tensor([width, height, width, height], device=prob.device, dtype=prob.dtype)
    boxes = torch.minimum(boxes.clamp(min=0), limit)
    owner = torch.div(keys, height * width + 1, rounding_mode="floor")
    results = []
    for i in range(batch):
        sel = torch.nonzero(keep & (owner == i)).squeeze(1)
        sel = sel[scores[sel].argsort(descending=True)]
        results.append({"boxes": boxes[sel], "scores": scores[sel], "labels": torch.zeros_like(sel)})
    return results


class DBNet(nn.Module):
    """ResNet-50 + feature fusion + probability and threshold heads.

    ``forward(images, targets=None)`` takes 0-255 pages ``(B, 3, H, W)`` (H, W multiples of
    32). Training returns ``loss_bce``, ``loss_dice`` and ``loss_l1`` (weighted); evaluation
    returns detections in the format of the module docstring.
    """

    def __init__(self, cfg: DBNetConfig):
        super().__init__()
        self.cfg = cfg
        # torchvision resnet50, as docTR builds it
        self.backbone = ResNet(Bottleneck, (3, 4, 6, 3), width_mult=cfg.backbone_width_mult)
        del self.backbone.head  # docTR taps layer1..layer4; the classifier is never built there
        layers = (self.backbone.layer1, self.backbone.layer2, self.backbone.layer3, self.backbone.layer4)
        self.fpn = FeatureFusion([layer[-1].bn3.num_features for layer in layers], cfg.head_chans)  # 256 .. 2048
        self.prob_head = _map_head(cfg.head_chans)
        self.thresh_head = _map_head(cfg.head_chans)
        for module in [self.fpn, self.prob_head, self.thresh_head]:  # docTR's init; the backbone keeps its own
            for m in module.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
        self.register_buffer("pixel_mean", 255.0 * torch.tensor(cfg.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("pixel_std", 255.0 * torch.tensor(cfg.std).view(1, 3, 1, 1), persistent=False)

    def _features(self, images: Tensor) -> Tensor:
        net = self.backbone
        if self.cfg.normalize:
            images = (images - self.pixel_mean) / self.pixel_std
        x = net.maxpool(net.act1(net.bn1(net.conv1(images))))
        features = []
        for layer in (net.layer1, net.layer2, net.layer3, net.layer4):  # strides 4, 8, 16, 32
            x = layer(x)
            features.append(x)
        return self.fpn(features)  # (B, head_chans, H/4, W/4)

    def forward(
        self, images: Tensor, targets: dict[str, Tensor] | None = None
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        fused = self._features(images)
        logits = self.prob_head(fused)  # (B, 1, H, W)
        if not self.training:
            cfg = self.cfg
            return regions_to_boxes(logits.sigmoid()[:, 0], cfg.bin_thresh, cfg.box_thresh, cfg.unclip_ratio)
        thresh = self.thresh_head(fused).sigmoid()
        binary = differentiable_binarization(logits.sigmoid(), thresh)
        seg_target, seg_mask = targets["seg_target"], targets["seg_mask"]
        return {
            "loss_bce": BCE_WEIGHT * balanced_bce_loss(logits, seg_target, seg_mask),
            "loss_dice": dice_loss(binary, seg_target, seg_mask),
            "loss_l1": L1_WEIGHT * masked_l1_loss(thresh, targets["thresh_target"], targets["thresh_mask"]),
        }


def synthetic_text_boxes(
    ctx: BuildContext, size: tuple[int, int], max_boxes: int, min_height: float, max_height: float
) -> list[Tensor]:
    """Per image 1..``max_boxes`` word boxes ``(N, 4)`` xyxy: log-uniform heights, 1.5-10x wider than tall."""
    height, width = size
    boxes = []
    for count in ctx.randint(1, max_boxes + 1, (ctx.batch_size,)).tolist():
        u = ctx.rand(count, 4)
        h = min_height * (max_height / min_height) ** u[:, 0]
        w = torch.minimum(h * (1.5 + 8.5 * u[:, 1]), torch.full_like(h, width - 2.0))
        x1, y1 = 1 + u[:, 2] * (width - 2 - w), 1 + u[:, 3] * (height - 2 - h)
        boxes.append(torch.stack((x1, y1, x1 + w, y1 + h), dim=1))
    return boxes


class TextDetectionWorkload(Workload):
    """A text detector on synthetic pages: ``module(pages, targets)`` in training, ``module(pages)`` in eval."""

    def forward(self) -> Any:
        (pages,) = self.inputs
        return self.module(pages, self.targets) if self.module.training else self.module(pages)

    def compute_loss(self, outputs: dict[str, Tensor]) -> Tensor:
        return sum(outputs.values())


def _create_dbnet(
    ctx: BuildContext, *, image_size: int | None = None, max_boxes: int | None = None, **kwargs: Any
) -> Workload:
    """DBNet on synthetic pages; ``kwargs`` are :class:`DBNetConfig` fields."""
    # Smoke: the ResNet family's smoke width and a quarter of the FPN width, every layer kept.
    smoke = {"backbone_width_mult": SMOKE_WIDTH_MULT, "head_chans": 64} if ctx.smoke else {}
    cfg = DBNetConfig(**{**smoke, **kwargs})
    side = image_size or ctx.pick(1024, 64)
    if side < 32 or side % 32:
        raise ValueError(f"invalid DBNet image_size {side}; accepted: a positive multiple of 32 (docTR uses 1024)")
    if cfg.normalize:
        pages = ctx.rand(ctx.batch_size, 3, side, side) * 255.0
    else:  # TorchBench: randn pages straight into the model
        pages = ctx.randn(ctx.batch_size, 3, side, side)
    heights = ctx.pick((10.0, 40.0), (6.0, 12.0))  # word heights on a 1024 px page
    boxes = synthetic_text_boxes(ctx, (side, side), max_boxes or ctx.pick(40, 3), *heights)
    targets = db_targets(boxes, side, side, cfg.shrink_ratio, cfg.thresh_min, cfg.thresh_max) if ctx.train else None
    model = DBNet(cfg)
    optimizer = ctx.optimizer(model.parameters(), "adam", lr=1e-3, weight_decay=0.0) if ctx.train else None
    return TextDetectionWorkload(ctx, model, (pages,), targets, optimizer=optimizer)


@register_model(
    domain="vision", task="text_detection", batch_size=1, modes=("eval",), param_count=25_412_162,
    source="Liao et al., DBNet, 2019; docTR db_resnet50 (mindee/doctr) as TorchBench's doctr_det_predictor",
    notes="TorchBench's step: the bare docTR detection model on randn(1, 3, 1024, 1024), post-processed; eval only",
)  # fmt: skip
def doctr_det_predictor(ctx: BuildContext, **kwargs: Any) -> Workload:
    """docTR's DBNet ResNet-50 on unnormalised randn 1024x1024 pages, as TorchBench (smoke: 64x64, narrow)."""
    return _create_dbnet(ctx, **{"normalize": False, **kwargs})


@register_model(
    domain="vision", task="text_detection", batch_size=(2, 1), param_count=25_412_162,
    source="Liao et al., DBNet, 2019; docTR db_resnet50 (mindee/doctr)",
    notes="docTR's detection reference: 0-255 pages normalised in the model; DB loss and Adam at batch 2",
)  # fmt: skip
def db_resnet50(ctx: BuildContext, **kwargs: Any) -> Workload:
    """docTR's DBNet ResNet-50 text detector on 1024x1024 pages (smoke: 64x64, a quarter of the width)."""
    return _create_dbnet(ctx, **kwargs)
