"""DLRM: Deep Learning Recommendation Model (Naumov et al., 2019, arXiv:1906.00091).

Follows facebookresearch/dlrm ``dlrm_s_pytorch.py`` (MIT license) as configured by
TorchBench's ``dlrm`` model: dense features through a bottom MLP, every sparse feature
through its own ``nn.EmbeddingBag(mode="sum", sparse=True)`` with offsets, a pairwise dot
interaction keeping each pair once, a top MLP ending in a sigmoid, and BCE against the
click probability. Inputs are the reference's random data: uniform dense features, a bag
of ``num_indices_per_lookup`` row ids per sample and table, soft targets in [0, 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn

from ...registry import register_model
from ...workload import BuildContext, Workload

__all__: list[str] = []

# Criteo Display Advertising Challenge (Kaggle): rows of the 26 categorical features, as
# printed by the reference's data loader and used by bench/dlrm_s_criteo_kaggle.sh.
CRITEO_KAGGLE_TABLE_SIZES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip

# At size="smoke" tables and bags shrink to these caps; MLP widths stay (cheap at batch 2).
_SMOKE_MAX_ROWS = 1000
_SMOKE_MAX_LOOKUPS = 8


@dataclass(frozen=True)
class DLRMConfig:
    """DLRM architecture; field comments give the reference's command-line flag."""

    embedding_dim: int = 64  # --arch-sparse-feature-size; also the bottom MLP's output width
    num_tables: int = 8  # sparse features, used when table_sizes is empty
    rows_per_table: int = 1_000_000  # rows of each table, used when table_sizes is empty
    table_sizes: tuple[int, ...] = ()  # --arch-embedding-size; explicit rows per table
    num_dense_features: int = 512  # first entry of --arch-mlp-bot
    bottom_mlp: tuple[int, ...] = (512,)  # hidden widths of --arch-mlp-bot (output: embedding_dim)
    top_mlp: tuple[int, ...] = (1024, 1024, 1024)  # hidden widths of --arch-mlp-top (output: 1)
    num_indices_per_lookup: int = 100  # --num-indices-per-lookup: row ids per bag
    fixed_lookups: bool = True  # --num-indices-per-lookup-fixed; else bag sizes in [1, L]
    interaction_itself: bool = False  # --arch-interaction-itself: keep each feature's self-dot

    @property
    def tables(self) -> tuple[int, ...]:
        """Rows of every embedding table."""
        return tuple(self.table_sizes) or (self.rows_per_table,) * self.num_tables

    @property
    def num_interactions(self) -> int:
        """Width of the top MLP's input: the kept pairwise dots plus the dense vector."""
        return interaction_output_dim(len(self.tables) + 1, self.embedding_dim, self.interaction_itself)


def interaction_output_dim(num_features: int, dim: int, itself: bool = False) -> int:
    """``F*(F-1)/2 + d`` (``F*(F+1)/2 + d`` with self-interaction) for F feature vectors of width d."""
    pairs = num_features * (num_features + 1) // 2 if itself else num_features * (num_features - 1) // 2
    return pairs + dim


def _mlp(widths: list[int], final_sigmoid: bool) -> nn.Sequential:
    """Linear+ReLU stack with the reference's init: W ~ N(0, sqrt(2/(fan_in+fan_out))), b ~ N(0, sqrt(1/fan_out))."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:])):
        linear = nn.Linear(n_in, n_out)
        nn.init.normal_(linear.weight, 0.0, math.sqrt(2.0 / (n_in + n_out)))
        nn.init.normal_(linear.bias, 0.0, math.sqrt(1.0 / n_out))
        last = i == len(widths) - 2
        layers += [linear, nn.Sigmoid() if last and final_sigmoid else nn.ReLU()]
    return nn.Sequential(*layers)


class DotInteraction(nn.Module):
    """Pairwise dot products of the feature vectors, each unordered pair once, next to the dense vector."""

    def __init__(self, num_features: int, itself: bool = False) -> None:
        super().__init__()
        # Strictly lower triangle (i > j), or with the diagonal: the reference's li/lj gather.
        # Built once as buffers so that no index tensor is copied to the device per step.
        rows, cols = torch.tril_indices(num_features, num_features, offset=0 if itself else -1)
        self.register_buffer("rows", rows, persistent=False)
        self.register_buffer("cols", cols, persistent=False)

    def forward(self, dense: torch.Tensor, pooled: list[torch.Tensor]) -> torch.Tensor:
        batch, dim = dense.shape
        features = torch.cat([dense, *pooled], dim=1).view(batch, -1, dim)  # (B, F, d)
        gram = torch.bmm(features, features.transpose(1, 2))  # (B, F, F)
        return torch.cat([dense, gram[:, self.rows, self.cols]], dim=1)  # (B, d + pairs)


class DLRM(nn.Module):
    """Bottom MLP + embedding bags -> dot interaction -> top MLP -> click probability."""

    def __init__(self, cfg: DLRMConfig) -> None:
        super().__init__()
        self.bottom = _mlp([cfg.num_dense_features, *cfg.bottom_mlp, cfg.embedding_dim], final_sigmoid=False)
        self.embeddings = nn.ModuleList()
        for rows in cfg.tables:
            # The reference's U(-sqrt(1/rows), sqrt(1/rows)), given directly so that the large
            # tables are not first filled by the default init (seconds at 1M rows).
            bound = math.sqrt(1.0 / rows)
            weight = torch.empty(rows, cfg.embedding_dim).uniform_(-bound, bound)
            self.embeddings.append(nn.EmbeddingBag.from_pretrained(weight, freeze=False, mode="sum", sparse=True))
        self.interaction = DotInteraction(len(cfg.tables) + 1, cfg.interaction_itself)
        self.top = _mlp([cfg.num_interactions, *cfg.top_mlp, 1], final_sigmoid=True)

    def forward(self, dense: torch.Tensor, offsets: torch.Tensor, indices: list[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)  # (B, d)
        # offsets: (T, B) start of each sample's bag; indices[k]: (sum of bag sizes,) row ids of table k
        pooled = [bag(idx, offsets[k]) for k, (bag, idx) in enumerate(zip(self.embeddings, indices))]  # T x (B, d)
        return self.top(self.interaction(x, pooled))  # (B, 1)


def random_bags(
    ctx: BuildContext, batch: int, rows: int, max_lookups: int, fixed: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Offsets ``(B,)`` and row ids of one table's bags, as the reference's random data.

    Every bag holds ``max_lookups`` ids when ``fixed``, else a uniform size in ``[1, max_lookups]``.
    """
    if fixed:
        sizes = torch.full((batch,), max_lookups, dtype=torch.long, device=ctx.device)
    else:
        sizes = ctx.randint(1, max_lookups + 1, (batch,))
    offsets = torch.cumsum(sizes, 0) - sizes  # exclusive prefix sum
    indices = ctx.randint(0, rows, (int(sizes.sum()),))
    return offsets, indices


def _create_dlrm(ctx: BuildContext, **kwargs) -> Workload:
    cfg = DLRMConfig(**kwargs)
    if ctx.smoke:  # same layers, tiny tables and bags
        cfg = replace(
            cfg,
            table_sizes=tuple(min(rows, _SMOKE_MAX_ROWS) for rows in cfg.tables),
            num_indices_per_lookup=min(cfg.num_indices_per_lookup, _SMOKE_MAX_LOOKUPS),
        )
    model = DLRM(cfg)
    batch = ctx.batch_size
    dense = ctx.rand(batch, cfg.num_dense_features)
    bags = [random_bags(ctx, batch, rows, cfg.num_indices_per_lookup, cfg.fixed_lookups) for rows in cfg.tables]
    offsets = torch.stack([o for o, _ in bags])  # (T, B)
    indices = [i for _, i in bags]
    targets = ctx.rand(batch, 1)  # soft click labels, as the reference's random data
    # Plain SGD (lr 0.01): the reference's optimizer, and one that accepts sparse gradients.
    opt = ctx.optimizer(model.parameters(), "sgd", lr=0.01, momentum=0.0) if ctx.train else None
    bce = nn.functional.binary_cross_entropy
    return Workload(ctx, model, (dense, offsets, indices), targets, loss_fn=bce, optimizer=opt)


_SOURCE = "Naumov et al., DLRM, 2019; facebookresearch/dlrm (MIT) as configured by TorchBench"


@register_model(
    domain="recommendation", task="recommendation", source=_SOURCE, batch_size=(2048, 2048),
    tags=("mlperf",), param_count=514_499_137,
)  # fmt: skip
def dlrm(ctx: BuildContext, **kwargs) -> Workload:
    """TorchBench's DLRM: 8 tables of 1M rows x 64, bottom 512-512-64, top 1024-1024-1024-1, 100 ids per bag."""
    return _create_dlrm(ctx, **kwargs)


@register_model(
    domain="recommendation", task="recommendation", source=_SOURCE + " (bench/dlrm_s_criteo_kaggle.sh)",
    batch_size=(128, 16384), param_count=540_677_217,
)  # fmt: skip
def dlrm_criteo_kaggle(ctx: BuildContext, **kwargs) -> Workload:
    """The reference's Criteo Kaggle model: 26 tables of its sizes x 16, bottom 13-512-256-64-16, top 512-256-1."""
    arch = dict(embedding_dim=16, table_sizes=CRITEO_KAGGLE_TABLE_SIZES, num_dense_features=13,
                bottom_mlp=(512, 256, 64), top_mlp=(512, 256), num_indices_per_lookup=1)  # fmt: skip
    return _create_dlrm(ctx, **{**arch, **kwargs})


@register_model(
    domain="recommendation", task="recommendation", source=_SOURCE + ", scaled to 26 tables x 128",
    batch_size=(2048, 2048),
    notes="Scale variant with no reference count: 26 tables (Criteo's sparse features) of 1M rows x 128, "
    "about 3.3B parameters (13 GB in fp32); needs a large GPU at size=full.",
)  # fmt: skip
def dlrm_large(ctx: BuildContext, **kwargs) -> Workload:
    """DLRM with 26 tables of 1M rows x 128, bottom 512-512-128, top 1024-1024-1024-1: embedding-bound at scale."""
    return _create_dlrm(ctx, **{**dict(embedding_dim=128, num_tables=26), **kwargs})
