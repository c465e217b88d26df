"""ProdLDA: a neural topic model trained by autoencoding variational inference.

Srivastava and Sutton, "Autoencoding Variational Inference for Topic Models", ICLR 2017. The
reference implementation is Pyro's ProdLDA tutorial (pyro.ai/examples/prodlda.html, Apache-2.0),
written here in plain PyTorch with ``torch.distributions``:

- encoder (the guide): ``Linear(V, 100) -> softplus -> Linear(100, 100) -> softplus -> dropout``,
  then two heads ``Linear(100, K)``, each followed by ``BatchNorm1d(K, affine=False)``, giving the
  mean and log-variance of ``q(log theta | w) = Normal(mu, sigma)``;
- the paper's logistic-normal (Laplace) approximation of the Dirichlet prior: the tutorial's prior
  ``log theta ~ Normal(0, 1)`` per topic, ``theta = softmax(log theta)``;
- decoder: ``dropout -> Linear(K, V, bias=False) -> BatchNorm1d(V, affine=False) -> softmax``,
  the word probabilities ``sigma(beta theta)`` of a product of experts;
- loss: the negative ELBO summed over documents, ``-log Multinomial(w | sigma(beta theta)) +
  KL(q || p)``, one reparameterised sample (``rsample``) and the KL in closed form by
  ``torch.distributions.kl_divergence`` (Pyro's ``TraceMeanField_ELBO``); Adam, lr 1e-3.

Configuration as the tutorial: 20 topics, 100 hidden units, dropout 0.2, batch 32, the 12,722-word
vocabulary of 20 newsgroups (``CountVectorizer(max_df=0.5, min_df=20, stop_words='english')``).
Eval is the inference path: topic proportions ``softmax(mu)`` (the posterior's mode in log space,
dropout off) and the reconstructed word distribution ``sigma(beta theta)``.

Differences: the documents are synthetic bags of words (below). Pyro scores the documents with
``Multinomial(total_count=max length, probs)``; ``log_prob`` ignores ``total_count`` beyond
validation, and here it is the same ``torch.distributions.Multinomial``. A Dirichlet posterior
sampled by ``Dirichlet.rsample`` (the later "Dirichlet VAE" variants) is not what the paper or
Pyro's current tutorial do: both use the logistic-normal approximation, followed here. Written
from the paper and the tutorial; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.distributions import Independent, Multinomial, Normal, kl_divergence
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["ProdLDA", "ProdLDAConfig", "negative_elbo", "synthetic_documents"]

# The 20-newsgroups vocabulary of Pyro's tutorial after CountVectorizer(max_df=0.5, min_df=20).
NEWSGROUPS_VOCAB = 12_722
# Document lengths (words kept by the vectorizer) of the synthetic corpus: uniform in this range.
DOC_LENGTH = (20, 300)
# Topics of the synthetic generating process (20 newsgroups), independent of the model's topics.
DATA_TOPICS = 20


@dataclass(frozen=True)
class ProdLDAConfig:
    vocab_size: int = NEWSGROUPS_VOCAB  # V
    num_topics: int = 20  # K, the tutorial's choice
    hidden: int = 100  # encoder width, as the paper and tutorial
    dropout: float = 0.2  # against component collapse (encoder output and decoder input)


class ProdLDAEncoder(nn.Module):
    """Counts ``(B, V)`` -> ``(mu, sigma)`` of ``q(log theta | w)``, each ``(B, K)``."""

    def __init__(self, cfg: ProdLDAConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.vocab_size, cfg.hidden)
        self.fc2 = nn.Linear(cfg.hidden, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)
        self.fc_mu = nn.Linear(cfg.hidden, cfg.num_topics)
        self.fc_logvar = nn.Linear(cfg.hidden, cfg.num_topics)
        # affine=False as the tutorial: normalisation only, fewer parameters, no collapse
        self.bn_mu = nn.BatchNorm1d(cfg.num_topics, affine=False)
        self.bn_logvar = nn.BatchNorm1d(cfg.num_topics, affine=False)

    def forward(self, docs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.softplus(self.fc1(docs))
        h = self.drop(F.softplus(self.fc2(h)))  # (B, H)
        mu = self.bn_mu(self.fc_mu(h))
        logvar = self.bn_logvar(self.fc_logvar(h))
        return mu, (0.5 * logvar).exp()


class ProdLDADecoder(nn.Module):
    """Topic proportions ``(B, K)`` -> word probabilities ``sigma(beta theta)`` ``(B, V)``."""

    def __init__(self, cfg: ProdLDAConfig) -> None:
        super().__init__()
        self.drop = nn.Dropout(cfg.dropout)
        self.beta = nn.Linear(cfg.num_topics, cfg.vocab_size, bias=False)  # unnormalised topics
        self.bn = nn.BatchNorm1d(cfg.vocab_size, affine=False)

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.bn(self.beta(self.drop(theta))), dim=1)


class ProdLDA(nn.Module):
    """Training forward: ``(q, p, word_probs)``; :meth:`infer`: topic proportions and reconstruction."""

    def __init__(self, cfg: ProdLDAConfig) -> None:
        super().__init__()
        self.num_topics = cfg.num_topics
        self.encoder = ProdLDAEncoder(cfg)
        self.decoder = ProdLDADecoder(cfg)

    def prior(self, like: torch.Tensor) -> Independent:
        """The tutorial's ``Normal(0, 1)`` on ``log theta``: a logistic-normal stand-in for Dirichlet(1)."""
        return Independent(Normal(like.new_zeros(like.shape), like.new_ones(like.shape)), 1)

    def forward(self, docs: torch.Tensor) -> tuple[Independent, Independent, torch.Tensor]:
        mu, sigma = self.encoder(docs)
        posterior = Independent(Normal(mu, sigma), 1)  # q(log theta | w), batch (B,), event (K,)
        theta = F.softmax(posterior.rsample(), dim=-1)  # (B, K) on the simplex
        return posterior, self.prior(mu), self.decoder(theta)

    def infer(self, docs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Topic proportions ``softmax(mu)`` ``(B, K)`` and word probabilities ``(B, V)``."""
        mu, _ = self.encoder(docs)
        theta = F.softmax(mu, dim=-1)
        return theta, self.decoder(theta)


def negative_elbo(
    posterior: Independent, prior: Independent, word_probs: torch.Tensor, docs: torch.Tensor
) -> torch.Tensor:
    """``sum_d [KL(q_d || p) - log Multinomial(w_d | probs_d)]``: Pyro's mean-field ELBO, negated."""
    # Pyro's trick: one total_count for the batch; log_prob uses each document's own length.
    total_count = int(docs.sum(-1).max())
    log_likelihood = Multinomial(total_count, probs=word_probs).log_prob(docs)  # (B,)
    return (kl_divergence(posterior, prior) - log_likelihood).sum()


def synthetic_documents(ctx: BuildContext, num_docs: int, vocab_size: int) -> torch.Tensor:
    """``(N, V)`` word counts from an LDA-like process with Zipfian topics (20-newsgroups-like).

    Each of :data:`DATA_TOPICS` topics is a Zipf law ``p(rank r) ~ 1 / r`` over its own random
    ordering of the vocabulary; a document mixes them with logistic-normal proportions and draws
    a length uniform in :data:`DOC_LENGTH`. Built on the CPU with the context's generator.
    """
    gen = ctx.generator()
    zipf = 1.0 / torch.arange(1, vocab_size + 1, dtype=torch.float32)
    order = torch.rand(DATA_TOPICS, vocab_size, generator=gen).argsort(dim=-1)
    topics = zipf[order]
    topics = topics / topics.sum(-1, keepdim=True)  # (T, V)
    mix = F.softmax(2.0 * torch.randn(num_docs, DATA_TOPICS, generator=gen), dim=-1)  # (N, T)
    lo, hi = DOC_LENGTH
    lengths = torch.randint(lo, hi + 1, (num_docs,), generator=gen)
    words = torch.multinomial(mix @ topics, hi, replacement=True, generator=gen)  # (N, hi) word ids
    kept = (torch.arange(hi) < lengths[:, None]).float()  # the first `length` draws count
    counts = torch.zeros(num_docs, vocab_size).scatter_add_(1, words, kept)
    return counts.to(ctx.device)


class ProdLDAWorkload(Workload):
    """Train: negative ELBO of one batch of documents; eval: topic proportions and reconstruction."""

    def forward(self) -> tuple:
        (docs,) = self.inputs
        return self.module(docs) if self.ctx.train else self.module.infer(docs)

    def compute_loss(self, outputs: tuple) -> torch.Tensor:
        posterior, prior, word_probs = outputs
        return negative_elbo(posterior, prior, word_probs, self.inputs[0])


def _create_prodlda(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(vocab_size=500, num_topics=5, hidden=16) if ctx.smoke else {}
    cfg = replace(ProdLDAConfig(), **{**smoke, **kwargs})
    docs = synthetic_documents(ctx, ctx.batch_size, cfg.vocab_size)
    model = ProdLDA(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if ctx.train else None
    return ProdLDAWorkload(ctx, model, (docs,), optimizer=opt)


@register_model(
    domain="other",
    task="topic_model",
    batch_size=(32, 32),
    tags=("probabilistic", "vae"),
    source="Srivastava & Sutton, Autoencoding Variational Inference for Topic Models (ProdLDA), "
    "ICLR 2017; Pyro ProdLDA tutorial",
    # fc1 1,272,300 + fc2 10,100 + two heads 2 x 2,020 + beta 254,440 (BatchNorms have no affine)
    param_count=1_540_880,
    unsupported_precisions=("fp16",),
    notes="Synthetic 20-newsgroups-like bags of words (12,722-word vocabulary, Zipfian topics). "
    "Logistic-normal posterior and prior, as Pyro's tutorial and the paper. "
    "fp16 unsupported: pure-fp16 training turns the parameters NaN within a few steps (Adam in "
    "fp16, no loss scaling); fp16 eval, bf16 and amp run finite.",
)
def prodlda(ctx: BuildContext, **kwargs) -> Workload:
    """ProdLDA (20 topics, 100 hidden) on 12,722-word bags of words, negative ELBO with analytic KL."""
    return _create_prodlda(ctx, **kwargs)
