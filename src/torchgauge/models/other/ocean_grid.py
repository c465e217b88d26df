"""Shared pieces of the pyhpc ocean-model kernels: grid shape, synthetic grid fields, metadata.

pyhpc-benchmarks (Dion Häfner, https://github.com/dionhaefner/pyhpc-benchmarks, Unlicense)
times three kernels taken from the Veros ocean model (MIT). A problem of ``n`` grid points
is laid out on a ``(ceil(2 n^(1/3)), ceil(2 n^(1/3)), ceil(n^(1/3) / 4))`` grid: wide in the
horizontal, shallow in the vertical, like an ocean. TorchBench runs ``n = 2**20`` in eval
only, in float64, and calls ``n`` the batch size; we do the same.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from torchgauge.workload import BuildContext

__all__ = [
    "PYHPC_SPEC",
    "SMOKE_POINTS",
    "face_gradient",
    "grid_mask",
    "grid_shape",
    "grid_spacing",
    "problem_points",
]

# The smallest problem of the pyhpc sweep (2**12 .. 2**22): a 32 x 32 x 4 grid, wide
# enough for the two-cell halos of the stencils.
SMOKE_POINTS = 2**12

# Registry metadata shared by the three kernels (TorchBench's pyhpc_* entries).
PYHPC_SPEC = dict(
    domain="other",
    task="scientific_computing",
    batch_size=2**20,  # grid points; TorchBench's data point i=20 of the pyhpc sweep
    modes=("eval",),
    tags=("pyhpc", "fp64"),
    unsupported_precisions=("fp16", "bf16"),
    notes=(
        "Parameter-free float64 stencil/elementwise kernel: eval only, as in TorchBench "
        "(nothing to train). Batch size = grid points. Half precision over/underflows the "
        "formulas (e.g. 1e-20 guards), hence fp16/bf16 unsupported."
    ),
)


def grid_shape(points: int) -> tuple[int, int, int]:
    """``(nx, ny, nz)`` of the pyhpc grid holding about ``points`` cells.

    Example:
        >>> grid_shape(2**20)
        (204, 204, 26)
    """
    edge = points ** (1.0 / 3.0)
    return math.ceil(2 * edge), math.ceil(2 * edge), math.ceil(0.25 * edge)


def problem_points(ctx: BuildContext) -> int:
    """Grid points for this build: the batch size, or :data:`SMOKE_POINTS` at smoke size."""
    if ctx.smoke and not ctx.batch_size_given:
        return SMOKE_POINTS
    return ctx.batch_size


def grid_mask(ctx: BuildContext, *shape: int) -> torch.Tensor:
    """Land/sea mask of 0.0/1.0 with 80% sea, as pyhpc draws it."""
    return (ctx.rand(*shape, dtype=torch.float64) < 0.8).to(torch.float64)


def grid_spacing(ctx: BuildContext, *shape: int) -> torch.Tensor:
    """Positive grid metric in [0.5, 1.5).

    pyhpc draws spacings and cosines from a standard normal; values near zero then blow
    up the divisions and the tridiagonal solve. Positive metrics cost the same and keep
    every output finite.
    """
    return ctx.rand(*shape, dtype=torch.float64) + 0.5


def face_gradient(field: torch.Tensor, dim: int, mask: torch.Tensor, spacing: torch.Tensor) -> torch.Tensor:
    """Masked forward difference onto the upper cell faces along ``dim``; zero on the last face.

    ``out[i] = mask[i] * (field[i + 1] - field[i]) / spacing[i]`` with ``spacing`` broadcastable
    to ``field``: the staggered-grid gradient of the Veros kernels.
    """
    pad = [0, 0] * (field.dim() - 1 - dim) + [0, 1]
    return mask * F.pad(torch.diff(field, dim=dim), pad) / spacing
