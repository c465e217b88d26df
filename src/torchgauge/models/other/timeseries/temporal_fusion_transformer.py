"""Temporal Fusion Transformer (TFT): interpretable multi-horizon quantile forecasting.

Lim, Arik, Loeff and Pfister, "Temporal Fusion Transformers for Interpretable Multi-horizon
Time Series Forecasting", International Journal of Forecasting 37(4), 2021. Reference
implementations: google-research/google-research ``tft/libs/tft_model.py`` (Apache-2.0, Keras)
and the PyTorch port of pytorch-forecasting ``models/temporal_fusion_transformer`` (MIT), whose
PyTorch spellings (``F.glu`` gates, ``F.elu``, ``nn.LSTM``) this follows.

Blocks as the paper: gated residual networks ``LayerNorm(skip + GLU(W2 ELU(W1 x + W3 c)))``
(skip projected by a linear layer when the width changes); variable selection networks (a GRN
of the flattened inputs gives softmax weights over variables, each variable goes through its
own GRN); four static covariate encoders (selection, enrichment, LSTM h and c contexts); an
LSTM encoder over the 168 past steps whose state seeds an LSTM decoder over the 24 future steps;
a gated skip around the LSTMs; static enrichment; interpretable multi-head attention (value
projection shared by the heads, per-head queries and keys, heads averaged) under a causal mask;
a position-wise GRN; quantile outputs (0.1, 0.5, 0.9) of the decoder steps, trained by the
quantile (pinball) loss. Inputs as the reference's Electricity setup: a static customer id
(370 customers), the past power usage (observed), and three known reals (hour, day of week,
hours from start). Hyperparameters of the paper's Table (Electricity): hidden 160, 4 heads,
dropout 0.1, batch 64, Adam lr 1e-3, gradient norm clipped at 0.01.

Differences: the series are synthetic (``synthetic_series``, standardized as the reference
standardizes each customer) and known inputs are formed from the hour count. The variable
selection GRN's skip is a linear layer as in the Keras reference (pytorch-forecasting
resamples by interpolation). Masked attention scores are filled with the dtype's lowest value
instead of -1e9 (which overflows fp16). Written from the paper and the description above; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .synthetic_series import HOURS_PER_YEAR, seasonal_series, start_hours

__all__ = [
    "GatedResidualNetwork",
    "InterpretableMultiHeadAttention",
    "TemporalFusionTransformer",
    "TFTConfig",
    "VariableSelectionNetwork",
    "quantile_loss",
]

# The paper's Electricity gradient clipping (max_gradient_norm).
MAX_GRAD_NORM = 0.01


@dataclass(frozen=True)
class TFTConfig:
    hidden: int = 160  # d_model of every block (Electricity)
    heads: int = 4
    dropout: float = 0.1
    encoder_steps: int = 168  # one week of hourly history
    decoder_steps: int = 24  # one day ahead
    num_static_categories: int = 370  # customers in the Electricity data
    known_reals: int = 3  # hour, day of week, hours from start
    quantiles: tuple[float, ...] = (0.1, 0.5, 0.9)


class GatedLinearUnit(nn.Module):
    """Dropout, then ``GLU(Linear(x))``: ``(..., in) -> (..., out)``."""

    def __init__(self, in_features: int, out_features: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(in_features, 2 * out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.glu(self.fc(self.dropout(x)), dim=-1)


class GateAddNorm(nn.Module):
    """``LayerNorm(skip + GLU(x))``."""

    def __init__(self, in_features: int, out_features: int, dropout: float) -> None:
        super().__init__()
        self.glu = GatedLinearUnit(in_features, out_features, dropout)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.norm(skip + self.glu(x))


class GatedResidualNetwork(nn.Module):
    """``LayerNorm(skip(x) + GLU(W2 ELU(W1 x + W3 c)))``: ``(..., in) [, (..., ctx)] -> (..., out)``."""

    def __init__(
        self, in_features: int, hidden: int, out_features: int, dropout: float, context_features: int | None = None
    ) -> None:
        super().__init__()
        self.skip = nn.Linear(in_features, out_features) if in_features != out_features else None
        self.fc1 = nn.Linear(in_features, hidden)
        self.context = nn.Linear(context_features, hidden, bias=False) if context_features else None
        self.fc2 = nn.Linear(hidden, hidden)
        self.gate_norm = GateAddNorm(hidden, out_features, dropout)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        skip = x if self.skip is None else self.skip(x)
        h = self.fc1(x)
        if context is not None:
            h = h + self.context(context)
        h = self.fc2(F.elu(h))
        return self.gate_norm(h, skip)


class VariableSelectionNetwork(nn.Module):
    """``(..., V, H) [, context (..., H)] -> ((..., H), weights (..., V))``."""

    def __init__(self, num_vars: int, hidden: int, dropout: float, context_features: int | None = None) -> None:
        super().__init__()
        self.flat = GatedResidualNetwork(num_vars * hidden, hidden, num_vars, dropout, context_features)
        self.single = nn.ModuleList(GatedResidualNetwork(hidden, hidden, hidden, dropout) for _ in range(num_vars))

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        weights = torch.softmax(self.flat(x.flatten(-2), context), dim=-1)  # (..., V)
        processed = torch.stack([grn(x[..., i, :]) for i, grn in enumerate(self.single)], dim=-2)  # (..., V, H)
        return (weights.unsqueeze(-1) * processed).sum(-2), weights


class InterpretableMultiHeadAttention(nn.Module):
    """Heads with own queries and keys, one shared value projection, averaged: ``(B, T, H) -> (B, T, H)``."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.d_head = hidden // heads
        self.queries = nn.ModuleList(nn.Linear(hidden, self.d_head) for _ in range(heads))
        self.keys = nn.ModuleList(nn.Linear(hidden, self.d_head) for _ in range(heads))
        self.value = nn.Linear(hidden, self.d_head)  # shared: the averaged heads stay interpretable
        self.out = nn.Linear(self.d_head, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``mask`` ``(T, T)`` True where attention is forbidden; returns outputs and weights ``(B, heads, T, T)``."""
        v = self.value(x)  # (B, T, dh)
        heads, weights = [], []
        for query, key in zip(self.queries, self.keys):
            scores = torch.bmm(query(x), key(x).transpose(1, 2)) / self.d_head**0.5  # (B, T, T)
            # The references fill with -1e9, which overflows fp16; the dtype's lowest value masks the same.
            scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
            attn = torch.softmax(scores, dim=-1)  # no attention dropout, as both references
            heads.append(self.dropout(torch.bmm(attn, v)))
            weights.append(attn)
        out = torch.stack(heads, dim=1).mean(dim=1)  # (B, T, dh)
        return self.dropout(self.out(out)), torch.stack(weights, dim=1)


class TemporalFusionTransformer(nn.Module):
    """``(static_id (B,), past_target (B, Te), known (B, Te + Td, K)) -> quantiles (B, Td, Q)``."""

    def __init__(self, cfg: TFTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, p = cfg.hidden, cfg.dropout
        # Input transformations: an embedding per categorical, a linear map per real variable.
        self.static_embedding = nn.Embedding(cfg.num_static_categories, h)
        self.target_transform = nn.Linear(1, h)
        self.known_transforms = nn.ModuleList(nn.Linear(1, h) for _ in range(cfg.known_reals))
        self.static_selection = VariableSelectionNetwork(1, h, p)
        self.static_context_selection = GatedResidualNetwork(h, h, h, p)
        self.static_context_enrichment = GatedResidualNetwork(h, h, h, p)
        self.static_context_state_h = GatedResidualNetwork(h, h, h, p)
        self.static_context_state_c = GatedResidualNetwork(h, h, h, p)
        self.history_selection = VariableSelectionNetwork(1 + cfg.known_reals, h, p, context_features=h)
        self.future_selection = VariableSelectionNetwork(cfg.known_reals, h, p, context_features=h)
        self.lstm_encoder = nn.LSTM(h, h, batch_first=True)
        self.lstm_decoder = nn.LSTM(h, h, batch_first=True)
        self.post_lstm_gate = GateAddNorm(h, h, p)
        self.static_enrichment = GatedResidualNetwork(h, h, h, p, context_features=h)
        self.attention = InterpretableMultiHeadAttention(h, cfg.heads, p)
        self.post_attention_gate = GateAddNorm(h, h, p)
        self.positionwise = GatedResidualNetwork(h, h, h, p)
        self.pre_output_gate = GateAddNorm(h, h, 0.0)  # the reference gates here without dropout
        self.output = nn.Linear(h, len(cfg.quantiles))

    def forward(self, static_id: torch.Tensor, past_target: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
        te, total = self.cfg.encoder_steps, known.shape[1]
        known_emb = torch.stack(
            [f(known[..., i : i + 1]) for i, f in enumerate(self.known_transforms)], dim=-2
        )  # (B, T, K, H)
        target_emb = self.target_transform(past_target.unsqueeze(-1)).unsqueeze(-2)  # (B, Te, 1, H)

        static, _ = self.static_selection(self.static_embedding(static_id).unsqueeze(-2))  # (B, H)
        c_selection = self.static_context_selection(static)
        c_enrichment = self.static_context_enrichment(static)
        c_h, c_c = self.static_context_state_h(static), self.static_context_state_c(static)

        history, _ = self.history_selection(
            torch.cat([target_emb, known_emb[:, :te]], dim=-2), c_selection.unsqueeze(1).expand(-1, te, -1)
        )  # (B, Te, H)
        future, _ = self.future_selection(known_emb[:, te:], c_selection.unsqueeze(1).expand(-1, total - te, -1))
        enc_out, state = self.lstm_encoder(history, (c_h.unsqueeze(0), c_c.unsqueeze(0)))
        dec_out, _ = self.lstm_decoder(future, state)
        temporal = self.post_lstm_gate(torch.cat([enc_out, dec_out], dim=1), torch.cat([history, future], dim=1))

        enriched = self.static_enrichment(temporal, c_enrichment.unsqueeze(1).expand(-1, total, -1))  # (B, T, H)
        causal = torch.ones(total, total, dtype=torch.bool, device=known.device).triu(1)
        attended, _ = self.attention(enriched, causal)
        x = self.positionwise(self.post_attention_gate(attended, enriched))
        x = self.pre_output_gate(x, temporal)
        return self.output(x[:, te:])  # (B, Td, Q)


def quantile_loss(pred: torch.Tensor, target: torch.Tensor, quantiles: tuple[float, ...]) -> torch.Tensor:
    """``sum_q mean(max(q e, (q - 1) e))`` with ``e = y - y_hat_q``: pred ``(..., Q)``, target ``(...)``."""
    q = torch.tensor(quantiles, dtype=pred.dtype, device=pred.device)
    errors = target.unsqueeze(-1) - pred
    return torch.max(q * errors, (q - 1) * errors).flatten(0, -2).mean(0).sum()


class TFTWorkload(Workload):
    """Quantile loss on the decoder steps; Adam with the reference's gradient-norm clipping."""

    max_grad_norm = MAX_GRAD_NORM

    def compute_loss(self, outputs: torch.Tensor) -> torch.Tensor:
        return quantile_loss(outputs, self.targets, self.module.cfg.quantiles)


def _create_tft(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(hidden=16, heads=2, encoder_steps=24, decoder_steps=8, num_static_categories=8) if ctx.smoke else {}
    cfg = replace(TFTConfig(), **{**smoke, **kwargs})
    total = cfg.encoder_steps + cfg.decoder_steps
    start = start_hours(ctx, ctx.batch_size)
    usage = seasonal_series(ctx, start, total, 1).squeeze(-1)  # (B, T)
    usage = (usage - usage[:, : cfg.encoder_steps].mean(1, keepdim=True)) / usage[:, : cfg.encoder_steps].std(
        1, keepdim=True
    )
    hours = start[:, None] + torch.arange(total, device=start.device)
    known = torch.stack(
        [(hours % 24) / 23.0 - 0.5, (hours // 24 % 7) / 6.0 - 0.5, hours / HOURS_PER_YEAR - 0.5], dim=-1
    ).float()  # (B, T, 3)
    static_id = ctx.randint(0, cfg.num_static_categories, (ctx.batch_size,))
    past, target = usage[:, : cfg.encoder_steps].contiguous(), usage[:, cfg.encoder_steps :].contiguous()
    model = TemporalFusionTransformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if ctx.train else None
    return TFTWorkload(ctx, model, (static_id, past, known), target, optimizer=opt)


@register_model(
    domain="other",
    task="forecasting",
    batch_size=(64, 64),
    tags=("timeseries", "attention", "rnn"),
    source="Lim et al., Temporal Fusion Transformers, IJF 2021; google-research tft and "
    "pytorch-forecasting TemporalFusionTransformer (Electricity configuration)",
    unsupported_precisions=("fp16",),
    notes="Synthetic Electricity-shaped data: 168 past + 24 future hourly steps, 370 static ids. "
    "Returns the 0.1/0.5/0.9 quantiles of the 24 future steps. fp16 unsupported: pure-fp16 "
    "training turns the parameters NaN from the second step (Adam in fp16, no loss scaling); "
    "fp16 eval, bf16 and amp run.",
)
def tft_electricity(ctx: BuildContext, **kwargs) -> Workload:
    """TFT (hidden 160, 4 heads), 168 -> 24 hourly steps, quantile loss, clipped Adam."""
    return _create_tft(ctx, **kwargs)
