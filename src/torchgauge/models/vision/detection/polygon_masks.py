"""Instance masks as polygons, rasterized per RoI: the mask targets of Detectron2's Mask R-CNN.

Detectron2 keeps COCO's polygon annotations (``PolygonMasks``, the mapper's default
``instance_mask_format="polygon"``) and builds each foreground RoI's ``M x M`` mask target by
moving the matched polygon into the RoI's frame, scaling it to ``M x M`` and rasterizing it
(``rasterize_polygons_within_box``, Apache-2.0, https://github.com/facebookresearch/detectron2,
``structures/masks.py``). Detectron2 rasterizes on the host with pycocotools, one RoI at a
time; here an even-odd test at the ``M x M`` cell centres does it for all RoIs at once.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["POLYGON_VERTICES", "ellipse_polygons", "rasterize_polygons_in_boxes"]

# Vertices per synthetic instance outline (COCO's polygons have a few tens).
POLYGON_VERTICES = 24


def ellipse_polygons(boxes: Tensor, vertices: int = POLYGON_VERTICES) -> Tensor:
    """``(N, V, 2)`` xy outlines: the ellipse inscribed in each box ``(N, 4)``, ``V`` vertices."""
    angles = torch.arange(vertices, device=boxes.device, dtype=boxes.dtype) * (2 * math.pi / vertices)
    centre = (boxes[:, None, :2] + boxes[:, None, 2:]) / 2  # (N, 1, 2)
    radius = (boxes[:, None, 2:] - boxes[:, None, :2]) / 2
    return centre + radius * torch.stack((angles.cos(), angles.sin()), dim=1)[None]


def rasterize_polygons_in_boxes(polygons: Tensor, boxes: Tensor, side: int) -> Tensor:
    """Bool ``(N, side, side)``: polygon ``i`` ``(N, V, 2)`` rasterized in the frame of box ``i`` ``(N, 4)``.

    A cell is inside when its centre is, by the even-odd rule. As Detectron2, the box's width
    and height are floored at 0.1 pixel before scaling.
    """
    size = (boxes[:, 2:] - boxes[:, :2]).clamp(min=0.1)  # (N, 2) w, h
    local = (polygons - boxes[:, None, :2]) * (side / size)[:, None]  # (N, V, 2) in cells
    centres = torch.arange(side, device=boxes.device, dtype=polygons.dtype) + 0.5
    px = centres.view(1, 1, side, 1)  # cell centre x, per column
    py = centres.view(1, side, 1, 1)  # per row
    x1, y1 = local[..., 0][:, None, None], local[..., 1][:, None, None]  # (N, 1, 1, V)
    x2, y2 = local.roll(-1, dims=1)[..., 0][:, None, None], local.roll(-1, dims=1)[..., 1][:, None, None]
    straddles = (y1 > py) != (y2 > py)  # the edge crosses the cell centre's row
    crossing_x = x1 + (py - y1) * (x2 - x1) / torch.where(straddles, y2 - y1, torch.ones_like(y1))
    crossings = (straddles & (px < crossing_x)).sum(dim=-1)  # (N, side, side)
    return crossings % 2 == 1
