"""Skip-gram word2vec with negative sampling (Mikolov, Sutskever, Chen, Corrado & Dean, 2013).

"Distributed Representations of Words and Phrases and their Compositionality", NeurIPS 2013,
as the common PyTorch implementations write it (e.g. Andras7/word2vec-pytorch; its repository
carries no licence file, so nothing of it is reused beyond the description here): two
``nn.Embedding(sparse=True)`` tables, the input vectors ``u`` initialised uniform in
``+-1/dim`` and the output vectors ``v`` at zero, and the loss

    -log sigmoid(u_c . v_o) - sum_k log sigmoid(-u_c . v_k),   v_k ~ P_n(w) = unigram(w)^0.75 / Z

with both scores clamped to [-10, 10] (as that implementation), averaged over the batch and
minimised by ``torch.optim.SparseAdam`` (lr 1e-3): the backward pass produces sparse row
gradients for the rows the batch touched, and only those rows' moments are updated.
Five negatives per pair (word2vec.c's ``-negative 5``), drawn every step by
``torch.multinomial`` from the unigram^0.75 distribution (the references draw them from a
precomputed 1e8-entry table; the distribution is the same).

Sizes are text8 with ``min_count 5`` (71,291 words), 300 dimensions (the paper's size); batch
32 (center, context) pairs as that implementation. Word counts are synthetic: Zipf's law
``count(rank r) ∝ 1 / r`` over the vocabulary; centers and contexts are drawn from it once
(fixed batch). Frequent-word subsampling and the learning-rate schedule (word2vec.c's linear decay, that
implementation's per-batch CosineAnnealingLR) are data-pipeline / schedule matters, left out.

Eval step = gensim's ``most_similar`` for a batch of words: unit-normalise the input vectors,
cosine similarity of each query word with the whole vocabulary, the top 10 other words
(``topk``; the query word itself masked out).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["SkipGram", "SkipGramConfig", "noise_distribution", "zipf_counts"]

# text8 (first 1e8 bytes of English Wikipedia) with word2vec's min_count 5.
TEXT8_VOCAB = 71_291


@dataclass(frozen=True)
class SkipGramConfig:
    vocab_size: int = TEXT8_VOCAB
    dim: int = 300  # the paper's vector size
    negatives: int = 5  # word2vec.c -negative 5
    score_clamp: float = 10.0  # scores clamped to +-10 before log-sigmoid (Andras7/word2vec-pytorch)
    lr: float = 1e-3  # SparseAdam
    topk: int = 10  # eval: neighbours per query word (gensim's topn default)


def zipf_counts(vocab_size: int) -> torch.Tensor:
    """Synthetic word counts ``(V,)``, most frequent first: ``count(r) = 1e6 / r`` (Zipf's law)."""
    return 1e6 / torch.arange(1, vocab_size + 1, dtype=torch.float64)


def noise_distribution(counts: torch.Tensor) -> torch.Tensor:
    """The negative-sampling distribution ``count^0.75 / sum(count^0.75)`` ``(V,)`` in float32."""
    p = counts.pow(0.75)
    return (p / p.sum()).float()


class SkipGram(nn.Module):
    """Input (``u``) and output (``v``) vectors; ``forward`` is the negative-sampling loss."""

    def __init__(self, cfg: SkipGramConfig) -> None:
        super().__init__()
        self.score_clamp = cfg.score_clamp
        self.u_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim, sparse=True)
        self.v_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim, sparse=True)
        nn.init.uniform_(self.u_embeddings.weight, -1.0 / cfg.dim, 1.0 / cfg.dim)
        nn.init.zeros_(self.v_embeddings.weight)

    def forward(self, center: torch.Tensor, context: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        """``center (B,)``, ``context (B,)``, ``negatives (B, K)`` word ids -> mean loss (scalar)."""
        c = self.score_clamp
        emb_u = self.u_embeddings(center)  # (B, D)
        emb_v = self.v_embeddings(context)  # (B, D)
        emb_neg = self.v_embeddings(negatives)  # (B, K, D)
        score = torch.clamp((emb_u * emb_v).sum(dim=1), -c, c)  # (B,)
        neg_score = torch.clamp(torch.bmm(emb_neg, emb_u.unsqueeze(2)).squeeze(2), -c, c)  # (B, K)
        loss = -F.logsigmoid(score) - F.logsigmoid(-neg_score).sum(dim=1)  # (B,)
        return loss.mean()

    def most_similar(self, words: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Cosine similarities and ids ``(Q, k)`` of each query word's ``k`` nearest other words."""
        vectors = F.normalize(self.u_embeddings.weight, dim=1)  # (V, D) unit rows
        sims = vectors[words] @ vectors.T  # (Q, V)
        sims[torch.arange(words.numel(), device=words.device), words] = float("-inf")  # not the word itself
        return sims.topk(k, dim=1)


class SkipGramWorkload(Workload):
    """Inputs ``(center, context, noise_probs, query_words)``; negatives are drawn in the step."""

    def __init__(self, ctx: BuildContext, module: SkipGram, inputs: tuple, cfg: SkipGramConfig, **kwargs) -> None:
        super().__init__(ctx, module, inputs, **kwargs)
        self.cfg = cfg

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        center, context, noise_probs, queries = self.inputs
        if not self.ctx.train:
            return self.module.most_similar(queries, self.cfg.topk)
        negatives = torch.multinomial(noise_probs, center.numel() * self.cfg.negatives, replacement=True)
        return self.module(center, context, negatives.view(-1, self.cfg.negatives))

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs


def _create_skipgram(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(vocab_size=500, dim=16) if ctx.smoke else {}
    cfg = replace(SkipGramConfig(), **{**smoke, **kwargs})
    unigram = zipf_counts(cfg.vocab_size)
    # (center, context) pairs: words of a Zipf text; queries: words of every frequency
    pairs = torch.multinomial(unigram, 2 * ctx.batch_size, replacement=True, generator=ctx.generator())
    center, context = pairs.to(ctx.device).view(2, ctx.batch_size)
    queries = ctx.randint(0, cfg.vocab_size, (ctx.batch_size,))
    noise_probs = noise_distribution(unigram).to(ctx.device)
    model = SkipGram(cfg)
    opt = torch.optim.SparseAdam(list(model.parameters()), lr=cfg.lr) if ctx.train else None
    return SkipGramWorkload(ctx, model, (center, context, noise_probs, queries), cfg, optimizer=opt)


@register_model(
    domain="nlp",
    task="word_embedding",
    batch_size=(32, 32),
    tags=("sparse",),
    source="Mikolov et al., Distributed Representations of Words and Phrases, 2013; "
    "Andras7/word2vec-pytorch SkipGramModel + SparseAdam",
    param_count=42_774_600,  # 2 tables x 71,291 words (text8, min_count 5) x 300
    unsupported_precisions=("fp16",),
    notes="Synthetic Zipf word counts over text8's 71,291-word vocabulary; negatives drawn each step "
    "with torch.multinomial from unigram^0.75. Train batch = (center, context) pairs; eval batch "
    "= query words, each ranked against the whole vocabulary by cosine similarity (top 10). fp16 "
    "unsupported: SparseAdam's sparse add has no Half kernel on CPU (torch 2.13).",
)
def word2vec_skipgram(ctx: BuildContext, **kwargs) -> Workload:
    """Skip-gram with 5 negative samples, 300-d vectors, text8 vocabulary, SparseAdam."""
    return _create_skipgram(ctx, **kwargs)
