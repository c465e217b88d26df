"""NVIDIA DeepRecommender: a deep autoencoder for collaborative filtering.

Kuchaiev & Ginsburg, "Training Deep AutoEncoders for Collaborative Filtering", 2017
(arXiv:1708.01715); NVIDIA/DeepRecommender ``reco_encoder/model/model.py`` (MIT license) as
configured by TorchBench's ``nvidia_deeprecommender``: a user's rating vector over every item,
encoder 197951-512-512-1024 and an unconstrained mirrored decoder, SELU after every layer
(the decoder's last included), dropout 0.8 on the code layer only, and MSE over the rated
items divided by their count, trained with SGD (momentum 0.9, lr 0.005). Ratings are
synthetic: each user rates about 1% of the items (Netflix's density) with 1..5 stars.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from ...registry import register_model
from ...workload import BuildContext, Workload

__all__: list[str] = []

_SMOKE_MAX_ITEMS = 1000  # items at size="smoke"; the layer stack is unchanged


@dataclass(frozen=True)
class AutoEncoderConfig:
    """DeepRecommender architecture; comments give the reference's flag."""

    num_items: int = 197_951  # input width: TorchBench's toy Netflix item count
    hidden_layers: tuple[int, ...] = (512, 512, 1024)  # --hidden_layers; the last is the code
    dropout: float = 0.8  # --drop_prob, applied to the code layer only
    rating_density: float = 0.01  # fraction of items a user has rated (input sparsity)


class AutoEncoder(nn.Module):
    """Encoder ``items -> ... -> code`` and a decoder with its own weights back to ``items``."""

    def __init__(self, cfg: AutoEncoderConfig) -> None:
        super().__init__()
        sizes = [cfg.num_items, *cfg.hidden_layers]
        # Raw parameters as in the reference: xavier-uniform weights (out, in), zero biases.
        # (nn.Linear would first run its own init, doubling the build time of the 101M-weight layers.)
        self.encode_w, self.encode_b = _layers(sizes)
        self.decode_w, self.decode_b = _layers(sizes[::-1])
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, ratings: torch.Tensor) -> torch.Tensor:
        x = ratings  # (B, items), zeros where unrated
        for w, b in zip(self.encode_w, self.encode_b):
            x = F.selu(F.linear(x, w, b))
        x = self.drop(x)  # (B, code)
        for w, b in zip(self.decode_w, self.decode_b):
            x = F.selu(F.linear(x, w, b))
        return x  # (B, items) dense predictions


def _layers(sizes: list[int]) -> tuple[nn.ParameterList, nn.ParameterList]:
    weights = nn.ParameterList(nn.init.xavier_uniform_(torch.empty(b, a)) for a, b in zip(sizes[:-1], sizes[1:]))
    biases = nn.ParameterList(torch.zeros(b) for b in sizes[1:])
    return weights, biases


def masked_mse(predictions: torch.Tensor, ratings: torch.Tensor) -> torch.Tensor:
    """Squared error on the rated (non-zero) entries only, divided by the number of ratings."""
    mask = (ratings != 0).to(predictions.dtype)
    return F.mse_loss(predictions * mask, ratings, reduction="sum") / mask.sum()


def _create_autoencoder(ctx: BuildContext, **kwargs) -> Workload:
    cfg = AutoEncoderConfig(**kwargs)
    if ctx.smoke:
        cfg = replace(cfg, num_items=min(cfg.num_items, _SMOKE_MAX_ITEMS))
    model = AutoEncoder(cfg)
    rated = ctx.rand(ctx.batch_size, cfg.num_items) < cfg.rating_density
    stars = ctx.randint(1, 6, (ctx.batch_size, cfg.num_items)).to(torch.float32)
    ratings = stars * rated  # (B, items), mostly zeros
    opt = ctx.optimizer(model.parameters(), "sgd", lr=0.005) if ctx.train else None
    # The autoencoder reconstructs its input: the ratings are also the targets.
    return Workload(ctx, model, (ratings,), ratings, loss_fn=masked_mse, optimizer=opt)


@register_model(
    domain="recommendation", task="recommendation", batch_size=(256, 256), param_count=204_475_711,
    source="Kuchaiev & Ginsburg, Training Deep AutoEncoders for Collaborative Filtering, 2017; "
    "NVIDIA/DeepRecommender (MIT) as configured by TorchBench",
)  # fmt: skip
def nvidia_deeprecommender(ctx: BuildContext, **kwargs) -> Workload:
    """Six-layer SELU autoencoder 197951-512-512-1024-512-512-197951, dropout 0.8 on the code."""
    return _create_autoencoder(ctx, **kwargs)
