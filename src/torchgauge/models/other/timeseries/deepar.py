"""DeepAR: probabilistic forecasting with an autoregressive LSTM and a negative-binomial likelihood.

Salinas, Flunkert, Gasthaus and Januschowski, "DeepAR: Probabilistic Forecasting with
Autoregressive Recurrent Networks", International Journal of Forecasting 36(3), 2020. Reference
implementations: GluonTS ``gluonts/torch/model/deepar`` (Apache-2.0) and pytorch-forecasting
``DeepAR`` with ``NegativeBinomialDistributionLoss`` (MIT); both build the likelihood from
``torch.distributions.NegativeBinomial``.

As the paper and GluonTS: each step's input is the lagged target (GluonTS's hourly lag
pattern: 1..7 hours and 24k - 1, 24k, 24k + 1 for k = 1..7 days) divided by the series scale
``nu = 1 + mean(z)`` over the context, hourly time features (hour of day, day of week, day of
month, day of year) plus an age feature ``log10(2 + t)``, and static features (an embedding of
the series id, ``min(50, (cardinality + 1) // 2)`` wide, and ``log nu``); a 2-layer LSTM of
40 cells with dropout 0.1; a linear projection to the negative binomial's mean and shape,
``mu = nu softplus(.)`` and ``alpha = softplus(.) / sqrt(nu)`` (the paper's scaling), i.e.
``NegativeBinomial(total_count=1 / alpha, logits=log(mu alpha))``. Training is teacher-forced
over the context and prediction ranges with the negative log-likelihood and Adam (lr 1e-3,
batch 32, GluonTS's defaults). Inference unrolls the context, then draws 100 sample paths
(``num_parallel_samples``) ancestrally: at each of the 24 future steps the LSTM runs one step
on every path and a value is sampled from the predicted distribution and fed back as a lag.

Configuration: hourly Electricity-like counts, context 168 h, horizon 24 h, 370 series ids.
Differences: the series are synthetic count data (``synthetic_series`` through a softplus,
rounded); the age feature counts hours from the start of the year, not of the series.
Written from the paper and the description above; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.distributions import NegativeBinomial
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .synthetic_series import calendar_features, seasonal_series, start_hours

__all__ = ["DeepAR", "DeepARConfig", "HOURLY_LAGS", "lagged_values", "negative_binomial"]

# GluonTS's lag pattern for hourly data, up to one week: the last 7 hours, then each day's same hour +-1.
HOURLY_LAGS = tuple(range(1, 8)) + tuple(24 * k + d for k in range(1, 8) for d in (-1, 0, 1))
# Hourly time features (calendar_features) + the age feature.
TIME_FEATURES = 4 + 1


@dataclass(frozen=True)
class DeepARConfig:
    context_length: int = 168  # one week of hourly history (the paper's Electricity setup)
    prediction_length: int = 24  # one day ahead
    num_series: int = 370  # Electricity customers: cardinality of the static id
    hidden: int = 40  # GluonTS num_cells
    num_layers: int = 2
    dropout: float = 0.1
    num_samples: int = 100  # GluonTS num_parallel_samples
    lags: tuple[int, ...] = HOURLY_LAGS

    @property
    def embedding_dim(self) -> int:
        return min(50, (self.num_series + 1) // 2)  # GluonTS's default embedding width


def lagged_values(sequence: torch.Tensor, lags: torch.Tensor, start: int, steps: int) -> torch.Tensor:
    """``(N, S), (K,) -> (N, steps, K)``: entry ``[n, t, k]`` is ``sequence[n, start + t - lags[k]]``."""
    positions = start + torch.arange(steps, device=sequence.device)
    return sequence[:, positions[:, None] - lags[None, :]]


def negative_binomial(mu: torch.Tensor, alpha: torch.Tensor) -> NegativeBinomial:
    """The negative binomial of mean ``mu`` and shape ``alpha`` (variance ``mu + alpha mu^2``)."""
    return NegativeBinomial(total_count=1 / alpha, logits=torch.log(mu) + torch.log(alpha))


class DeepAR(nn.Module):
    """Autoregressive LSTM; ``series (B, max_lag + T)`` counts, ``features (B, T, F)`` for the last ``T`` steps."""

    def __init__(self, cfg: DeepARConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("lags", torch.tensor(cfg.lags), persistent=False)
        self.embedding = nn.Embedding(cfg.num_series, cfg.embedding_dim)
        input_size = len(cfg.lags) + TIME_FEATURES + cfg.embedding_dim + 1  # + log scale
        self.rnn = nn.LSTM(input_size, cfg.hidden, num_layers=cfg.num_layers, dropout=cfg.dropout, batch_first=True)
        self.proj = nn.Linear(cfg.hidden, 2)  # mean and shape, before softplus

    @property
    def history(self) -> int:
        return max(self.cfg.lags)

    def distribution(self, out: torch.Tensor, scale: torch.Tensor) -> NegativeBinomial:
        """LSTM outputs ``(N, T, H)``, scale ``(N, 1)`` -> a negative binomial of batch shape ``(N, T)``."""
        mu, alpha = F.softplus(self.proj(out)).unbind(-1)
        return negative_binomial(mu * scale, alpha / scale.sqrt())

    def unroll(
        self,
        series: torch.Tensor,
        scale: torch.Tensor,
        features: torch.Tensor,
        static: torch.Tensor,
        start: int,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """LSTM over positions ``start .. start + T - 1``, ``T = features.shape[1]``; each sees earlier values only."""
        steps = features.shape[1]
        lags = lagged_values(series / scale, self.lags, start, steps)  # (N, T, K)
        x = torch.cat([lags, features, static.unsqueeze(1).expand(-1, steps, -1)], dim=-1)
        return self.rnn(x, state)

    def static_features(self, series_id: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.embedding(series_id), scale.log()], dim=-1)  # (B, E + 1)

    def scale(self, series: torch.Tensor) -> torch.Tensor:
        """``nu = 1 + mean`` of the context (the ``context_length`` values before the prediction range)."""
        end = self.history + self.cfg.context_length
        return 1 + series[:, self.history : end].mean(dim=1, keepdim=True)  # (B, 1)

    def forward(self, series: torch.Tensor, features: torch.Tensor, series_id: torch.Tensor) -> NegativeBinomial:
        """Teacher-forced likelihood of every position of the context and prediction ranges: batch ``(B, T)``."""
        scale = self.scale(series)
        out, _ = self.unroll(series, scale, features, self.static_features(series_id, scale), self.history)
        return self.distribution(out, scale)

    def sample(self, past: torch.Tensor, features: torch.Tensor, series_id: torch.Tensor) -> torch.Tensor:
        """Ancestral sample paths ``(B, num_samples, prediction_length)`` given ``past (B, max_lag + context)``."""
        cfg, n = self.cfg, self.cfg.num_samples
        scale = self.scale(past)
        static = self.static_features(series_id, scale)
        _, state = self.unroll(past, scale, features[:, : cfg.context_length], static, self.history)
        # Every path continues from the same encoded context.
        sequence = past.repeat_interleave(n, dim=0)  # (B N, S)
        scale, static = scale.repeat_interleave(n, dim=0), static.repeat_interleave(n, dim=0)
        future = features[:, cfg.context_length :].repeat_interleave(n, dim=0)  # (B N, P, F)
        state = tuple(s.repeat_interleave(n, dim=1) for s in state)
        for t in range(cfg.prediction_length):
            out, state = self.unroll(sequence, scale, future[:, t : t + 1], static, sequence.shape[1], state)
            value = self.distribution(out, scale).sample()  # (B N, 1)
            sequence = torch.cat([sequence, value], dim=1)
        return sequence[:, -cfg.prediction_length :].reshape(-1, n, cfg.prediction_length)


class DeepARWorkload(Workload):
    """Train: NLL of the teacher-forced window; eval: ancestral sample paths of the horizon."""

    def forward(self) -> NegativeBinomial | torch.Tensor:
        series, features, series_id = self.inputs
        if self.ctx.train:
            return self.module(series, features, series_id)
        past = series[:, : -self.module.cfg.prediction_length]
        return self.module.sample(past, features, series_id)

    def compute_loss(self, outputs: NegativeBinomial) -> torch.Tensor:
        return -outputs.log_prob(self.targets).mean()


def _create_deepar(ctx: BuildContext, **kwargs) -> Workload:
    smoke = (
        dict(context_length=24, prediction_length=4, num_series=8, hidden=8, num_samples=4, lags=(1, 2, 3, 23, 24, 25))
        if ctx.smoke
        else {}
    )
    cfg = replace(DeepARConfig(), **{**smoke, **kwargs})
    history, window = max(cfg.lags), cfg.context_length + cfg.prediction_length
    start = start_hours(ctx, ctx.batch_size)
    level = 2 + 3 * ctx.rand(ctx.batch_size, 1)  # log10 of a series' typical count: 100 to 100,000
    series = (10**level * F.softplus(seasonal_series(ctx, start, history + window, 1).squeeze(-1))).round()
    hours = start + history  # the first position of the window
    calendar = calendar_features(hours, window)
    age = torch.log10(2.0 + hours[:, None] + torch.arange(window, device=hours.device)).unsqueeze(-1)
    features = torch.cat([calendar, age.float()], dim=-1)  # (B, T, 5)
    series_id = ctx.randint(0, cfg.num_series, (ctx.batch_size,))
    model = DeepAR(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if ctx.train else None
    targets = series[:, history:].contiguous()  # (B, T): the value each position's distribution scores
    return DeepARWorkload(ctx, model, (series, features, series_id), targets, optimizer=opt)


@register_model(
    domain="other",
    task="forecasting",
    batch_size=(32, 32),
    tags=("timeseries", "rnn", "sampling"),
    source="Salinas et al., DeepAR, IJF 2020; GluonTS torch DeepAR and pytorch-forecasting "
    "NegativeBinomialDistributionLoss (Electricity-like hourly counts)",
    unsupported_precisions=("fp16", "bf16", "amp"),
    notes="Eval returns 100 ancestral sample paths per series over a 24 h horizon (one LSTM step "
    "and one negative-binomial sample per step). Synthetic hourly count series. fp16 "
    "unsupported: counts up to 1e5 overflow it (NaN negative-binomial parameters); bf16: no "
    "bf16 gamma sampler on CPU (NegativeBinomial.sample draws a gamma); amp: on CPU oneDNN "
    "cannot build the LSTM primitive under bf16 autocast with fp32 inputs (torch 2.13).",
)
def deepar_electricity(ctx: BuildContext, **kwargs) -> Workload:
    """DeepAR (2x40 LSTM, negative binomial), context 168 h, horizon 24 h, 100 sample paths."""
    return _create_deepar(ctx, **kwargs)
