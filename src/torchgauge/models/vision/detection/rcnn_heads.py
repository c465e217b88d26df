"""Region proposal network and RoI heads (box, mask) of the two-stage R-CNN family.

Written after Detectron2's ``RPN``, ``StandardROIHeads``, ``Res5ROIHeads``,
``FastRCNNOutputLayers`` and ``MaskRCNNConvUpsampleHead`` (Apache-2.0) and torchvision's
``RegionProposalNetwork`` / ``RoIHeads`` (BSD-3-Clause); papers: Ren et al., "Faster R-CNN"
(2015) and He et al., "Mask R-CNN" (2017). The variant-level choices (loss normalisers, class
layout, RoIAlign flavour) come from :class:`~.rcnn_config.RCNNConfig`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .backbones import frozen_residual_scale, make_stage
from .boxes import (
    AnchorGenerator,
    BoxCoder,
    Matcher,
    anchor_shapes,
    batched_nms,
    box_iou,
    clip_boxes,
    nonempty_boxes,
    rescale_detections,
    sample_labels,
)
from .polygon_masks import rasterize_polygons_in_boxes
from .rcnn_config import RCNNConfig
from .roi_align import RoIPooler, paste_masks, roi_align

__all__ = ["RPN", "RoIHeads"]

# Box-regression weights of the second stage (Detectron2 and torchvision defaults).
ROI_BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)


class RPN(nn.Module):
    """Objectness and box deltas for A anchors per cell of every level; proposals by NMS.

    ``forward`` returns per-image proposals ``(P_i, 4)`` (detached: no gradient flows through
    proposal boxes) and, in training, ``loss_rpn_cls`` / ``loss_rpn_loc``.
    """

    def __init__(self, cfg: RCNNConfig, in_channels: int, strides: Sequence[int]):
        super().__init__()
        self.cfg = cfg
        if len(strides) == 1:  # C4 / DC5: every anchor size on the single map
            shapes = [anchor_shapes(cfg.anchor_sizes, cfg.anchor_ratios, cfg.round_anchors)]
        else:  # FPN: one size per level
            shapes = [anchor_shapes([size], cfg.anchor_ratios, cfg.round_anchors) for size in cfg.anchor_sizes]
        self.anchor_generator = AnchorGenerator(shapes, strides)
        num_anchors = self.anchor_generator.num_anchors[0]
        self.conv = nn.Conv2d(in_channels, in_channels, 3, padding=1)
        self.objectness_logits = nn.Conv2d(in_channels, num_anchors, 1)
        self.anchor_deltas = nn.Conv2d(in_channels, num_anchors * 4, 1)
        for layer in (self.conv, self.objectness_logits, self.anchor_deltas):
            nn.init.normal_(layer.weight, std=0.01)
            nn.init.zeros_(layer.bias)
        self.box_coder = BoxCoder()
        self.matcher = Matcher(0.3, 0.7, allow_low_quality_matches=True)

    def forward(
        self,
        features: Sequence[Tensor],
        image_sizes: Sequence[tuple[int, int]],
        targets: Sequence[dict[str, Tensor]] | None = None,
    ) -> tuple[list[Tensor], dict[str, Tensor]]:
        objectness, deltas = [], []
        for feature in features:
            hidden = F.relu(self.conv(feature))
            objectness.append(self.objectness_logits(hidden).permute(0, 2, 3, 1).flatten(1))  # (B, H*W*A)
            d = self.anchor_deltas(hidden)  # (B, A*4, H, W) -> (B, H*W*A, 4)
            batch, _, height, width = d.shape
            deltas.append(d.view(batch, -1, 4, height, width).permute(0, 3, 4, 1, 2).reshape(batch, -1, 4))
        anchors = self.anchor_generator([f.shape[-2:] for f in features])
        proposals = self._proposals(
            anchors, [o.detach() for o in objectness], [d.detach() for d in deltas], image_sizes
        )
        losses = (
            self._losses(torch.cat(anchors), torch.cat(objectness, 1), torch.cat(deltas, 1), targets)
            if self.training
            else {}
        )
        return proposals, losses

    def _proposals(
        self, anchors: list[Tensor], objectness: list[Tensor], deltas: list[Tensor], image_sizes
    ) -> list[Tensor]:
        cfg, mode = self.cfg, 0 if self.training else 1
        scores, boxes, levels = [], [], []
        for level, (level_anchors, level_scores, level_deltas) in enumerate(zip(anchors, objectness, deltas)):
            k = min(cfg.rpn_pre_nms_topk[mode], level_scores.shape[1])
            top_scores, top_idx = level_scores.topk(k, dim=1)  # (B, k)
            top_deltas = torch.gather(level_deltas, 1, top_idx[..., None].expand(-1, -1, 4))
            decoded = self.box_coder.decode(top_deltas.reshape(-1, 4), level_anchors[top_idx.reshape(-1)])
            scores.append(top_scores)
            boxes.append(decoded.view(top_idx.shape[0], k, 4))
            levels.append(torch.full((k,), level, dtype=torch.int64, device=top_idx.device))
        scores, boxes, levels = torch.cat(scores, 1), torch.cat(boxes, 1), torch.cat(levels)
        proposals = []
        for image_scores, image_boxes, size in zip(scores, boxes, image_sizes):
            image_boxes = clip_boxes(image_boxes, size)
            valid = (
                nonempty_boxes(image_boxes, cfg.rpn_min_box_size)
                & torch.isfinite(image_boxes).all(1)
                & torch.isfinite(image_scores)
            )
            image_boxes, image_scores, image_levels = image_boxes[valid], image_scores[valid], levels[valid]
            keep = batched_nms(image_boxes, image_scores, image_levels, cfg.rpn_nms_thresh, cfg.rpn_post_nms_topk[mode])
            proposals.append(image_boxes[keep])
        return proposals

    def _losses(
        self, anchors: Tensor, objectness: Tensor, deltas: Tensor, targets: Sequence[dict[str, Tensor]]
    ) -> dict[str, Tensor]:
        cfg = self.cfg
        labels, target_deltas = [], []
        for target in targets:
            gt_boxes = target["boxes"]
            matched, match_labels = self.matcher(box_iou(gt_boxes, anchors))
            match_labels = match_labels.long()
            positive, negative = sample_labels(
                match_labels, cfg.rpn_batch_per_image, cfg.rpn_positive_fraction, background=0
            )
            sampled = torch.full_like(match_labels, -1)
            sampled[positive], sampled[negative] = 1, 0
            labels.append(sampled)
            matched_boxes = gt_boxes[matched] if len(gt_boxes) else anchors
            target_deltas.append(self.box_coder.encode(anchors, matched_boxes))
        labels, target_deltas = torch.stack(labels), torch.stack(target_deltas)  # (B, A), (B, A, 4)
        positive, valid = labels == 1, labels >= 0
        loss_loc = F.smooth_l1_loss(
            deltas[positive], target_deltas[positive], beta=cfg.rpn_smooth_l1_beta, reduction="sum"
        )
        loss_cls = F.binary_cross_entropy_with_logits(
            objectness[valid], labels[valid].to(objectness.dtype), reduction="sum"
        )
        if cfg.rpn_loss_normalizer == "batch":  # Detectron2: sampled-anchors budget of the batch
            normalizer = float(cfg.rpn_batch_per_image * len(targets))
        else:  # torchvision: anchors actually sampled
            normalizer = valid.sum().clamp(min=1).to(objectness.dtype)
        return {"loss_rpn_cls": loss_cls / normalizer, "loss_rpn_loc": loss_loc / normalizer}


class RoIHeads(nn.Module):
    """Box classification/regression (and masks) on pooled proposal features.

    ``neck == "c4"``: 14x14 RoIAlign on res4, then the res5 stage and global average pooling
    (Detectron2's ``Res5ROIHeads``). Otherwise: 7x7 RoIAlign on the FPN levels (or dilated
    res5), then two 1024-d FC layers (``FastRCNNConvFCHead``); the mask head is 4 convs, a 2x
    deconvolution and a per-class 1x1 predictor on 14x14 RoIAlign features.
    """

    def __init__(self, cfg: RCNNConfig, in_channels: int, strides: Sequence[int]):
        super().__init__()
        self.cfg = cfg
        self.background = 0 if cfg.background_first else cfg.num_classes
        num_box_classes = cfg.num_classes + 1 if cfg.background_first else cfg.num_classes
        self.c4 = cfg.neck == "c4"
        pool_args = (strides, cfg.roi_sampling_ratio, cfg.roi_aligned)
        if self.c4:
            self.box_pooler = RoIPooler(14, *pool_args)
            width = cfg.width
            scale = frozen_residual_scale(cfg.depth)
            self.res5 = make_stage(
                3, in_channels, width * 8, width * 32, 2, stride_in_1x1=cfg.stride_in_1x1, residual_scale=scale
            )
            box_dim = mask_in = width * 32
        else:
            self.box_pooler = RoIPooler(7, *pool_args)
            self.box_head = nn.Sequential(
                nn.Flatten(),
                nn.Linear(in_channels * 49, cfg.fc_dim),
                nn.ReLU(inplace=True),
                nn.Linear(cfg.fc_dim, cfg.fc_dim),
                nn.ReLU(inplace=True),
            )
            box_dim, mask_in = cfg.fc_dim, in_channels
        self.cls_score = nn.Linear(box_dim, cfg.num_classes + 1)
        self.bbox_pred = nn.Linear(box_dim, num_box_classes * 4)
        nn.init.normal_(self.cls_score.weight, std=0.01)
        nn.init.normal_(self.bbox_pred.weight, std=0.001)
        nn.init.zeros_(self.cls_score.bias)
        nn.init.zeros_(self.bbox_pred.bias)
        self.box_coder = BoxCoder(ROI_BOX_WEIGHTS)
        self.proposal_matcher = Matcher(0.5, 0.5)
        if cfg.mask_on:
            layers: list[nn.Module] = []
            if not self.c4:  # the C4 mask head reuses the res5 box features (no extra pooling/convs)
                self.mask_pooler = RoIPooler(14, *pool_args)
                for i in range(4):
                    layers += [
                        nn.Conv2d(mask_in if i == 0 else cfg.mask_dim, cfg.mask_dim, 3, padding=1),
                        nn.ReLU(inplace=True),
                    ]
            layers += [
                nn.ConvTranspose2d(mask_in if self.c4 else cfg.mask_dim, cfg.mask_dim, 2, stride=2),
                nn.ReLU(inplace=True),
            ]
            self.mask_head = nn.Sequential(*layers)
            self.mask_predictor = nn.Conv2d(cfg.mask_dim, num_box_classes, 1)
            for module in self.mask_head.modules():
                if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
                    nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                    nn.init.zeros_(module.bias)
            nn.init.normal_(self.mask_predictor.weight, std=0.001)
            nn.init.zeros_(self.mask_predictor.bias)

    # -- shared pieces ------------------------------------------------------------------------
    def _box_features(self, features: Sequence[Tensor], boxes: Sequence[Tensor]) -> Tensor:
        pooled = self.box_pooler(features, boxes)  # (R, C, S, S)
        return self.res5(pooled) if self.c4 else pooled  # C4: (R, 2048, 7, 7)

    def _predict(self, box_features: Tensor) -> tuple[Tensor, Tensor]:
        hidden = box_features.mean(dim=(2, 3)) if self.c4 else self.box_head(box_features)
        return self.cls_score(hidden), self.bbox_pred(hidden)  # (R, K+1), (R, K'*4)

    def _mask_logits(
        self, features: Sequence[Tensor], boxes: Sequence[Tensor], box_features: Tensor | None = None
    ) -> Tensor:
        if self.c4:
            mask_features = box_features if box_features is not None else self._box_features(features, boxes)
        else:
            mask_features = self.mask_pooler(features, boxes)
        return self.mask_predictor(self.mask_head(mask_features))  # (R, K', M, M)

    # -- forward ------------------------------------------------------------------------------
    def forward(
        self,
        features: Sequence[Tensor],
        proposals: Sequence[Tensor],
        image_sizes: Sequence[tuple[int, int]],
        targets: Sequence[dict[str, Tensor]] | None = None,
        output_sizes: Sequence[tuple[int, int]] | None = None,
    ) -> dict[str, Tensor] | list[dict[str, Tensor]]:
        if self.training:
            return self._losses(features, proposals, targets)
        return self._detect(features, proposals, image_sizes, output_sizes)

    def _sample(self, proposals: Sequence[Tensor], targets: Sequence[dict[str, Tensor]]):
        """Append ground truth to the proposals, match, and draw a balanced fg/bg sample per image."""
        cfg = self.cfg
        sampled_boxes, classes, matched_gt, matched_idx = [], [], [], []
        for image_proposals, target in zip(proposals, targets):
            gt_boxes, gt_labels = target["boxes"], target["labels"]
            boxes = torch.cat((image_proposals, gt_boxes))
            matched, match_labels = self.proposal_matcher(box_iou(gt_boxes, boxes))
            image_classes = gt_labels[matched] if len(gt_labels) else torch.full_like(matched, self.background)
            image_classes = torch.where(match_labels == 0, self.background, image_classes)
            positive, negative = sample_labels(
                image_classes, cfg.roi_batch_per_image, cfg.roi_positive_fraction, self.background
            )
            chosen = torch.cat((positive, negative))
            sampled_boxes.append(boxes[chosen])
            classes.append(image_classes[chosen])
            matched_idx.append(matched[chosen])
            matched_gt.append(gt_boxes[matched[chosen]] if len(gt_boxes) else boxes[chosen])
        return sampled_boxes, classes, matched_gt, matched_idx

    def _losses(self, features, proposals, targets) -> dict[str, Tensor]:
        boxes, classes, matched_gt, matched_idx = self._sample(proposals, targets)
        box_features = self._box_features(features, boxes)
        logits, deltas = self._predict(box_features)
        all_classes, all_boxes = torch.cat(classes), torch.cat(boxes)
        foreground = torch.nonzero(all_classes != self.background).squeeze(1)
        fg_classes = all_classes[foreground]
        fg_deltas = deltas.view(deltas.shape[0], -1, 4)[foreground, fg_classes]
        fg_targets = self.box_coder.encode(all_boxes[foreground], torch.cat(matched_gt)[foreground])
        loss_box = F.smooth_l1_loss(fg_deltas, fg_targets, beta=self.cfg.roi_smooth_l1_beta, reduction="sum")
        losses = {
            "loss_cls": F.cross_entropy(logits, all_classes),
            "loss_box_reg": loss_box / max(all_classes.numel(), 1),
        }
        if self.cfg.mask_on:
            losses["loss_mask"] = self._mask_loss(features, boxes, classes, matched_idx, targets, box_features)
        return losses

    def _mask_loss(self, features, boxes, classes, matched_idx, targets, box_features: Tensor) -> Tensor:
        fg_masks = [c != self.background for c in classes]
        fg_boxes = [b[m] for b, m in zip(boxes, fg_masks)]
        fg_box_features = box_features[torch.cat(fg_masks)] if self.c4 else None
        logits = self._mask_logits(features, fg_boxes, fg_box_features)  # (F, K', M, M)
        if logits.shape[0] == 0:
            return logits.sum() * 0.0
        side = logits.shape[-1]
        # Targets, M x M per foreground RoI: its ground-truth polygon rasterized in the RoI's frame
        # (Detectron2), or its bitmask cropped and resized by RoIAlign (torchvision).
        mask_targets = []
        for image_boxes, image_fg, image_matched, target in zip(fg_boxes, fg_masks, matched_idx, targets):
            if "polygons" in target:
                polygons = target["polygons"][image_matched[image_fg]]  # (F_i, V, 2)
                mask_targets.append(rasterize_polygons_in_boxes(polygons, image_boxes, side))
                continue
            rois = torch.cat((image_matched[image_fg, None].to(image_boxes), image_boxes), dim=1)
            gt_masks = target["masks"][:, None].to(logits.dtype)  # (G, 1, H, W)
            mask_targets.append(roi_align(gt_masks, rois, side, 1.0, 0, self.cfg.roi_aligned)[:, 0] >= 0.5)
        fg_classes = torch.cat([c[m] for c, m in zip(classes, fg_masks)])
        selected = logits[torch.arange(logits.shape[0], device=logits.device), fg_classes]
        return F.binary_cross_entropy_with_logits(selected, torch.cat(mask_targets).to(selected.dtype))

    def _detect(self, features, proposals, image_sizes, output_sizes=None) -> list[dict[str, Tensor]]:
        cfg = self.cfg
        logits, deltas = self._predict(self._box_features(features, proposals))
        probs = F.softmax(logits, dim=-1)
        decoded = self.box_coder.decode(deltas, torch.cat(proposals))
        first_fg = 1 if cfg.background_first else 0
        detections = []
        for image_probs, image_boxes, size in zip(
            probs.split([len(p) for p in proposals]), decoded.split([len(p) for p in proposals]), image_sizes
        ):
            scores = image_probs[:, 1:] if cfg.background_first else image_probs[:, :-1]  # (R, K)
            boxes = clip_boxes(image_boxes.view(image_boxes.shape[0], -1, 4)[:, first_fg:], size)  # (R, K, 4)
            rows, columns = torch.nonzero(scores > cfg.score_thresh).unbind(1)
            boxes, scores = boxes[rows, columns], scores[rows, columns]
            if cfg.detection_min_size > 0:  # torchvision's remove_small_boxes
                sides = boxes[:, 2:] - boxes[:, :2]
                large = torch.nonzero((sides >= cfg.detection_min_size).all(dim=1)).squeeze(1)
                boxes, scores, columns = boxes[large], scores[large], columns[large]
            keep = batched_nms(boxes, scores, columns, cfg.nms_thresh, cfg.detections_per_image)
            detections.append({"boxes": boxes[keep], "scores": scores[keep], "labels": columns[keep] + first_fg})
        # Mask logits come from the boxes at input scale, before any rescaling to the output size.
        mask_probs = self._mask_probs(features, detections) if cfg.mask_on else None
        if mask_probs is not None and not cfg.paste_masks:  # torchvision: (N, 1, M, M), pasted by its transform
            for detection, image_probs in zip(detections, mask_probs):
                detection["masks"] = image_probs[:, None]
            return detections
        if output_sizes is not None:
            kept = rescale_detections(detections, image_sizes, output_sizes)
            mask_probs = None if mask_probs is None else [p[k] for p, k in zip(mask_probs, kept)]
        if mask_probs is not None:
            sizes = image_sizes if output_sizes is None else output_sizes
            for detection, image_probs, size in zip(detections, mask_probs, sizes):
                masks = paste_masks(image_probs, detection["boxes"], size)
                detection["masks"] = masks if cfg.mask_threshold is None else masks >= cfg.mask_threshold
        return detections

    def _mask_probs(self, features, detections: list[dict[str, Tensor]]) -> list[Tensor]:
        """Per image, the mask probabilities ``(N, M, M)`` of each detection's class."""
        logits = self._mask_logits(features, [d["boxes"] for d in detections])
        labels = torch.cat([d["labels"] for d in detections])
        probs = logits[torch.arange(len(labels), device=labels.device), labels].sigmoid()  # (N, M, M)
        return list(probs.split([len(d["boxes"]) for d in detections]))
