"""Tiny planted workloads for the counting metrics (loaded with ``load_model_file``).

Not collected by pytest (no ``test_`` prefix); also loaded by the valgrind child of the
instructions metric, which is why the models live in a file rather than in a test.
"""

import torch
from torch import nn

from torchgauge import Workload, register_model

_META = dict(domain="other", task="test_fixture", source="torchgauge tests", batch_size=4)
# Floats leaked per step by counting_leaky: 256 KiB, five times the CPU tolerance.
LEAK_FLOATS = 64 * 1024


class _Matmul(nn.Module):
    """``x @ w`` with ``x`` (B, 64) and ``w`` (64, 64): one aten::mm per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def _matmul(ctx) -> Workload:
    return Workload(
        ctx, _Matmul(), (ctx.randn(ctx.batch_size, 64),), ctx.randn(ctx.batch_size, 64), loss_fn=nn.functional.mse_loss
    )


class _LeakyWorkload(Workload):
    """A clean matmul step that also keeps a new 256 KiB tensor alive every step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.hoard: list[torch.Tensor] = []

    def step(self):
        out = super().step()
        self.hoard.append(torch.ones(LEAK_FLOATS, device=self.device))  # ones(): pages are touched
        return out


@register_model(**_META)
def counting_matmul(ctx):
    """One 64x64 matmul per forward (MSE loss in training)."""
    return _matmul(ctx)


@register_model(**_META)
def counting_leaky(ctx):
    """counting_matmul that leaks 256 KiB per step."""
    clean = _matmul(ctx)
    return _LeakyWorkload(ctx, clean.module, clean.inputs, clean.targets, loss_fn=clean.loss_fn)
