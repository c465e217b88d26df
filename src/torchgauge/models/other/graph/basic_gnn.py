"""Basic graph neural networks (GCN, GIN, GraphSAGE, EdgeCNN, GAT) for full-graph node classification.

TorchBench's ``basic_gnn_*`` run PyTorch Geometric's ``BasicGNN`` models (MIT) as
``Model(64, 64, num_layers=3)``: three layers of 64 channels with ReLU in between, no dropout,
no normalisation. Here the message passing is written directly with ``index_add_`` /
``scatter_reduce`` over an edge list (no PyG dependency), on TorchBench's inputs: ``randn(10000,
64)`` node features and ``randint(10000, (2, 200000))`` edges. TorchBench's training step is a
forward and ``out.backward(randn_like(out))``, with no loss and no optimizer step; eval is one
forward. Layers:

* GCN (Kipf & Welling, 2017): ``D^-1/2 (A + I) D^-1/2 X W + b``;
* GIN (Xu et al., 2019): ``MLP((1 + eps) x_i + sum_j x_j)``, eps = 0, MLP = Linear-ReLU-Linear;
* GraphSAGE (Hamilton et al., 2017): ``W_1 mean_j x_j + W_2 x_i`` (mean aggregator);
* EdgeConv (Wang et al., 2019): ``max_j MLP([x_i, x_j - x_i])``, MLP = Linear-ReLU-Linear;
* GAT (Velickovic et al., 2018), as PyG's ``GATConv`` inside ``BasicGNN``'s ``GAT``: one head
  (``heads=1``, PyG's default, which TorchBench keeps), self loops added, logits
  ``leaky_relu(a_src . W x_j + a_dst . W x_i, 0.2)``, an edge softmax over each target's
  incoming edges written as ``torch_geometric.utils.softmax`` (scatter-max of the detached
  logits, ``index_select`` back to the edges, exp, scatter-sum, divide), dropout on the
  attention coefficients with the model's dropout rate (``BasicGNN`` passes it to ``GATConv``),
  heads concatenated in hidden layers and averaged in the output layer.

Edges are ``(2, E)`` index pairs (source, target); messages flow source -> target.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["EdgeConv", "GATConv", "GCNConv", "GINConv", "SAGEConv", "aggregate", "edge_softmax", "gcn_edge_weights"]


def _in_degree(target: torch.Tensor, num_nodes: int, dtype: torch.dtype) -> torch.Tensor:
    # index_add rather than bincount: bincount has no deterministic CUDA kernel
    return torch.zeros(num_nodes, dtype=dtype, device=target.device).index_add_(
        0, target, torch.ones_like(target, dtype=dtype)
    )


def aggregate(messages: torch.Tensor, target: torch.Tensor, num_nodes: int, reduce: str) -> torch.Tensor:
    """Reduce edge messages ``(E, C)`` onto their target nodes: ``(N, C)``.

    ``reduce`` is ``"sum"``, ``"mean"`` or ``"max"``; nodes without incoming edges get zeros.
    """
    out = messages.new_zeros(num_nodes, messages.shape[1])
    if reduce == "max":
        index = target.unsqueeze(1).expand_as(messages)
        return out.scatter_reduce(0, index, messages, reduce="amax", include_self=False)
    out = out.index_add(0, target, messages)
    if reduce == "mean":
        out = out / _in_degree(target, num_nodes, messages.dtype).clamp(min=1).unsqueeze(1)
    elif reduce != "sum":
        raise ValueError(f"unknown reduce {reduce!r}; accepted: sum, mean, max")
    return out


def gcn_edge_weights(edges: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Edges with a self loop per node added, and their weights ``1 / sqrt(deg(source) deg(target))``.

    Degrees count incoming edges including the self loop (the graph is symmetric).
    """
    loops = torch.arange(num_nodes, device=edges.device).expand(2, -1)
    edges = torch.cat([edges, loops], dim=1)
    inv_sqrt = _in_degree(edges[1], num_nodes, torch.float32).rsqrt()
    return edges, inv_sqrt[edges[0]] * inv_sqrt[edges[1]]


class GCNConv(nn.Module):
    """``x (N, C_in) -> (N, C_out)``: symmetric-normalised neighbourhood average of ``x W``, plus bias."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_ch, out_ch, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_ch))

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        edges, weight = gcn_edge_weights(edges, x.shape[0])
        h = self.lin(x)  # transform first: C_out < C_in on the input layer
        return aggregate(h[edges[0]] * weight.unsqueeze(1).to(h.dtype), edges[1], x.shape[0], "sum") + self.bias


class GINConv(nn.Module):
    """``x -> MLP(x_i + sum_j x_j)``, MLP = Linear, ReLU, Linear (PyG BasicGNN's, no norm)."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_ch, out_ch), nn.ReLU(), nn.Linear(out_ch, out_ch))

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        return self.mlp(x + aggregate(x[edges[0]], edges[1], x.shape[0], "sum"))


class SAGEConv(nn.Module):
    """``x -> W_1 mean_j x_j + b + W_2 x_i``."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.lin_neighbours = nn.Linear(in_ch, out_ch)
        self.lin_root = nn.Linear(in_ch, out_ch, bias=False)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        return self.lin_neighbours(aggregate(x[edges[0]], edges[1], x.shape[0], "mean")) + self.lin_root(x)


class EdgeConv(nn.Module):
    """``x -> max_j MLP([x_i, x_j - x_i])``: an edge MLP (Linear, ReLU, Linear) on the pair, max over neighbours."""

    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2 * in_ch, out_ch), nn.ReLU(), nn.Linear(out_ch, out_ch))

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        x_i, x_j = x[edges[1]], x[edges[0]]  # (E, C) at target and source
        return aggregate(self.mlp(torch.cat([x_i, x_j - x_i], dim=1)), edges[1], x.shape[0], "max")


def edge_softmax(logits: torch.Tensor, target: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Softmax of edge logits ``(E, H)`` over the edges sharing a target node: ``(E, H)``.

    As ``torch_geometric.utils.softmax``: the per-target max (of the detached logits; any
    shift cancels) is gathered back to the edges with ``index_select``, and so is the sum.
    """
    peak = aggregate(logits.detach(), target, num_nodes, "max")  # (N, H)
    out = (logits - peak.index_select(0, target)).exp()
    denom = aggregate(out, target, num_nodes, "sum").index_select(0, target)
    return out / (denom + 1e-16)


class GATConv(nn.Module):
    """``x (N, C_in) -> (N, heads * C_out)`` (concat) or ``(N, C_out)`` (mean over heads)."""

    def __init__(self, in_ch: int, out_ch: int, heads: int = 1, concat: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.out_ch, self.concat, self.dropout = heads, out_ch, concat, dropout
        self.lin = nn.Linear(in_ch, heads * out_ch, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_ch))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_ch))
        self.bias = nn.Parameter(torch.zeros(heads * out_ch if concat else out_ch))
        nn.init.xavier_uniform_(self.lin.weight)  # PyG's glorot
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        loops = torch.arange(n, device=edges.device).expand(2, -1)
        source, target = torch.cat([edges, loops], dim=1)  # the graph has no self loops to remove
        h = self.lin(x).view(n, self.heads, self.out_ch)  # (N, H, C)
        a_src, a_dst = (h * self.att_src).sum(-1), (h * self.att_dst).sum(-1)  # (N, H)
        logits = F.leaky_relu(a_src[source] + a_dst[target], 0.2)  # (E + N, H)
        alpha = F.dropout(edge_softmax(logits, target, n), self.dropout, self.training)
        messages = (h[source] * alpha.unsqueeze(-1)).flatten(1)  # (E + N, H * C)
        out = aggregate(messages, target, n, "sum").view(n, self.heads, self.out_ch)
        out = out.flatten(1) if self.concat else out.mean(1)
        return out + self.bias


_LAYERS = {"gcn": GCNConv, "gin": GINConv, "sage": SAGEConv, "edgecnn": EdgeConv, "gat": GATConv}


@dataclass(frozen=True)
class GNNConfig:
    layer: str = "gcn"  # key of _LAYERS
    num_nodes: int = 10_000  # TorchBench's random graph
    num_edges: int = 200_000  # directed, drawn uniformly (self loops and repeats included)
    in_channels: int = 64
    hidden: int = 64  # TorchBench's basic_gnn width
    num_layers: int = 3
    num_classes: int = 64  # out_channels: BasicGNN's default (None) keeps the hidden width
    dropout: float = 0.0  # BasicGNN's default
    heads: int = 1  # GAT only: PyG BasicGNN GAT's default


class BasicGNN(nn.Module):
    """Node features ``(N, C_in)`` and edges ``(2, E)`` -> class logits ``(N, classes)``."""

    def __init__(self, cfg: GNNConfig) -> None:
        super().__init__()
        layer = _LAYERS[cfg.layer]
        widths = [cfg.in_channels] + [cfg.hidden] * (cfg.num_layers - 1) + [cfg.num_classes]
        if cfg.layer == "gat":  # as PyG's GAT.init_conv: hidden layers concatenate heads, the last averages
            last = len(widths) - 2
            self.convs = nn.ModuleList(
                GATConv(a, b if i == last else b // cfg.heads, cfg.heads, concat=i != last, dropout=cfg.dropout)
                for i, (a, b) in enumerate(zip(widths[:-1], widths[1:]))
            )
        else:
            self.convs = nn.ModuleList(layer(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(F.dropout(x, self.dropout, self.training), edges)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


class GradientOnlyWorkload(Workload):
    """TorchBench's basic_gnn train step: forward, then ``out.backward(randn_like(out))``; no optimizer."""

    needs_optimizer = False
    updates_parameters = False  # TorchBench's step ends at backward: gradients, no update

    def train_step(self) -> torch.Tensor:
        with self.autocast():
            out = self.forward()
        out.backward(torch.randn_like(out))
        return out.detach()


def _create_basic_gnn(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(num_nodes=64, num_edges=256, in_channels=32) if ctx.smoke else {}
    cfg = replace(GNNConfig(), **{**smoke, **kwargs})
    if cfg.layer not in _LAYERS:
        raise ValueError(f"unknown layer {cfg.layer!r}; accepted: {', '.join(_LAYERS)}")
    features = ctx.randn(cfg.num_nodes, cfg.in_channels)  # (N, C_in)
    edges = ctx.randint(0, cfg.num_nodes, (2, cfg.num_edges))  # (2, E), TorchBench's randint graph
    return GradientOnlyWorkload(ctx, BasicGNN(cfg), (features, edges))


_SPEC = dict(
    domain="other",
    task="node_classification",
    batch_size=(1, 1),
    tags=("gnn",),
    source="TorchBench basic_gnn (PyG BasicGNN(64, 64, num_layers=3)) on its 10k-node random graph",
)


@register_model(**_SPEC, param_count=12_480)
def basic_gnn_gcn(ctx: BuildContext, **kwargs) -> Workload:
    """3-layer GCN, 64 channels, 10k nodes / 200k random edges."""
    return _create_basic_gnn(ctx, **{"layer": "gcn", **kwargs})


@register_model(**_SPEC, param_count=24_960)
def basic_gnn_gin(ctx: BuildContext, **kwargs) -> Workload:
    """3-layer GIN (sum aggregation, Linear-BN-ReLU-Linear MLPs), 64 hidden."""
    return _create_basic_gnn(ctx, **{"layer": "gin", **kwargs})


@register_model(**_SPEC, param_count=24_768)
def basic_gnn_sage(ctx: BuildContext, **kwargs) -> Workload:
    """3-layer GraphSAGE (mean aggregation), 64 hidden."""
    return _create_basic_gnn(ctx, **{"layer": "sage", **kwargs})


@register_model(**_SPEC, param_count=37_248)
def basic_gnn_edgecnn(ctx: BuildContext, **kwargs) -> Workload:
    """3-layer EdgeCNN (EdgeConv, max aggregation) on the same graph, 64 hidden."""
    return _create_basic_gnn(ctx, **{"layer": "edgecnn", **kwargs})


@register_model(
    **_SPEC,
    unsupported_precisions=("fp16",),
    notes="fp16 unsupported: pure-fp16 Adam (eps 1e-8 underflows to 0) sends the weights to inf/NaN "
    "on the first step; bf16 and amp are fine.",
)
def basic_gnn_gat(ctx: BuildContext, **kwargs) -> Workload:
    """3-layer GAT (one head, attention dropout), 64 hidden."""
    return _create_basic_gnn(ctx, **{"layer": "gat", **kwargs})
