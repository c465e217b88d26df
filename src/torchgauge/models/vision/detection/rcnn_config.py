"""The R-CNN family's variant record: backbone, neck, anchors, sampling and test-time settings.

Read by the model (``rcnn.py``) and by its RPN and RoI heads (``rcnn_heads.py``); a module of its
own so that the heads need not import the model that builds them. Defaults and field meanings
follow Detectron2's COCO configs (Apache-2.0) and torchvision's ``maskrcnn_resnet50_fpn``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RCNNConfig"]


@dataclass(frozen=True)
class RCNNConfig:
    """One R-CNN variant. Defaults: Detectron2's COCO Faster R-CNN R50-FPN."""

    depth: int = 50  # ResNet depth: 50 or 101
    neck: str = "fpn"  # "c4": res5 runs in the RoI head; "dc5": dilated res5 (stride 16); "fpn"
    mask_on: bool = False  # add the Mask R-CNN mask branch
    num_classes: int = 80  # foreground classes (COCO's 80; torchvision's layout has 90 ids)
    background_first: bool = False  # torchvision layout: class 0 is background and gets box deltas
    stride_in_1x1: bool = True  # MSRA (Detectron2) weights stride in the first 1x1 conv
    width: int = 64  # ResNet stem / res2 width; smoke runs shrink it (_SMOKE_NARROW)
    freeze_at: int = 2  # ResNet stages frozen (stem, res2): BACKBONE.FREEZE_AT; the LazyConfig ResNet's is 0
    fc_dim: int = 1024  # hidden size of the two-FC box head
    fpn_channels: int = 256  # FPN output (and so RPN and RoI-head input) channels
    mask_dim: int = 256  # channels of the mask head's convs and deconvolution
    anchor_sizes: tuple[float, ...] = (32, 64, 128, 256, 512)  # one per FPN level, or all on C4/DC5
    anchor_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    round_anchors: bool = False  # torchvision rounds anchor corners to integers
    rpn_pre_nms_topk: tuple[int, int] = (2000, 1000)  # (train, test); per level with FPN
    rpn_post_nms_topk: tuple[int, int] = (1000, 1000)  # (train, test); per image
    rpn_nms_thresh: float = 0.7
    rpn_min_box_size: float = 0.0  # proposals must be wider/taller than this (torchvision: 1e-3)
    rpn_batch_per_image: int = 256  # anchors sampled per image for the RPN loss
    rpn_positive_fraction: float = 0.5
    rpn_smooth_l1_beta: float = 0.0  # 0 is L1 (Detectron2); torchvision uses 1/9
    rpn_loss_normalizer: str = "batch"  # "batch": B * 256 (Detectron2); "sampled" (torchvision)
    roi_batch_per_image: int = 512  # proposals sampled per image for the RoI-head losses
    roi_positive_fraction: float = 0.25
    roi_smooth_l1_beta: float = 0.0  # torchvision uses 1/9
    roi_aligned: bool = True  # half-pixel-corrected RoIAlign (Detectron2); torchvision: False
    roi_sampling_ratio: int = 0  # 0: adaptive grid (Detectron2); torchvision samples 2x2 per bin
    score_thresh: float = 0.05  # test-time class score threshold
    nms_thresh: float = 0.5  # test-time per-class NMS
    detections_per_image: int = 100
    mask_threshold: float | None = 0.5  # pasted masks become bool at this probability; None keeps them (torchvision)
    # False: the RoI heads return each detection's (1, M, M) mask probabilities unpasted, as
    # torchvision's RoIHeads do (its transform pastes them at the original image size).
    paste_masks: bool = True
    detection_min_size: float = 0.0  # detections narrower or shorter than this are dropped before NMS (tv: 1e-2)
    pixel_mean: tuple[float, float, float] = (103.53, 116.28, 123.675)  # BGR, MSRA models
    # Detectron2's MSRA configs divide by 1.0 because their caffe-converted stem expects raw
    # 0-255 pixels; with random weights that starts activations ~60x too large and the first
    # SGD step diverges, so pixels are scaled like torchvision's (same op, different constant).
    pixel_std: tuple[float, float, float] = (57.375, 57.12, 58.395)

    @property
    def size_divisibility(self) -> int:
        """FPN merges levels by 2x upsampling, so padded sides are multiples of its coarsest stride."""
        return 32 if self.neck == "fpn" else 0
