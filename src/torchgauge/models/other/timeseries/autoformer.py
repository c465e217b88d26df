"""Autoformer: decomposition Transformer with Auto-Correlation, long-horizon forecasting.

Wu, Xu, Wang and Long, "Autoformer: Decomposition Transformers with Auto-Correlation for
Long-Term Series Forecasting", NeurIPS 2021; reference implementation github.com/thuml/Autoformer
(MIT), ``models/Autoformer.py`` and ``layers/{AutoCorrelation,Autoformer_EncDec,Embed}.py``.

As the reference: series decomposition by a moving average (``nn.AvgPool1d`` of kernel 25 over
the series padded by repeating its first and last values), the seasonal part modelled by
encoder/decoder layers whose attention is Auto-Correlation (period-based dependencies found by
``torch.fft.rfft`` of queries times the conjugate of keys, ``irfft`` back to lags, the top
``k = int(factor ln L)`` delays, softmax of their correlations, and aggregation of the values
rolled by each delay: ``torch.roll`` with one delay set per batch in training, ``torch.gather``
with per-sample delays in inference, the reference's two code paths), the trend accumulated by
the decoder from the moving averages of each sub-layer. Embedding without positions:
circular ``Conv1d`` token embedding (Kaiming-normal init) plus a linear map of the 4 hourly
time features. ``my_Layernorm`` (LayerNorm minus its mean over time) closes each stack.

Configuration of the reference's ``scripts/ETT_script/Autoformer_ETTh1.sh`` (multivariate,
``features=M``): 7 channels, input 96, start token 48, horizon 96, d_model 512, 8 heads,
d_ff 2048, 2 encoder and 1 decoder layers, ``factor=3``, moving average 25, dropout 0.05,
GELU; MSE loss, Adam lr 1e-4, batch 32. Inputs are synthetic (``synthetic_series``) instead of
the standardized ETTh1 data. Written from the paper and the description above; no code copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .synthetic_series import calendar_features, seasonal_series, start_hours

__all__ = [
    "AutoCorrelation",
    "Autoformer",
    "AutoformerConfig",
    "MovingAverage",
    "SeriesDecomposition",
    "cross_correlation",
]

# Hourly 'timeF' features (hour of day, day of week, day of month, day of year).
TIME_FEATURES = 4


@dataclass(frozen=True)
class AutoformerConfig:
    enc_in: int = 7  # ETTh1 channels (6 loads + oil temperature), features=M
    seq_len: int = 96  # encoder input length
    label_len: int = 48  # start token: the decoder sees the last 48 inputs
    pred_len: int = 96  # horizon
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    e_layers: int = 2
    d_layers: int = 1
    factor: int = 3  # top k = int(factor * ln L) delays (the ETTh1 script's --factor 3)
    moving_avg: int = 25  # decomposition kernel
    dropout: float = 0.05


class MovingAverage(nn.Module):
    """Trend by ``AvgPool1d``, ends padded by repetition: ``(B, L, C) -> (B, L, C)`` for odd kernels."""

    def __init__(self, kernel_size: int) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.avg = nn.AvgPool1d(kernel_size=kernel_size, stride=1, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = (self.kernel_size - 1) // 2
        front = x[:, :1, :].repeat(1, pad, 1)
        end = x[:, -1:, :].repeat(1, pad, 1)
        x = torch.cat([front, x, end], dim=1)  # (B, L + 2 pad, C)
        return self.avg(x.permute(0, 2, 1)).permute(0, 2, 1)


class SeriesDecomposition(nn.Module):
    """``x -> (seasonal, trend)`` with ``trend = MovingAverage(x)``, ``seasonal = x - trend``."""

    def __init__(self, kernel_size: int) -> None:
        super().__init__()
        self.moving_avg = MovingAverage(kernel_size)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        trend = self.moving_avg(x)
        return x - trend, trend


class SeasonalLayerNorm(nn.Module):
    """The reference's ``my_Layernorm``: LayerNorm over channels, then its mean over time removed."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.layernorm = nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_hat = self.layernorm(x)
        return x_hat - x_hat.mean(dim=1, keepdim=True)


def cross_correlation(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Circular ``corr[..., tau] = sum_t q[..., t + tau] k[..., t]`` of every lag at once (Wiener-Khinchin):
    ``(..., L)``."""
    q_fft = torch.fft.rfft(queries, dim=-1)
    k_fft = torch.fft.rfft(keys, dim=-1)
    return torch.fft.irfft(q_fft * torch.conj(k_fft), n=queries.shape[-1], dim=-1)


class AutoCorrelation(nn.Module):
    """Period-based attention: ``q (B, L, H, E), k, v (B, S, H, E) -> (B, L, H, E)``."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor

    def top_k(self, length: int) -> int:
        return int(self.factor * math.log(length))

    def delay_agg_training(self, values: torch.Tensor, corr: torch.Tensor) -> torch.Tensor:
        """Delays shared by the batch (top-k of the batch mean), values rolled: ``(B, H, E, L)``."""
        k = self.top_k(values.shape[-1])
        mean_corr = corr.mean(dim=(1, 2))  # (B, L): correlation per lag, averaged over heads and channels
        index = torch.topk(mean_corr.mean(dim=0), k, dim=-1)[1]  # (k,)
        weights = torch.softmax(torch.stack([mean_corr[:, index[i]] for i in range(k)], dim=-1), dim=-1)  # (B, k)
        agg = torch.zeros_like(values)
        for i in range(k):
            pattern = torch.roll(values, -int(index[i]), -1)  # the reference's host read of each delay
            agg = agg + pattern * weights[:, i, None, None, None]
        return agg

    def delay_agg_inference(self, values: torch.Tensor, corr: torch.Tensor) -> torch.Tensor:
        """Per-sample delays, values gathered from the series repeated twice: ``(B, H, E, L)``."""
        b, h, e, length = values.shape
        k = self.top_k(length)
        init_index = torch.arange(length, device=values.device).expand(b, h, e, length)
        weights, delay = torch.topk(corr.mean(dim=(1, 2)), k, dim=-1)  # (B, k) each
        weights = torch.softmax(weights, dim=-1)
        doubled = values.repeat(1, 1, 1, 2)  # (B, H, E, 2L): index t + delay < 2L wraps around
        agg = torch.zeros_like(values)
        for i in range(k):
            pattern = torch.gather(doubled, dim=-1, index=init_index + delay[:, i, None, None, None])
            agg = agg + pattern * weights[:, i, None, None, None]
        return agg

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        length, source = queries.shape[1], values.shape[1]
        if length > source:  # cross attention, decoder longer than encoder: zero-pad keys and values
            zeros = torch.zeros_like(queries[:, : length - source])
            values = torch.cat([values, zeros], dim=1)
            keys = torch.cat([keys, zeros], dim=1)
        else:
            values, keys = values[:, :length], keys[:, :length]
        corr = cross_correlation(queries.permute(0, 2, 3, 1).contiguous(), keys.permute(0, 2, 3, 1).contiguous())
        v = values.permute(0, 2, 3, 1).contiguous()
        agg = self.delay_agg_training(v, corr) if self.training else self.delay_agg_inference(v, corr)
        return agg.permute(0, 3, 1, 2)  # (B, L, H, E)


class AutoCorrelationLayer(nn.Module):
    """Multi-head projections around :class:`AutoCorrelation`: ``(B, L, D), (B, S, D) -> (B, L, D)``."""

    def __init__(self, d_model: int, n_heads: int, factor: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.correlation = AutoCorrelation(factor)
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, cross: torch.Tensor) -> torch.Tensor:
        (b, length, _), source, h = x.shape, cross.shape[1], self.n_heads
        q = self.query(x).view(b, length, h, -1)
        k = self.key(cross).view(b, source, h, -1)
        v = self.value(cross).view(b, source, h, -1)
        return self.out(self.correlation(q, k, v).reshape(b, length, -1))


class EncoderLayer(nn.Module):
    """Auto-Correlation and feed-forward, each followed by decomposition that keeps the seasonal part."""

    def __init__(self, cfg: AutoformerConfig) -> None:
        super().__init__()
        self.attention = AutoCorrelationLayer(cfg.d_model, cfg.n_heads, cfg.factor)
        self.conv1 = nn.Conv1d(cfg.d_model, cfg.d_ff, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(cfg.d_ff, cfg.d_model, kernel_size=1, bias=False)
        self.decomp1 = SeriesDecomposition(cfg.moving_avg)
        self.decomp2 = SeriesDecomposition(cfg.moving_avg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, _ = self.decomp1(x + self.dropout(self.attention(x, x)))
        y = self.dropout(F.gelu(self.conv1(x.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        x, _ = self.decomp2(x + y)
        return x


class DecoderLayer(nn.Module):
    """Self and cross Auto-Correlation, feed-forward; the three trends go through a circular conv."""

    def __init__(self, cfg: AutoformerConfig) -> None:
        super().__init__()
        self.self_attention = AutoCorrelationLayer(cfg.d_model, cfg.n_heads, cfg.factor)
        self.cross_attention = AutoCorrelationLayer(cfg.d_model, cfg.n_heads, cfg.factor)
        self.conv1 = nn.Conv1d(cfg.d_model, cfg.d_ff, kernel_size=1, bias=False)
        self.conv2 = nn.Conv1d(cfg.d_ff, cfg.d_model, kernel_size=1, bias=False)
        self.decomp1 = SeriesDecomposition(cfg.moving_avg)
        self.decomp2 = SeriesDecomposition(cfg.moving_avg)
        self.decomp3 = SeriesDecomposition(cfg.moving_avg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.projection = nn.Conv1d(
            cfg.d_model, cfg.enc_in, kernel_size=3, padding=1, padding_mode="circular", bias=False
        )

    def forward(self, x: torch.Tensor, cross: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, trend1 = self.decomp1(x + self.dropout(self.self_attention(x, x)))
        x, trend2 = self.decomp2(x + self.dropout(self.cross_attention(x, cross)))
        y = self.dropout(F.gelu(self.conv1(x.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        x, trend3 = self.decomp3(x + y)
        trend = self.projection((trend1 + trend2 + trend3).permute(0, 2, 1)).transpose(1, 2)  # (B, L, C)
        return x, trend


class DataEmbedding(nn.Module):
    """``DataEmbedding_wo_pos``: circular token conv + linear time features, no position: ``-> (B, L, D)``."""

    def __init__(self, channels: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.token = nn.Conv1d(channels, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False)
        nn.init.kaiming_normal_(self.token.weight, mode="fan_in", nonlinearity="leaky_relu")
        self.temporal = nn.Linear(TIME_FEATURES, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.token(x.permute(0, 2, 1)).transpose(1, 2) + self.temporal(x_mark))


class Autoformer(nn.Module):
    """``(x_enc (B, seq, C), marks_enc (B, seq, 4), marks_dec (B, label + pred, 4)) -> (B, pred, C)``."""

    def __init__(self, cfg: AutoformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.decomp = SeriesDecomposition(cfg.moving_avg)
        self.enc_embedding = DataEmbedding(cfg.enc_in, cfg.d_model, cfg.dropout)
        self.dec_embedding = DataEmbedding(cfg.enc_in, cfg.d_model, cfg.dropout)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.e_layers))
        self.encoder_norm = SeasonalLayerNorm(cfg.d_model)
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.d_layers))
        self.decoder_norm = SeasonalLayerNorm(cfg.d_model)
        self.projection = nn.Linear(cfg.d_model, cfg.enc_in)

    def forward(self, x_enc: torch.Tensor, marks_enc: torch.Tensor, marks_dec: torch.Tensor) -> torch.Tensor:
        label, pred = self.cfg.label_len, self.cfg.pred_len
        # Decoder initialisation: the last `label` steps' seasonal part and trend, then zeros and the input mean.
        mean = x_enc.mean(dim=1, keepdim=True).repeat(1, pred, 1)
        zeros = torch.zeros_like(mean)
        seasonal_init, trend_init = self.decomp(x_enc)
        trend = torch.cat([trend_init[:, -label:], mean], dim=1)  # (B, label + pred, C)
        seasonal_init = torch.cat([seasonal_init[:, -label:], zeros], dim=1)

        enc = self.enc_embedding(x_enc, marks_enc)  # (B, seq, D)
        for layer in self.encoder:
            enc = layer(enc)
        enc = self.encoder_norm(enc)

        x = self.dec_embedding(seasonal_init, marks_dec)  # (B, label + pred, D)
        for layer in self.decoder:
            x, residual_trend = layer(x, enc)
            trend = trend + residual_trend
        seasonal = self.projection(self.decoder_norm(x))
        return (trend + seasonal)[:, -pred:]


def _create_autoformer(ctx: BuildContext, **kwargs) -> Workload:
    smoke = (
        dict(seq_len=32, label_len=16, pred_len=16, d_model=16, n_heads=2, d_ff=32, moving_avg=5) if ctx.smoke else {}
    )
    cfg = replace(AutoformerConfig(), **{**smoke, **kwargs})
    start = start_hours(ctx, ctx.batch_size)
    series = seasonal_series(ctx, start, cfg.seq_len + cfg.pred_len, cfg.enc_in)  # (B, seq + pred, C)
    marks = calendar_features(start, cfg.seq_len + cfg.pred_len)
    x_enc, target = series[:, : cfg.seq_len], series[:, cfg.seq_len :].contiguous()
    marks_enc = marks[:, : cfg.seq_len].contiguous()
    marks_dec = marks[:, cfg.seq_len - cfg.label_len :].contiguous()
    model = Autoformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4) if ctx.train else None
    return Workload(ctx, model, (x_enc.contiguous(), marks_enc, marks_dec), target, loss_fn=F.mse_loss, optimizer=opt)


@register_model(
    domain="other",
    task="forecasting",
    batch_size=(32, 32),
    tags=("timeseries", "fft"),
    unsupported_precisions=("fp16", "bf16"),
    source="Wu et al., Autoformer, NeurIPS 2021; thuml/Autoformer (ETTh1 script, horizon 96)",
    # From the reference's layer shapes: embeddings 2 x (7*512*3 + 4*512) = 25,600; encoder layer
    # 4 x (512^2 + 512) + 2 x 512*2048 = 3,147,776 (x2); decoder layer 2 x 1,050,624 + 2,097,152
    # + 512*7*3 = 4,209,152; two LayerNorms 2,048; output Linear 3,591.
    param_count=10_535_943,
    notes="Synthetic ETTh1-shaped data (7 channels, hourly time features). Train uses the reference's "
    "roll aggregation (a host read per delay), eval its gather aggregation. fp16/bf16 "
    "unsupported: no half-precision rfft on CPU, and cuFFT's needs power-of-two lengths (96, "
    "144 here); amp runs (autocast leaves the FFTs in fp32).",
)
def autoformer_etth1(ctx: BuildContext, **kwargs) -> Workload:
    """Autoformer (d_model 512, 2+1 layers, factor 3), 96 -> 96 steps of 7 channels, MSE loss."""
    return _create_autoformer(ctx, **kwargs)
