"""Knowledge-graph link prediction: TransE and the Neural Tensor Network on an FB15k-237-sized graph.

**TransE** (Bordes et al., "Translating Embeddings for Modeling Multi-relational Data", NeurIPS
2013) follows mklimasz/TransE-PyTorch (``model.py``, ``main.py``, ``metric.py``; MIT), whose
defaults are its FB15k-237 configuration: dimension 50, L1 dissimilarity ``||h + r - t||_1``
(``Tensor.norm(p=1, dim=1)``), ``nn.MarginRankingLoss(margin=1)`` with target -1 (positive
distance below the negative one), plain SGD at lr 0.01, batch 128, and entity rows divided by
their L2 norm in place at the start of every forward (the paper's per-iteration normalisation;
the reference spells it ``weight.data[:-1].div_(norm(p=2, dim=1, keepdim=True))``, not
``renorm_``). Initialisation is the paper's: uniform in ``+-6/sqrt(d)``, relations then divided
by their L1 norm. The reference's extra padding row per table (for out-of-vocabulary ids) is
left out: synthetic ids are never out of vocabulary.

**NTN** (Socher, Chen, Manning & Ng, "Reasoning With Neural Tensor Networks for Knowledge Base
Completion", NeurIPS 2013) follows the authors' MATLAB code as ported by
siddharth-agrawal/Neural-Tensor-Network (MIT): ``g(e1, R, e2) = u_R^T tanh(e1^T W_R^[1:k] e2 +
V_R [e1; e2] + b_R)``, relations processed one at a time over the examples of that relation
(here ``F.bilinear`` does the ``k`` slices of one relation at once), initialisation ``W ~
U(+-1/sqrt(2d))``, ``V = 0``, ``b = 0``, ``u = 1``, ten corrupted entities per positive with
head or tail corrupted for the whole batch by a coin flip, loss ``sum max(0, 1 - g(T) + g(T_c))
/ batch + lambda/2 ||theta||^2`` (lambda 1e-4), and L-BFGS with 5 iterations per batch
(scipy's L-BFGS-B there, restarted each batch; ``torch.optim.LBFGS`` here, with a strong-Wolfe
line search and scipy's 10-pair memory, kept across batches). The
margin sign is the paper's (higher score = true); the port trains the negated score, the same
model. Entity vectors in the paper are averages of their word vectors; here each entity has
its own vector (the paper's "EV" variant), initialised as the port's words, ``U(+-1e-4)``.
k = 4 slices and d = 100 (the port uses 3; the paper reports 3 or 4).

Data: seeded uniformly random ``(head, relation, tail)`` ids over 14,541 entities and 237
relations (FB15k-237's sizes), corrupted once at build time (the references resample each
batch). Eval is the reference's ranking protocol (mklimasz ``main.test``): each query is
scored against every entity as tail and as head, and the rank of the true entity is read off
an ``argsort``; the step returns those raw ranks, from which MRR = mean(1/rank) and
hits@10 = mean(rank <= 10). Ranks are raw, not filtered (other true triples are not removed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from ...registry import register_model
from ...workload import BuildContext, Workload

__all__ = ["NTN", "NTNConfig", "TransE", "TransEConfig", "corrupt", "rank_of_truth"]

FB15K237_ENTITIES, FB15K237_RELATIONS = 14_541, 237
# Smoke graph: a few dozen entities and relations.
SMOKE_ENTITIES, SMOKE_RELATIONS = 40, 3
SMOKE_NTN_DIM, SMOKE_LBFGS_ITERS = 16, 2


@dataclass(frozen=True)
class TransEConfig:
    num_entities: int = FB15K237_ENTITIES
    num_relations: int = FB15K237_RELATIONS
    dim: int = 50  # mklimasz --vector_length
    norm: int = 1  # --norm: L1 dissimilarity
    margin: float = 1.0  # --margin
    lr: float = 0.01  # --lr, plain SGD


@dataclass(frozen=True)
class NTNConfig:
    num_entities: int = FB15K237_ENTITIES
    num_relations: int = FB15K237_RELATIONS
    dim: int = 100  # embedding_size
    slices: int = 4  # k
    corrupt: int = 10  # corrupt_size: negatives per positive
    lamda: float = 1e-4  # L2 regularisation
    lbfgs_iters: int = 5  # batch_iterations of L-BFGS per batch
    lbfgs_history: int = 10  # scipy L-BFGS-B's default memory (maxcor); torch's default 100 = 9 GB here


def corrupt(triples: torch.Tensor, replace_head: torch.Tensor, entities: torch.Tensor) -> torch.Tensor:
    """``(B, 3)`` (head, relation, tail) -> copy with the head (where ``replace_head``) or tail set to ``entities``."""
    neg = triples.clone()
    neg[:, 0] = torch.where(replace_head, entities, triples[:, 0])
    neg[:, 2] = torch.where(replace_head, triples[:, 2], entities)
    return neg


def rank_of_truth(scores: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """1-based rank of ``truth`` ``(Q,)`` in each row of ``scores`` ``(Q, N)`` sorted ascending (lower = better)."""
    order = scores.argsort(dim=1)  # (Q, N) entity ids, best first
    return (order == truth.unsqueeze(1)).nonzero()[:, 1] + 1  # (Q,), one hit per row


def _all_candidates(triples: torch.Tensor, num_entities: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every entity as tail and as head of each query: two ``(B * N, 3)`` triple lists (mklimasz ``test``)."""
    b = triples.shape[0]
    heads, rels, tails = (triples[:, i : i + 1].expand(b, num_entities) for i in range(3))
    everyone = torch.arange(num_entities, device=triples.device).expand(b, num_entities)
    tail_side = torch.stack((heads, rels, everyone), dim=2).reshape(-1, 3)
    head_side = torch.stack((everyone, rels, tails), dim=2).reshape(-1, 3)
    return tail_side, head_side


# -- TransE ------------------------------------------------------------------------------------------
class TransE(nn.Module):
    def __init__(self, cfg: TransEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        bound = 6 / math.sqrt(cfg.dim)
        self.entities = nn.Embedding(cfg.num_entities, cfg.dim)
        self.relations = nn.Embedding(cfg.num_relations, cfg.dim)
        with torch.no_grad():
            self.entities.weight.uniform_(-bound, bound)
            self.relations.weight.uniform_(-bound, bound)
            self.relations.weight.div_(self.relations.weight.norm(p=1, dim=1, keepdim=True))

    def normalize_entities(self) -> None:
        """Entity rows to unit L2 norm, in place (the paper's step at each iteration)."""
        with torch.no_grad():
            w = self.entities.weight
            w.div_(w.norm(p=2, dim=1, keepdim=True))

    def distance(self, triples: torch.Tensor) -> torch.Tensor:
        """``(B, 3)`` -> ``(B,)`` dissimilarity ``||h + r - t||_p``."""
        h, r, t = self.entities(triples[:, 0]), self.relations(triples[:, 1]), self.entities(triples[:, 2])
        return (h + r - t).norm(p=self.cfg.norm, dim=1)

    def forward(self, positive: torch.Tensor, negative: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.normalize_entities()
        return self.distance(positive), self.distance(negative)

    def rank(self, triples: torch.Tensor) -> torch.Tensor:
        """Raw ranks of the true tail, then of the true head, among all entities: ``(2B,)``."""
        b, n = triples.shape[0], self.cfg.num_entities
        tail_side, head_side = _all_candidates(triples, n)
        scores = torch.cat((self.distance(tail_side).view(b, n), self.distance(head_side).view(b, n)))
        return rank_of_truth(scores, torch.cat((triples[:, 2], triples[:, 0])))


class TransEWorkload(Workload):
    def forward(self):
        positive, negative = self.inputs
        return self.module(positive, negative) if self.ctx.train else self.module.rank(positive).float()

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        positive, negative = outputs
        return self.loss_fn(positive, negative, self.targets)


# -- Neural Tensor Network -------------------------------------------------------------------------------
class NTN(nn.Module):
    def __init__(self, cfg: NTNConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, k, nr = cfg.dim, cfg.slices, cfg.num_relations
        self.entities = nn.Parameter(torch.empty(cfg.num_entities, d).uniform_(-1e-4, 1e-4))
        r = 1 / math.sqrt(2 * d)
        self.W = nn.Parameter(torch.empty(nr, k, d, d).uniform_(-r, r))  # W_R^[1:k]: F.bilinear's (out, in1, in2)
        self.V = nn.Parameter(torch.zeros(nr, k, 2 * d))  # V_R acting on [e1; e2]
        self.b = nn.Parameter(torch.zeros(nr, k))
        self.U = nn.Parameter(torch.ones(nr, k))

    @staticmethod
    def score_relation(
        e1: torch.Tensor, e2: torch.Tensor, w: torch.Tensor, v: torch.Tensor, b: torch.Tensor, u: torch.Tensor
    ) -> torch.Tensor:
        """``g(e1, R, e2)`` for ``(M, d)`` entity vectors of one relation with parameters ``W_R, V_R, b_R, u_R``:
        ``(M,)``."""
        hidden = torch.tanh(F.bilinear(e1, e2, w, b) + F.linear(torch.cat((e1, e2), 1), v))  # (M, k)
        return hidden @ u

    def forward(self, positive: torch.Tensor, negative: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores of ``(B, 3)`` positive and negative triples, computed relation by relation (reference loop)."""
        pos = positive.new_zeros(positive.shape[0], dtype=self.entities.dtype)
        neg = torch.zeros_like(pos)
        # One view per relation, taken once: backward then stacks the per-relation gradients in one
        # tensor instead of adding a full (R, k, d, d) gradient for every relation indexed.
        per_relation = zip(*(p.unbind(0) for p in (self.W, self.V, self.b, self.U)))
        for r, params in enumerate(per_relation):
            rows = positive[:, 1] == r  # (B,) examples of relation r
            p, n = positive[rows], negative[rows]
            # .to: under autocast the scores come back in the low-precision dtype
            pos[rows] = self.score_relation(self.entities[p[:, 0]], self.entities[p[:, 2]], *params).to(pos.dtype)
            neg[rows] = self.score_relation(self.entities[n[:, 0]], self.entities[n[:, 2]], *params).to(neg.dtype)
        return pos, neg

    def score_all(self, fixed: torch.Tensor, rel: torch.Tensor, fixed_is_head: bool) -> torch.Tensor:
        """Scores ``(B, N)`` of ``(fixed, rel, e)`` (or ``(e, rel, fixed)``) for every entity ``e``."""
        d, ent = self.cfg.dim, self.entities
        x = ent[fixed]  # (B, d)
        w, v = self.W[rel], self.V[rel]  # (B, k, d, d), (B, k, 2d)
        if fixed_is_head:  # x^T W_k e = (W_k^T x) . e
            bil = torch.einsum("bi,bkij->bkj", x, w) @ ent.T  # (B, k, N)
            lin = (v[..., :d] @ x.unsqueeze(-1)) + v[..., d:] @ ent.T  # (B, k, 1) + (B, k, N)
        else:  # e^T W_k x = e . (W_k x)
            bil = torch.einsum("bkij,bj->bki", w, x) @ ent.T
            lin = v[..., :d] @ ent.T + (v[..., d:] @ x.unsqueeze(-1))
        hidden = torch.tanh(bil + lin + self.b[rel].unsqueeze(-1))  # (B, k, N)
        return torch.einsum("bk,bkn->bn", self.U[rel], hidden)

    def rank(self, triples: torch.Tensor) -> torch.Tensor:
        """Raw ranks of the true tail, then of the true head, among all entities: ``(2B,)`` (higher score = better)."""
        h, r, t = triples.unbind(1)
        scores = torch.cat((self.score_all(h, r, True), self.score_all(t, r, False)))
        return rank_of_truth(-scores, torch.cat((t, h)))


def ntn_loss(model: NTN, pos: torch.Tensor, neg: torch.Tensor, batch: int) -> torch.Tensor:
    """Contrastive max-margin ``sum max(0, 1 - g(T) + g(T_c)) / batch + lambda/2 ||theta||^2``."""
    hinge = F.margin_ranking_loss(pos, neg, torch.ones_like(pos), margin=1.0, reduction="sum") / batch
    return hinge + 0.5 * model.cfg.lamda * sum(p.pow(2).sum() for p in model.parameters())


class NTNWorkload(Workload):
    def forward(self):
        positive, negative = self.inputs
        return self.module(positive, negative) if self.ctx.train else self.module.rank(positive).float()

    def compute_loss(self, outputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return ntn_loss(self.module, *outputs, batch=self.ctx.batch_size)

    def train_step(self) -> torch.Tensor:
        """One L-BFGS call of ``lbfgs_iters`` iterations on the batch (the closure re-evaluates the loss)."""

        def closure() -> torch.Tensor:
            self.optimizer.zero_grad(set_to_none=True)
            with self.autocast():
                loss = self.compute_loss(self.forward())
            loss.backward()
            return loss

        return self.optimizer.step(closure).detach()


# -- builders -----------------------------------------------------------------------------------------
def _graph_sizes(ctx: BuildContext, cfg):
    return replace(
        cfg,
        num_entities=ctx.pick(cfg.num_entities, SMOKE_ENTITIES),
        num_relations=ctx.pick(cfg.num_relations, SMOKE_RELATIONS),
    )


def _random_triples(ctx: BuildContext, n: int, num_entities: int, num_relations: int) -> torch.Tensor:
    """``(n, 3)`` seeded random (head, relation, tail) ids."""
    heads, tails = ctx.randint(0, num_entities, (n,)), ctx.randint(0, num_entities, (n,))
    return torch.stack((heads, ctx.randint(0, num_relations, (n,)), tails), dim=1)


def _create_transe(ctx: BuildContext, **kwargs) -> Workload:
    cfg = _graph_sizes(ctx, replace(TransEConfig(), **kwargs))
    b = ctx.batch_size
    positive = _random_triples(ctx, b, cfg.num_entities, cfg.num_relations)
    negative = corrupt(positive, ctx.randint(0, 2, (b,)).bool(), ctx.randint(0, cfg.num_entities, (b,)))
    model = TransE(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr) if ctx.train else None
    target = torch.tensor([-1.0], device=ctx.device)  # positive distance should be the smaller
    return TransEWorkload(
        ctx, model, (positive, negative), target, loss_fn=nn.MarginRankingLoss(margin=cfg.margin), optimizer=opt
    )


def _create_ntn(ctx: BuildContext, **kwargs) -> Workload:
    cfg = _graph_sizes(ctx, replace(NTNConfig(), **kwargs))
    cfg = replace(cfg, dim=ctx.pick(cfg.dim, SMOKE_NTN_DIM), lbfgs_iters=ctx.pick(cfg.lbfgs_iters, SMOKE_LBFGS_ITERS))
    b = ctx.batch_size
    positive = _random_triples(ctx, b, cfg.num_entities, cfg.num_relations)
    if ctx.train:  # corrupt_size copies of each positive, one coin flip (head or tail) for the batch
        positive = positive.repeat(cfg.corrupt, 1)
        flip = ctx.rand(1) < 0.5
        negative = corrupt(positive, flip.expand(b * cfg.corrupt), ctx.randint(0, cfg.num_entities, (b * cfg.corrupt,)))
    else:
        negative = positive
    model = NTN(cfg)
    opt = (
        torch.optim.LBFGS(
            model.parameters(), max_iter=cfg.lbfgs_iters, history_size=cfg.lbfgs_history, line_search_fn="strong_wolfe"
        )
        if ctx.train
        else None
    )
    return NTNWorkload(ctx, model, (positive, negative), optimizer=opt)


@register_model(
    domain="recommendation",
    task="link_prediction",
    batch_size=(128, 128),
    tags=("knowledge_graph",),
    source="Bordes et al., Translating Embeddings for Modeling Multi-relational Data, NeurIPS 2013; "
    "mklimasz/TransE-PyTorch",
    param_count=(FB15K237_ENTITIES + FB15K237_RELATIONS) * 50,  # 738,900: one 50-d row per id
    notes="Synthetic FB15k-237-sized graph; eval ranks every query's true tail and head among all "
    "14,541 entities (raw, unfiltered ranks).",
)
def transe_fb15k237(ctx: BuildContext, **kwargs) -> Workload:
    """TransE, d=50, L1 distance, margin 1, SGD, on an FB15k-237-sized graph."""
    return _create_transe(ctx, **kwargs)


@register_model(
    domain="recommendation",
    task="link_prediction",
    batch_size=(20000, 128),
    tags=("knowledge_graph",),
    source="Socher et al., Reasoning With Neural Tensor Networks for Knowledge Base Completion, "
    "NeurIPS 2013; siddharth-agrawal/Neural-Tensor-Network",
    # entities 14,541 x 100 + per relation (W 4x100x100 + V 4x200 + b 4 + u 4) x 237 = 11,125,596
    param_count=FB15K237_ENTITIES * 100 + FB15K237_RELATIONS * (4 * 100 * 100 + 4 * 200 + 4 + 4),
    notes="Train batch = positives (each with 10 corrupted copies); one step is one L-BFGS call of 5 "
    "iterations. Entity vectors are free embeddings, not averages of word vectors.",
)
def ntn_fb15k237(ctx: BuildContext, **kwargs) -> Workload:
    """Neural Tensor Network, d=100, k=4, max-margin loss, L-BFGS, on an FB15k-237-sized graph."""
    return _create_ntn(ctx, **kwargs)
