"""RoIAlign, the multi-level RoI pooler and mask pasting, vectorised in plain PyTorch.

RoIAlign follows He et al., "Mask R-CNN" (2017) with the ``aligned`` half-pixel correction of
Detectron2 (Apache-2.0) and torchvision (BSD-3-Clause): each output bin averages a grid of
bilinear samples. Sampling is one ``F.grid_sample`` call per group of RoIs that share a
sampling grid, with RoIs laid out per image; there is no Python loop over boxes. The level
assignment is Eq. 1 of Lin et al., "Feature Pyramid Networks" (2017).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RoIPooler", "assign_fpn_levels", "paste_masks", "roi_align"]

# Upper bound on the bilinear samples held at once by roi_align (floats): RoIs are processed in
# chunks below it, so a C4 head on 1000 proposals x 1024 channels does not need tens of GB.
ROI_ALIGN_MAX_SAMPLES = 2**26
# paste_masks builds a (N, H, W, 2) sampling grid; masks are pasted in chunks below this size.
PASTE_MAX_GRID_POINTS = 2**25
# Normalised grid coordinate for samples outside the feature map: far enough that all four
# bilinear neighbours are out of bounds, so grid_sample's zero padding returns 0.
_OUTSIDE = -10.0


def _sample_bins(
    features: Tensor, rois: Tensor, output_size: tuple[int, int], grid: tuple[int, int], scale: float, aligned: bool
) -> Tensor:
    """RoIAlign with the same sampling grid ``(gh, gw)`` per bin for every RoI; ``(K, C, ph, pw)``."""
    batch, channels, height, width = features.shape
    (ph, pw), (gh, gw) = output_size, grid
    offset = 0.5 if aligned else 0.0
    x1 = rois[:, 1] * scale - offset
    y1 = rois[:, 2] * scale - offset
    roi_w = (rois[:, 3] - rois[:, 1]) * scale
    roi_h = (rois[:, 4] - rois[:, 2]) * scale
    if not aligned:  # legacy behaviour: RoIs are at least one pixel wide
        roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
    # Sample i along an axis sits at start + (i + 0.5) * bin / g for i in [0, bins * g).
    ys = y1[:, None] + (torch.arange(ph * gh, device=rois.device) + 0.5) * (roi_h / (ph * gh))[:, None]  # (K, ph*gh)
    xs = x1[:, None] + (torch.arange(pw * gw, device=rois.device) + 0.5) * (roi_w / (pw * gw))[:, None]  # (K, pw*gw)
    # RoIAlign's bilinear rule: samples beyond one pixel outside the map are 0; the rest are
    # clamped to the border pixels. Clamped coordinates map exactly onto grid_sample's
    # align_corners=True convention (-1 and +1 are the centres of the border pixels).
    if height == 1 or width == 1:  # keep the normaliser non-zero; the extra zeros are never sampled
        features = F.pad(features, (0, int(width == 1), 0, int(height == 1)))
    norm_h, norm_w = features.shape[-2] - 1, features.shape[-1] - 1
    gy = torch.where((ys >= -1.0) & (ys <= height), ys.clamp(0, height - 1) * (2.0 / norm_h) - 1.0, _OUTSIDE)
    gx = torch.where((xs >= -1.0) & (xs <= width), xs.clamp(0, width - 1) * (2.0 / norm_w) - 1.0, _OUTSIDE)
    num = rois.shape[0]
    grid_points = torch.stack(
        (gx[:, None, :].expand(num, ph * gh, pw * gw), gy[:, :, None].expand(num, ph * gh, pw * gw)), dim=-1
    )  # (K, ph*gh, pw*gw, 2)

    # Lay the RoIs of each image side by side (padded to the busiest image) so that a single
    # grid_sample call over the batch samples every RoI.
    image_idx = rois[:, 0].long()
    if batch == 1:
        rank = torch.arange(num, device=rois.device)
        slots = num
    else:
        counts = torch.bincount(image_idx, minlength=batch)
        order = torch.argsort(image_idx, stable=True)
        first = torch.cumsum(counts, 0) - counts
        rank = torch.empty_like(image_idx)
        rank[order] = torch.arange(num, device=rois.device) - first[image_idx[order]]
        slots = int(counts.max())
    padded = grid_points.new_full((batch, slots, ph * gh, pw * gw, 2), _OUTSIDE)
    padded[image_idx, rank] = grid_points
    # Box coordinates stay fp32 (as the detectors keep them); the grid takes the features'
    # dtype, which grid_sample requires in fp16/bf16 runs.
    grid = padded.view(batch, slots * ph * gh, pw * gw, 2).to(features.dtype)
    sampled = F.grid_sample(
        features, grid, mode="bilinear", padding_mode="zeros", align_corners=True
    )  # (B, C, slots*ph*gh, pw*gw)
    pooled = F.avg_pool2d(sampled, (gh, gw)) if gh * gw > 1 else sampled  # (B, C, slots*ph, pw)
    pooled = pooled.view(batch, channels, slots, ph, pw).transpose(1, 2)  # (B, slots, C, ph, pw)
    return pooled[image_idx, rank]


def roi_align(
    features: Tensor,
    rois: Tensor,
    output_size: int | tuple[int, int],
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    aligned: bool = True,
) -> Tensor:
    """RoIAlign: bilinear average pooling of box regions to a fixed size.

    Args:
        features: ``(B, C, H, W)`` feature map.
        rois: ``(K, 5)`` rows ``(batch_index, x1, y1, x2, y2)`` in input-image pixels.
        output_size: ``(ph, pw)`` bins per RoI.
        spatial_scale: feature pixels per input pixel (1 / stride).
        sampling_ratio: samples per bin along each axis; ``<= 0`` picks
            ``ceil(roi_size / bins)`` per RoI (the adaptive rule of the reference kernels).
        aligned: shift box coordinates by -0.5 pixel so that pixel centres line up (Detectron2's
            ``aligned=True``); ``False`` is the original Mask R-CNN behaviour.

    Returns:
        ``(K, C, ph, pw)`` pooled features.
    """
    ph, pw = (output_size, output_size) if isinstance(output_size, int) else output_size
    channels = features.shape[1]
    if rois.shape[0] == 0:
        return features.new_zeros((0, channels, ph, pw))
    rois = rois.to(features.dtype)
    if sampling_ratio > 0:
        grids = torch.full((rois.shape[0], 2), sampling_ratio, dtype=torch.int64, device=rois.device)
    else:
        roi_w = (rois[:, 3] - rois[:, 1]) * spatial_scale
        roi_h = (rois[:, 4] - rois[:, 2]) * spatial_scale
        if not aligned:
            roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
        grids = torch.stack((torch.ceil(roi_h / ph), torch.ceil(roi_w / pw)), dim=1).long()
    output = features.new_zeros((rois.shape[0], channels, ph, pw))
    # One vectorised call per distinct sampling grid (a handful), chunked to bound memory.
    # A RoI with an empty grid (zero-size box) keeps its zeros, as in the reference kernels.
    for gh, gw in torch.unique(grids, dim=0).tolist():
        if gh == 0 or gw == 0:
            continue
        members = torch.nonzero((grids[:, 0] == gh) & (grids[:, 1] == gw)).squeeze(1)
        chunk = max(1, ROI_ALIGN_MAX_SAMPLES // (channels * ph * gh * pw * gw))
        for part in members.split(chunk):
            output[part] = _sample_bins(features, rois[part], (ph, pw), (gh, gw), spatial_scale, aligned)
    return output


def assign_fpn_levels(
    boxes: Tensor, min_level: int, max_level: int, canonical_size: float = 224.0, canonical_level: int = 4
) -> Tensor:
    """FPN level ``k = floor(k0 + log2(sqrt(area) / 224))`` of each box, clamped; 0-based from ``min_level``."""
    sizes = torch.sqrt((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]))
    levels = torch.floor(canonical_level + torch.log2(sizes / canonical_size + 1e-8))
    return (levels.clamp(min=min_level, max=max_level) - min_level).long()


class RoIPooler(nn.Module):
    """Pool each box from its FPN level (or the single feature map) with :func:`roi_align`.

    Args:
        output_size: bins per RoI side (7 for box heads, 14 for mask heads).
        strides: stride of each feature map passed to ``forward``, finest first.
        sampling_ratio, aligned: see :func:`roi_align`.
    """

    def __init__(self, output_size: int, strides: Sequence[int], sampling_ratio: int, aligned: bool):
        super().__init__()
        self.output_size = output_size
        self.scales = tuple(1.0 / s for s in strides)
        self.min_level = int(round(math.log2(strides[0])))
        self.max_level = int(round(math.log2(strides[-1])))
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, features: Sequence[Tensor], boxes: Sequence[Tensor]) -> Tensor:
        """``boxes`` holds ``(K_i, 4)`` per image; returns ``(sum K_i, C, S, S)`` in the same order."""
        rois = torch.cat([torch.cat((b.new_full((len(b), 1), i), b), dim=1) for i, b in enumerate(boxes)])
        args = (self.output_size, self.sampling_ratio, self.aligned)
        if len(features) == 1:
            return roi_align(features[0], rois, args[0], self.scales[0], *args[1:])
        levels = assign_fpn_levels(rois[:, 1:], self.min_level, self.max_level)
        output = features[0].new_zeros((rois.shape[0], features[0].shape[1], self.output_size, self.output_size))
        for level, (feature, scale) in enumerate(zip(features, self.scales)):
            members = torch.nonzero(levels == level).squeeze(1)
            if members.numel():
                output[members] = roi_align(feature, rois[members], args[0], scale, *args[1:])
        return output


def paste_masks(masks: Tensor, boxes: Tensor, image_size: tuple[int, int]) -> Tensor:
    """Paste per-box mask probabilities ``(N, M, M)`` into ``(N, 1, H, W)`` image-sized masks.

    Bilinear resampling of each mask onto the pixels its box covers (Detectron2's
    ``paste_masks_in_image`` rule); pixels outside the box are 0.
    """
    height, width = image_size
    num = masks.shape[0]
    if num == 0:
        return masks.new_zeros((0, 1, height, width))
    x1, y1, x2, y2 = boxes.to(masks.dtype).unbind(dim=1)
    pixel_y = torch.arange(height, device=masks.device, dtype=masks.dtype) + 0.5
    pixel_x = torch.arange(width, device=masks.device, dtype=masks.dtype) + 0.5
    # Normalised position of every pixel row/column inside each box: -1 / +1 at the box edges.
    gy = (pixel_y[None] - y1[:, None]) / (y2 - y1)[:, None] * 2 - 1  # (N, H)
    gx = (pixel_x[None] - x1[:, None]) / (x2 - x1)[:, None] * 2 - 1  # (N, W)
    chunk = max(1, PASTE_MAX_GRID_POINTS // (height * width))
    pasted = []
    for start in range(0, num, chunk):
        part = slice(start, start + chunk)
        n = gy[part].shape[0]
        grid = torch.stack(
            (gx[part, None, :].expand(n, height, width), gy[part, :, None].expand(n, height, width)), dim=3
        )
        pasted.append(F.grid_sample(masks[part, None], grid, mode="bilinear", align_corners=False))
    return torch.cat(pasted)
