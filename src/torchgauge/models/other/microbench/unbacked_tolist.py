"""TorchBench's ``microbench_unbacked_tolist_sum``: data-dependent Python ints from a tensor.

A compiler microbenchmark, not a model: ``ti.tolist()`` turns 1,000 int32 indices into Python
ints (unbacked symbolic sizes under ``torch.compile``), each is checked as a size and against
``tv``'s length, and ``tv[i].item()`` sums 1,000 scalar reads: 2,000 host-device round trips per
step in eager mode, a graph break storm for a tracer. Same module, inputs and output as
TorchBench's (a learnable scale times the batch ``f`` times the sum). Eval only, batch 1, as
TorchBench (its training raises NotImplementedError).
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from torchgauge.registry import register_model
from torchgauge.workload import BuildContext, Workload

__all__ = ["UnbackedTolistSum"]

# TorchBench's module calls torch._check_is_size, which newer torch deprecates with a warning at
# every call site; the check is the one timed, the warning is noise in the worker log.
warnings.filterwarnings("ignore", message="_check_is_size will be removed", category=FutureWarning)

NUM_INDICES = 1000  # TorchBench: torch.arange(1000) indices into torch.ones(1000)


class UnbackedTolistSum(nn.Module):
    """``(f (B,), ti (N,) int32, tv (N,) int32)`` -> ``f * weight * sum(tv[ti])`` of shape ``(B,)``."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1))

    def forward(self, f: torch.Tensor, ti: torch.Tensor, tv: torch.Tensor) -> torch.Tensor:
        indices = ti.tolist()
        for i in indices:
            torch._check_is_size(i)
        total = 0
        for i in indices:
            torch._check(i < tv.size(0))
            total += tv[i].item()
        return f * self.weight * total  # a tensor output


@register_model(
    domain="other", task="microbenchmark",
    source="TorchBench microbench_unbacked_tolist_sum (pytorch/benchmark)",
    batch_size=1, modes=("eval",), tags=("microbench",),
    notes="compiler microbenchmark: 1,000 .tolist() ints and .item() reads per step; TorchBench has no training",
)  # fmt: skip
def microbench_unbacked_tolist_sum(ctx: BuildContext) -> Workload:
    """Sum of 1,000 ``tv[i].item()`` reads at indices from ``ti.tolist()``."""
    n = ctx.pick(NUM_INDICES, 16)
    f = ctx.randn(ctx.batch_size)
    ti = torch.arange(n, dtype=torch.int32, device=ctx.device)
    tv = torch.ones(n, dtype=torch.int32, device=ctx.device)
    return Workload(ctx, UnbackedTolistSum(), (f, ti, tv))
