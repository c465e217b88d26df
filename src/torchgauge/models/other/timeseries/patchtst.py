"""PatchTST: channel-independent patch Transformer for long-term forecasting.

Nie, Nguyen, Sinthong and Kalagnanam, "A Time Series is Worth 64 Words: Long-term Forecasting
with Transformers", ICLR 2023; reference implementation github.com/yuqinie98/PatchTST (Apache-2.0),
``PatchTST_supervised/layers/{PatchTST_backbone,PatchTST_layers,RevIN}.py``.

As the reference: RevIN (per-instance, per-channel mean and standard deviation removed, a
learnable affine per channel, undone on the output); each channel treated as its own series
(channel independence); the series padded at the end by ``nn.ReplicationPad1d((0, stride))``
and cut into overlapping patches with ``Tensor.unfold``; patches embedded by one linear layer
plus a learned positional embedding (uniform in [-0.02, 0.02]); a vanilla Transformer encoder
with BatchNorm instead of LayerNorm (post-norm), GELU feed-forward, and the reference's
*residual attention* (each layer's pre-softmax scores are added to the next layer's); a flatten
head mapping all patch embeddings of a channel to the horizon with one linear layer.

Configuration PatchTST/42 of the paper (input 336 steps, patch 16, stride 8: 42 patches) with
the supervised scripts' Weather settings (21 channels, 3 layers, d_model 128, 16 heads, d_ff 256,
dropout 0.2, head dropout 0, batch 128, Adam lr 1e-4, MSE), horizon 96. Differences: data are
synthetic (``synthetic_series``). Written from the paper and the description above; no code copied.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

from .synthetic_series import seasonal_series, start_hours

__all__ = ["PatchTST", "PatchTSTConfig", "RevIN", "patchify"]

# RevIN's epsilon (variance floor and the guard on the affine weight when denormalizing).
REVIN_EPS = 1e-5


@dataclass(frozen=True)
class PatchTSTConfig:
    enc_in: int = 21  # Weather channels
    seq_len: int = 336  # look-back window (PatchTST/42)
    pred_len: int = 96  # horizon
    patch_len: int = 16
    stride: int = 8
    d_model: int = 128
    n_heads: int = 16
    d_ff: int = 256
    e_layers: int = 3
    dropout: float = 0.2
    head_dropout: float = 0.0

    @property
    def patch_num(self) -> int:
        return (self.seq_len - self.patch_len) // self.stride + 1 + 1  # + 1: the end-padded patch


class RevIN(nn.Module):
    """Reversible instance normalization over time, per channel: ``(B, L, C)``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.affine_weight = nn.Parameter(torch.ones(channels))
        self.affine_bias = nn.Parameter(torch.zeros(channels))

    def normalize(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        mean = x.mean(dim=1, keepdim=True).detach()
        stdev = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + REVIN_EPS).detach()
        return (x - mean) / stdev * self.affine_weight + self.affine_bias, (mean, stdev)

    def denormalize(self, x: torch.Tensor, stats: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        mean, stdev = stats
        x = (x - self.affine_bias) / (self.affine_weight + REVIN_EPS * REVIN_EPS)
        return x * stdev + mean


def patchify(x: torch.Tensor, patch_len: int, stride: int) -> torch.Tensor:
    """``(B, C, L') -> (B, C, N, P)``: overlapping windows of ``patch_len`` every ``stride`` steps."""
    return x.unfold(dimension=-1, size=patch_len, step=stride)


class ResidualAttention(nn.Module):
    """Multi-head self-attention whose scores carry over layers: ``(B, N, D), prev (B, h, N, N) | None``."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        # A frozen parameter, as the reference (learnable only in its locality self-attention option).
        self.scale = nn.Parameter(torch.tensor((d_model // n_heads) ** -0.5), requires_grad=False)
        self.to_out = nn.Linear(d_model, d_model)  # projection dropout 0 in the reference's configuration

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        q = self.W_Q(x).view(b, n, self.n_heads, -1).transpose(1, 2)  # (B, h, N, dk)
        k = self.W_K(x).view(b, n, self.n_heads, -1).permute(0, 2, 3, 1)  # (B, h, dk, N)
        v = self.W_V(x).view(b, n, self.n_heads, -1).transpose(1, 2)
        scores = torch.matmul(q, k) * self.scale  # (B, h, N, N)
        if prev is not None:
            scores = scores + prev
        out = torch.matmul(F.softmax(scores, dim=-1), v)  # attention dropout 0, as the reference
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1)), scores


class BatchNormOverTokens(nn.Module):
    """``BatchNorm1d`` of ``(B, N, D)`` token embeddings: statistics over batch and patches."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class EncoderLayer(nn.Module):
    """Post-norm layer: ``x = BN(x + drop(attn(x)))``, ``x = BN(x + drop(FFN(x)))``."""

    def __init__(self, cfg: PatchTSTConfig) -> None:
        super().__init__()
        self.self_attn = ResidualAttention(cfg.d_model, cfg.n_heads)
        self.dropout_attn = nn.Dropout(cfg.dropout)
        self.norm_attn = BatchNormOverTokens(cfg.d_model)
        self.ff = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Dropout(cfg.dropout), nn.Linear(cfg.d_ff, cfg.d_model)
        )
        self.dropout_ffn = nn.Dropout(cfg.dropout)
        self.norm_ffn = BatchNormOverTokens(cfg.d_model)

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        attn, scores = self.self_attn(x, prev)
        x = self.norm_attn(x + self.dropout_attn(attn))
        x = self.norm_ffn(x + self.dropout_ffn(self.ff(x)))
        return x, scores


class PatchTST(nn.Module):
    """``(B, seq_len, C) -> (B, pred_len, C)``, every channel through the same encoder."""

    def __init__(self, cfg: PatchTSTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.revin = RevIN(cfg.enc_in)
        self.padding_patch_layer = nn.ReplicationPad1d((0, cfg.stride))  # the extra patch at the end
        self.W_P = nn.Linear(cfg.patch_len, cfg.d_model)
        self.W_pos = nn.Parameter(torch.empty(cfg.patch_num, cfg.d_model).uniform_(-0.02, 0.02))
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.e_layers))
        self.head = nn.Sequential(
            nn.Flatten(start_dim=-2), nn.Linear(cfg.d_model * cfg.patch_num, cfg.pred_len), nn.Dropout(cfg.head_dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        x, stats = self.revin.normalize(x)
        patches = patchify(self.padding_patch_layer(x.permute(0, 2, 1)), cfg.patch_len, cfg.stride)  # (B, C, N, P)
        b, c, n, _ = patches.shape
        u = self.dropout(self.W_P(patches).reshape(b * c, n, cfg.d_model) + self.W_pos)  # (B C, N, D)
        scores = None
        for layer in self.layers:
            u, scores = layer(u, scores)
        z = u.reshape(b, c, n, cfg.d_model).permute(0, 1, 3, 2)  # (B, C, D, N): the reference's flatten order
        y = self.head(z)  # (B, C, pred_len)
        return self.revin.denormalize(y.permute(0, 2, 1), stats)


def _create_patchtst(ctx: BuildContext, **kwargs) -> Workload:
    smoke = dict(enc_in=3, seq_len=48, pred_len=16, d_model=16, n_heads=2, d_ff=32, e_layers=2) if ctx.smoke else {}
    cfg = replace(PatchTSTConfig(), **{**smoke, **kwargs})
    start = start_hours(ctx, ctx.batch_size)
    series = seasonal_series(ctx, start, cfg.seq_len + cfg.pred_len, cfg.enc_in)
    x, target = series[:, : cfg.seq_len].contiguous(), series[:, cfg.seq_len :].contiguous()
    model = PatchTST(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4) if ctx.train else None
    return Workload(ctx, model, (x,), target, loss_fn=F.mse_loss, optimizer=opt)


@register_model(
    domain="other",
    task="forecasting",
    batch_size=(128, 128),
    tags=("timeseries", "transformer"),
    source="Nie et al., PatchTST, ICLR 2023; yuqinie98/PatchTST supervised (PatchTST/42, Weather)",
    # From the reference's layer shapes: W_P 2,176 + W_pos 42*128 = 5,376 + 3 layers x (4 x 16,512
    # attention + 1 frozen scale + 2 x 256 BatchNorm + 65,920 FFN) = 397,443 + head 5,376*96 + 96
    # = 516,192 + RevIN 42.
    param_count=921_229,
    unsupported_precisions=("fp16",),
    notes="Synthetic Weather-shaped data: 21 channels, 336 -> 96 steps; BatchNorm over the "
    "batch x channels x patches tokens. fp16 unsupported: pure-fp16 training turns the "
    "parameters NaN from the second step (Adam in fp16, no loss scaling); fp16 eval, bf16 and "
    "amp run.",
)
def patchtst42_weather(ctx: BuildContext, **kwargs) -> Workload:
    """PatchTST/42 (3 layers, d_model 128, 16 heads), 336 -> 96 steps of 21 channels, MSE loss."""
    return _create_patchtst(ctx, **kwargs)
