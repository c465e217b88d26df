"""Seeded synthetic time series shared by the forecasting models (Autoformer, TFT, DeepAR, PatchTST).

Hourly series shaped like the benchmark datasets (ETT, Electricity, Weather): per series and
channel a level, a linear trend, a daily (24 h) and a weekly (168 h) sinusoid of random
amplitude and phase, and Gaussian noise. Each series starts at a random hour of a year, so
calendar features differ between the rows of a batch. The timed steps do not depend on the
values; the seasonal structure only keeps the losses and the learned scales realistic.
"""

from __future__ import annotations

import math

import torch

from torchgauge.workload import BuildContext

__all__ = ["HOURS_PER_YEAR", "SEASONAL_PERIODS", "calendar_features", "seasonal_series", "start_hours"]

HOURS_PER_YEAR = 365 * 24
# Periods of the sinusoids, in hours: daily and weekly seasonality of electricity/weather data.
SEASONAL_PERIODS = (24.0, 168.0)


def start_hours(ctx: BuildContext, batch: int) -> torch.Tensor:
    """``(B,)`` absolute hour at which each series' window starts (random within a year)."""
    return ctx.randint(0, HOURS_PER_YEAR, (batch,))


def seasonal_series(
    ctx: BuildContext,
    start: torch.Tensor,
    length: int,
    channels: int,
    *,
    noise: float = 0.1,
) -> torch.Tensor:
    """``(B, L, C)`` level + trend + daily and weekly sinusoids + noise, from hours ``start`` ``(B,)``."""
    batch = start.shape[0]
    hours = (start[:, None] + torch.arange(length, device=start.device)).float()  # (B, L)
    periods = torch.tensor(SEASONAL_PERIODS, device=start.device)  # (P,)
    amplitude = ctx.rand(batch, 1, channels, len(SEASONAL_PERIODS)) + 0.25  # (B, 1, C, P)
    phase = 2 * math.pi * ctx.rand(batch, 1, channels, len(SEASONAL_PERIODS))
    seasonal = amplitude * torch.sin(2 * math.pi * hours[..., None, None] / periods + phase)  # (B, L, C, P)
    level = ctx.randn(batch, 1, channels)
    slope = 1e-3 * ctx.randn(batch, 1, channels)  # per hour: ~0.1 over a 96-step window
    trend = level + slope * torch.arange(length, device=start.device).float()[None, :, None]
    return trend + seasonal.sum(-1) + noise * ctx.randn(batch, length, channels)


def calendar_features(start: torch.Tensor, length: int) -> torch.Tensor:
    """``(B, L, 4)`` hourly time features in [-0.5, 0.5]: hour of day, day of week, of month, of year.

    Autoformer's ``timeF`` encoding for ``freq='h'`` (``utils/timefeatures.py``), computed from
    an hour count instead of a pandas DatetimeIndex (months are taken as 30 days).
    """
    hours = start[:, None] + torch.arange(length, device=start.device)  # (B, L)
    days = hours // 24
    return torch.stack(
        [
            (hours % 24) / 23.0 - 0.5,
            (days % 7) / 6.0 - 0.5,
            (days % 30) / 30.0 - 0.5,
            (days % 365) / 364.0 - 0.5,
        ],
        dim=-1,
    ).float()
