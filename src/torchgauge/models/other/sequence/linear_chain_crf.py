"""BiLSTM-CRF tagger: structured prediction by dynamic programming over a linear chain.

Stands in for TorchBench's ``pytorch_struct`` (harvardnlp/pytorch-struct, MIT, where a
neural CFG is trained through a CKY partition function): the same kind of workload, a
log-space dynamic program whose partition function is differentiated, here on the
linear-chain CRF of Lample et al. (2016), "Neural Architectures for Named Entity
Recognition", written from scratch (no torch-struct dependency).

Sentences of up to 30 tokens (TorchBench keeps 5 < length < 30) from a 10k vocabulary are
tagged with the 17 Universal POS tags (UDPOS, TorchBench's data set). Emissions come from a
word embedding and a BiLSTM; the CRF adds tag transitions with start/end scores. Training
minimises the NLL ``log Z - score(gold)``, ``log Z`` by the forward algorithm (a logsumexp
recursion vectorised over batch and tags); eval decodes with Viterbi.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["BiLSTMCRF", "LinearChainCRF"]


@dataclass(frozen=True)
class CRFTaggerConfig:
    vocab_size: int = 10_000  # UDPOS English words seen at least 3 times
    embedding_dim: int = 100  # Lample et al.
    hidden: int = 256  # BiLSTM output (128 per direction); TorchBench's H = 256
    num_tags: int = 17  # Universal POS tags
    max_len: int = 30  # TorchBench keeps sentences shorter than 30 tokens
    min_len: int = 6


class LinearChainCRF(nn.Module):
    """Tag transitions ``(K, K)`` [from, to] plus start and end scores; dynamic programs over emissions ``(B, T, K)``.

    ``mask (B, T)`` marks real tokens; every sequence starts at t = 0 and has length >= 1.
    """

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))
        self.start = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``log Z (B,)``: logsumexp of the scores of all tag sequences (forward algorithm)."""
        alpha = self.start + emissions[:, 0]  # (B, K): log-sum over the paths ending in each tag
        for t in range(1, emissions.shape[1]):
            step = torch.logsumexp(alpha.unsqueeze(2) + self.transitions, dim=1) + emissions[:, t]  # (B, K)
            alpha = torch.where(mask[:, t, None], step, alpha)  # padding carries alpha through
        return torch.logsumexp(alpha + self.end, dim=1)

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Score ``(B,)`` of the tag sequences ``tags (B, T)``."""
        maskf = mask.to(emissions.dtype)
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2) * maskf  # (B, T)
        trans = self.transitions[tags[:, :-1], tags[:, 1:]] * maskf[:, 1:]  # (B, T-1)
        last = tags.gather(1, (mask.sum(1, keepdim=True) - 1)).squeeze(1)  # (B,) tag of the last real token
        return self.start[tags[:, 0]] + emit.sum(1) + trans.sum(1) + self.end[last]

    def viterbi(self, emissions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Best score ``(B,)`` and best tags ``(B, T)`` (padding repeats the last real tag)."""
        num_tags = emissions.shape[2]
        keep = torch.arange(num_tags, device=emissions.device).expand(emissions.shape[0], num_tags)
        best = self.start + emissions[:, 0]
        pointers = []
        for t in range(1, emissions.shape[1]):
            best_prev, argbest = (best.unsqueeze(2) + self.transitions).max(dim=1)  # over the previous tag
            best = torch.where(mask[:, t, None], best_prev + emissions[:, t], best)
            pointers.append(torch.where(mask[:, t, None], argbest, keep))
        score, tag = (best + self.end).max(dim=1)
        path = [tag]
        for back in reversed(pointers):
            tag = back.gather(1, tag.unsqueeze(1)).squeeze(1)
            path.append(tag)
        return score, torch.stack(path[::-1], dim=1)


class BiLSTMCRF(nn.Module):
    """Token ids ``(B, T)`` -> emissions ``(B, T, K)``; the CRF sits in ``self.crf``."""

    def __init__(self, cfg: CRFTaggerConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.embedding_dim)
        self.lstm = nn.LSTM(cfg.embedding_dim, cfg.hidden // 2, batch_first=True, bidirectional=True)
        self.proj = nn.Linear(cfg.hidden, cfg.num_tags)
        self.crf = LinearChainCRF(cfg.num_tags)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # The backward LSTM also reads the padding: packing would need the lengths on the
        # host (a device sync); the CRF masks padded positions out.
        hidden, _ = self.lstm(self.embed(tokens))  # (B, T, hidden)
        return self.proj(hidden)


class CRFTaggingWorkload(Workload):
    """Train: CRF negative log-likelihood; eval: Viterbi decoding ``(scores, tags)``."""

    def forward(self) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        tokens, mask = self.inputs
        emissions = self.module(tokens)
        return emissions if self.ctx.train else self.module.crf.viterbi(emissions, mask)

    def compute_loss(self, emissions: torch.Tensor) -> torch.Tensor:
        _, mask = self.inputs
        crf = self.module.crf
        return (crf.log_partition(emissions, mask) - crf.score(emissions, self.targets, mask)).mean()


def _create_crf_tagger(ctx: BuildContext, **kwargs) -> Workload:
    cfg = replace(CRFTaggerConfig(), **kwargs)
    max_len = ctx.pick(cfg.max_len, 12)
    lengths = ctx.randint(min(cfg.min_len, max_len), max_len + 1, (ctx.batch_size,))
    lengths[0] = max_len  # one full-length sentence fixes the padded width
    mask = torch.arange(max_len, device=ctx.device) < lengths.unsqueeze(1)  # (B, T)
    tokens = ctx.randint(0, cfg.vocab_size, (ctx.batch_size, max_len))
    tags = ctx.randint(0, cfg.num_tags, (ctx.batch_size, max_len))
    model = BiLSTMCRF(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.75, 0.999)) if ctx.train else None
    return CRFTaggingWorkload(ctx, model, (tokens, mask), tags, optimizer=opt)


@register_model(
    domain="other",
    task="structured_prediction",
    batch_size=(200, 200),
    source="Lample et al., BiLSTM-CRF, 2016; stands in for TorchBench pytorch_struct",
    notes="Linear-chain CRF in place of pytorch-struct's neural CFG; forward algorithm + Viterbi.",
)
def pytorch_struct(ctx: BuildContext, **kwargs) -> Workload:
    """BiLSTM-CRF POS tagger (17 tags, sentences <= 30 tokens): forward-algorithm NLL, Viterbi eval."""
    return _create_crf_tagger(ctx, **kwargs)
