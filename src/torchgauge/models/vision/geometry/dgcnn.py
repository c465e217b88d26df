"""DGCNN (dynamic graph CNN) classification on ModelNet40.

Wang, Sun, Liu, Sarma, Bronstein and Solomon, "Dynamic Graph CNN for Learning on Point Clouds",
ACM TOG 2019. Reference implementation: ``DGCNN_cls`` in ``model.py`` of
github.com/antao97/dgcnn.pytorch (MIT; the PyTorch port of WangYueFDU/dgcnn).

As the reference: four EdgeConv layers, each recomputing the k-nearest-neighbour graph (k = 20) in
its own input feature space (pairwise distances by the ``-|a|^2 + 2ab - |b|^2`` expansion, then
``topk``), gathering neighbour features by flat indexing, forming edge features
``(x_j - x_i, x_i)``, a 1x1 ``Conv2d`` + ``BatchNorm2d`` + ``LeakyReLU(0.2)`` and a max over the
neighbours; the four outputs (64 + 64 + 128 + 256) are concatenated and lifted to 1024 by a
``Conv1d``, pooled over points by ``adaptive_max_pool1d`` and ``adaptive_avg_pool1d``, and
classified by ``Linear-BN-LeakyReLU-Dropout(0.5)`` twice and ``Linear(256, 40)``. Loss: the
reference's ``cal_loss``, cross-entropy with label smoothing 0.2 written out with ``scatter`` and
``log_softmax``; SGD (lr 0.1, momentum 0.9, weight decay 1e-4), batch 32, 1024 points.

Parameters: 1,809,576, counted from the reference's layer definitions (``emb_dims=1024``,
``k=20``, 40 classes). Data: seeded Gaussian clouds normalized to the unit sphere as the
ModelNet40 HDF5 files are (the reference's random translation augmentation runs in its data
loader, outside the compute step). Written from the paper and the description above; no code
copied. :func:`knn` and :func:`get_graph_feature` are shared with DCP's DGCNN embedding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .clouds import unit_sphere_clouds

__all__ = ["DGCNNClassifier", "DGCNNConfig", "get_graph_feature", "knn", "smoothed_cross_entropy"]

# The reference's cal_loss smoothing: the true class gets 0.8, the others share 0.2.
LABEL_SMOOTHING = 0.2


@dataclass(frozen=True)
class DGCNNConfig:
    num_points: int = 1024
    num_classes: int = 40  # ModelNet40
    k: int = 20  # neighbours per point in every EdgeConv layer
    edge_widths: tuple[int, ...] = (64, 64, 128, 256)  # output channels of the four EdgeConv layers
    emb_dims: int = 1024  # width of the pointwise layer before pooling
    head: tuple[int, ...] = (512, 256)
    dropout: float = 0.5


def knn(x: torch.Tensor, k: int) -> torch.Tensor:
    """``(B, C, N) -> (B, N, k)`` indices of each point's k nearest points (itself included)."""
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x**2, dim=1, keepdim=True)  # (B, 1, N)
    neg_sq_dist = -xx - inner - xx.transpose(2, 1)  # (B, N, N), larger = closer
    return neg_sq_dist.topk(k=k, dim=-1)[1]


def get_graph_feature(x: torch.Tensor, k: int, *, relative: bool = True) -> torch.Tensor:
    """Edge features ``(B, 2C, N, k)`` of the k-NN graph of ``x`` ``(B, C, N)``.

    ``relative=True`` gives DGCNN's ``(x_j - x_i, x_i)``; ``False`` gives DCP's ``(x_j, x_i)``.
    """
    b, c, n = x.shape
    idx = knn(x, k)  # (B, N, k)
    idx = (idx + torch.arange(0, b, device=x.device).view(-1, 1, 1) * n).view(-1)  # into the flat (B * N) rows
    x = x.transpose(2, 1).contiguous()  # (B, N, C)
    neighbours = x.view(b * n, -1)[idx, :].view(b, n, k, c)
    centre = x.view(b, n, 1, c).repeat(1, 1, k, 1)
    if relative:
        neighbours = neighbours - centre
    return torch.cat((neighbours, centre), dim=3).permute(0, 3, 1, 2).contiguous()


def smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The reference's ``cal_loss``: ``-sum(q log p)`` with ``q`` = one-hot smoothed by 0.2 over the other classes."""
    n_class = logits.size(1)
    one_hot = torch.zeros_like(logits).scatter(1, labels.view(-1, 1), 1)
    one_hot = one_hot * (1 - LABEL_SMOOTHING) + (1 - one_hot) * LABEL_SMOOTHING / (n_class - 1)
    return -(one_hot * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


class DGCNNClassifier(nn.Module):
    """Clouds ``(B, 3, N)`` -> class logits ``(B, num_classes)``."""

    def __init__(self, cfg: DGCNNConfig) -> None:
        super().__init__()
        self.k = cfg.k
        self.edge_convs = nn.ModuleList()
        last = 3
        for width in cfg.edge_widths:
            self.edge_convs.append(
                nn.Sequential(
                    nn.Conv2d(2 * last, width, kernel_size=1, bias=False), nn.BatchNorm2d(width), nn.LeakyReLU(0.2)
                )
            )
            last = width
        self.embed = nn.Sequential(
            nn.Conv1d(sum(cfg.edge_widths), cfg.emb_dims, kernel_size=1, bias=False),
            nn.BatchNorm1d(cfg.emb_dims),
            nn.LeakyReLU(0.2),
        )
        layers, last = [], 2 * cfg.emb_dims  # max and average pooled
        for i, width in enumerate(cfg.head):
            # the reference's first head layer has no bias (BatchNorm follows); the second keeps it
            layers += [
                nn.Linear(last, width, bias=i > 0),
                nn.BatchNorm1d(width),
                nn.LeakyReLU(0.2),
                nn.Dropout(cfg.dropout),
            ]
            last = width
        self.head = nn.Sequential(*layers, nn.Linear(last, cfg.num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.size(0)
        outs = []
        for conv in self.edge_convs:
            x = conv(get_graph_feature(x, self.k))  # (B, C', N, k): graph rebuilt in feature space
            x = x.max(dim=-1, keepdim=False)[0]  # (B, C', N)
            outs.append(x)
        x = self.embed(torch.cat(outs, dim=1))  # (B, emb, N)
        x = torch.cat((F.adaptive_max_pool1d(x, 1).view(b, -1), F.adaptive_avg_pool1d(x, 1).view(b, -1)), 1)
        return self.head(x)


_SMOKE = dict(num_points=64, k=8, edge_widths=(8, 8, 16, 32), emb_dims=64, head=(32, 16))


def _create_dgcnn(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(DGCNNConfig(), **{**ctx.pick({}, _SMOKE), **kwargs})
    xyz = unit_sphere_clouds(ctx, ctx.batch_size, cfg.num_points).transpose(1, 2)  # (B, 3, N)
    labels = ctx.randint(0, cfg.num_classes, (ctx.batch_size,))
    model = DGCNNClassifier(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4) if ctx.train else None
    return Workload(ctx, model, (xyz,), labels, loss_fn=smoothed_cross_entropy, optimizer=opt)


@register_model(
    domain="vision",
    task="point_cloud_classification",
    batch_size=(32, 16),
    tags=("point_cloud",),
    source="Wang et al., Dynamic Graph CNN for Learning on Point Clouds, TOG 2019; "
    "github.com/antao97/dgcnn.pytorch DGCNN_cls",
    param_count=1_809_576,  # counted from the reference's DGCNN_cls(emb_dims=1024, k=20), 40 classes
    notes="Batch = clouds of 1024 points; the k-NN graph is recomputed in each EdgeConv layer.",
)
def dgcnn_cls(ctx: BuildContext, **kwargs) -> Workload:
    """DGCNN classifier, ModelNet40, 1024 points, k = 20, embedding 1024."""
    return _create_dgcnn(ctx, **kwargs)
