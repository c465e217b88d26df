"""PointNet++ single-scale-grouping (SSG) classification on ModelNet40.

Qi, Yi, Su and Guibas, "PointNet++: Deep Hierarchical Feature Learning on Point Sets in a Metric
Space", NeurIPS 2017. Reference implementation: ``models/pointnet2_cls_ssg.py`` and
``models/pointnet2_utils.py`` of github.com/yanx27/Pointnet_Pointnet2_pytorch (MIT), the
pure-PyTorch port without custom CUDA kernels.

As the reference: three set-abstraction levels. Each samples ``npoint`` centroids by farthest
point sampling (the iterative loop: a random first point, then repeatedly the point farthest from
all chosen so far, via ``torch.max`` over running minimum distances), groups up to ``nsample``
neighbours within ``radius`` of each centroid (ball query: squared distances, indices of points
outside the ball set to ``N``, ``sort``, the first ``nsample`` kept, the padding filled with the
nearest-index member), gathers them by advanced indexing, concatenates their centroid-relative
coordinates with their features, applies a shared MLP (1x1 ``Conv2d`` + ``BatchNorm2d`` + ReLU)
and max-pools over each neighbourhood. Level 3 groups all points into one. Head:
``Linear-BN-ReLU-Dropout(0.4)`` twice and ``Linear(256, 40)``, ``log_softmax`` output,
``nll_loss``; Adam (lr 1e-3, weight decay 1e-4), batch 24, 1024 points, xyz only (the
reference's default ``--use_normals False``).

Parameters: 1,475,688, counted from the reference's layer definitions (``get_model(40,
normal_channel=False)``). Data: seeded Gaussian clouds normalized
to the unit sphere as ModelNet40 is (no data augmentation: that runs in the reference's data
loader, outside the compute step). Written from the paper and the description above; no code
copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .clouds import unit_sphere_clouds

__all__ = [
    "PointNet2Config",
    "PointNet2SSG",
    "SetAbstraction",
    "ball_query",
    "farthest_point_sample",
    "index_points",
    "square_distance",
]


@dataclass(frozen=True)
class PointNet2Config:
    num_points: int = 1024  # points per cloud: the reference's --num_point
    num_classes: int = 40  # ModelNet40
    npoints: tuple[int, ...] = (512, 128)  # centroids of the two sampled levels
    radii: tuple[float, ...] = (0.2, 0.4)  # ball-query radius per sampled level (unit-sphere clouds)
    nsamples: tuple[int, ...] = (32, 64)  # neighbours kept per centroid
    mlps: tuple[tuple[int, ...], ...] = ((64, 64, 128), (128, 128, 256), (256, 512, 1024))  # last: group-all level
    head: tuple[int, ...] = (512, 256)  # hidden widths of the classifier
    dropout: float = 0.4


def square_distance(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``(B, N, C), (B, M, C) -> (B, N, M)`` squared Euclidean distances by the ``|a|^2 - 2ab + |b|^2`` expansion."""
    dist = -2 * torch.matmul(src, dst.transpose(1, 2))
    dist = dist + src.pow(2).sum(-1).unsqueeze(-1)
    return dist + dst.pow(2).sum(-1).unsqueeze(1)


def index_points(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Gather per-batch rows: ``(B, N, C)`` by ``(B, *S)`` indices -> ``(B, *S, C)``."""
    b = points.shape[0]
    batch = torch.arange(b, dtype=torch.long, device=points.device).view(b, *([1] * (idx.dim() - 1)))
    return points[batch.expand_as(idx), idx, :]


def farthest_point_sample(xyz: torch.Tensor, npoint: int) -> torch.Tensor:
    """``(B, N, 3) -> (B, npoint)`` indices by iterative farthest point sampling from a random start."""
    b, n, _ = xyz.shape
    centroids = torch.zeros(b, npoint, dtype=torch.long, device=xyz.device)
    distance = torch.ones(b, n, dtype=xyz.dtype, device=xyz.device) * 1e10  # to the chosen set
    farthest = torch.randint(0, n, (b,), dtype=torch.long, device=xyz.device)
    batch = torch.arange(b, dtype=torch.long, device=xyz.device)
    for i in range(npoint):
        centroids[:, i] = farthest
        centroid = xyz[batch, farthest, :].view(b, 1, 3)
        dist = torch.sum((xyz - centroid) ** 2, -1)  # (B, N)
        mask = dist < distance
        distance[mask] = dist[mask]
        farthest = torch.max(distance, -1)[1]
    return centroids


def ball_query(radius: float, nsample: int, xyz: torch.Tensor, new_xyz: torch.Tensor) -> torch.Tensor:
    """Indices ``(B, S, nsample)`` of up to ``nsample`` points of ``xyz`` ``(B, N, 3)`` within
    ``radius`` of each ``new_xyz`` ``(B, S, 3)``, lowest indices first; short groups repeat their first member."""
    b, n, _ = xyz.shape
    s = new_xyz.shape[1]
    group_idx = torch.arange(n, dtype=torch.long, device=xyz.device).view(1, 1, n).repeat(b, s, 1)
    sqrdists = square_distance(new_xyz, xyz)  # (B, S, N)
    group_idx[sqrdists > radius**2] = n  # out of the ball: sorts last
    group_idx = group_idx.sort(dim=-1)[0][:, :, :nsample]
    group_first = group_idx[:, :, :1].repeat(1, 1, nsample)
    mask = group_idx == n
    group_idx[mask] = group_first[mask]
    return group_idx


class SetAbstraction(nn.Module):
    """Sample, group and PointNet: ``xyz (B, 3, N), feats (B, D, N) -> (B, 3, S), (B, C', S)``.

    ``npoint=None`` is the group-all level: one group of every point, around the origin.
    """

    def __init__(
        self, npoint: int | None, radius: float | None, nsample: int | None, in_channels: int, mlp: tuple[int, ...]
    ) -> None:
        super().__init__()
        self.npoint, self.radius, self.nsample = npoint, radius, nsample
        self.convs = nn.ModuleList()
        self.bns = nn.ModuleList()
        last = in_channels
        for width in mlp:
            self.convs.append(nn.Conv2d(last, width, 1))
            self.bns.append(nn.BatchNorm2d(width))
            last = width

    def group(self, xyz: torch.Tensor, feats: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B, N, 3), (B, N, D) -> new_xyz (B, S, 3), grouped (B, S, K, 3 + D)``."""
        b, n, c = xyz.shape
        if self.npoint is None:  # group all
            new_xyz = torch.zeros(b, 1, c, dtype=xyz.dtype, device=xyz.device)
            grouped = xyz.view(b, 1, n, c)
            if feats is not None:
                grouped = torch.cat([grouped, feats.view(b, 1, n, -1)], dim=-1)
            return new_xyz, grouped
        new_xyz = index_points(xyz, farthest_point_sample(xyz, self.npoint))  # (B, S, 3)
        idx = ball_query(self.radius, self.nsample, xyz, new_xyz)  # (B, S, K)
        grouped = index_points(xyz, idx) - new_xyz.view(b, self.npoint, 1, c)  # relative coordinates
        if feats is not None:
            grouped = torch.cat([grouped, index_points(feats, idx)], dim=-1)
        return new_xyz, grouped

    def forward(self, xyz: torch.Tensor, feats: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        new_xyz, grouped = self.group(xyz.transpose(1, 2), None if feats is None else feats.transpose(1, 2))
        x = grouped.permute(0, 3, 2, 1)  # (B, 3 + D, K, S)
        for conv, bn in zip(self.convs, self.bns):
            x = F.relu(bn(conv(x)))
        return new_xyz.transpose(1, 2), torch.max(x, 2)[0]  # (B, 3, S), (B, C', S)


class PointNet2SSG(nn.Module):
    """Clouds ``(B, 3, N)`` -> class log-probabilities ``(B, num_classes)``."""

    def __init__(self, cfg: PointNet2Config) -> None:
        super().__init__()
        levels, in_ch = [], 3  # level 1 sees relative xyz only
        for npoint, radius, nsample, mlp in zip(cfg.npoints, cfg.radii, cfg.nsamples, cfg.mlps):
            levels.append(SetAbstraction(npoint, radius, nsample, in_ch, mlp))
            in_ch = mlp[-1] + 3
        levels.append(SetAbstraction(None, None, None, in_ch, cfg.mlps[-1]))
        self.levels = nn.ModuleList(levels)
        layers, last = [], cfg.mlps[-1][-1]
        for width in cfg.head:
            layers += [nn.Linear(last, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(cfg.dropout)]
            last = width
        self.head = nn.Sequential(*layers, nn.Linear(last, cfg.num_classes))

    def forward(self, xyz: torch.Tensor) -> torch.Tensor:
        feats = None
        for level in self.levels:
            xyz, feats = level(xyz, feats)
        x = feats.view(feats.shape[0], -1)  # (B, 1024): the group-all level has one group
        return F.log_softmax(self.head(x), -1)


_SMOKE = dict(
    num_points=64, npoints=(16, 8), nsamples=(8, 8), mlps=((8, 8, 16), (16, 16, 32), (32, 32, 64)), head=(32, 16)
)


def _create_pointnet2(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(PointNet2Config(), **{**ctx.pick({}, _SMOKE), **kwargs})
    xyz = unit_sphere_clouds(ctx, ctx.batch_size, cfg.num_points).transpose(1, 2)  # (B, 3, N)
    labels = ctx.randint(0, cfg.num_classes, (ctx.batch_size,))
    model = PointNet2SSG(cfg)
    opt = None
    if ctx.train:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-4)
    return Workload(ctx, model, (xyz,), labels, loss_fn=F.nll_loss, optimizer=opt)


@register_model(
    domain="vision",
    task="point_cloud_classification",
    batch_size=(24, 24),
    tags=("point_cloud",),
    source="Qi et al., PointNet++, NeurIPS 2017; github.com/yanx27/Pointnet_Pointnet2_pytorch pointnet2_cls_ssg.py",
    param_count=1_475_688,  # counted from the reference's get_model(40, normal_channel=False)
    unsupported_precisions=("fp16",),
    notes="fp16 unsupported: in pure float16 Adam's second moment g^2 underflows to 0 for the "
    "first layer's small gradients (and eps 1e-8 rounds to 0), so the first step divides by "
    "zero and the weights become inf/NaN. Farthest point sampling is the reference's Python loop "
    "(512 + 128 iterations per step). "
    "Batch = clouds of 1024 points.",
)
def pointnet2_ssg_cls(ctx: BuildContext, **kwargs) -> Workload:
    """PointNet++ SSG classifier, ModelNet40 (40 classes), 1024 xyz points per cloud."""
    return _create_pointnet2(ctx, **kwargs)
