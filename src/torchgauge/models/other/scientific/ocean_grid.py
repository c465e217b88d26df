"""Shared pieces of the pyhpc ocean-model kernels: grid shape, synthetic grid fields, metadata.

pyhpc-benchmarks (Dion Häfner, https://github.com/dionhaefner/pyhpc-benchmarks, Unlicense)
times three kernels taken from the Veros ocean model (MIT). A problem of ``n`` grid points
is laid out on a ``(ceil(2 n^(1/3)), ceil(2 n^(1/3)), ceil(n^(1/3) / 4))`` grid: wide in the
horizontal, shallow in the vertical, like an ocean. TorchBench runs ``n = 2**20`` in eval
only, in float64, and calls ``n`` the batch size; we do the same.
"""

from __future__ import annotations

import math
import random

import torch
from torch.nn import functional as F

from torchgauge.workload import BuildContext

__all__ = [
    "PYHPC_INPUT_SEED",
    "PYHPC_SPEC",
    "NumpyLegacyStream",
    "SMOKE_POINTS",
    "face_gradient",
    "grid_mask",
    "grid_shape",
    "grid_spacing",
    "problem_points",
]

# TorchBench draws the pyhpc inputs after ``np.random.seed(17)``.
PYHPC_INPUT_SEED = 17

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


class NumpyLegacyStream:
    """The draws of ``numpy.random.RandomState(seed)``, bit for bit, without numpy.

    numpy's legacy generator is MT19937 seeded by ``init_genrand(seed)``; its
    ``random_sample`` is the same 53-bit double as Python's ``random.random`` (also MT19937),
    so Python's generator, given numpy's initial state, reproduces numpy's stream, and
    ``uniform(low, high)`` is ``low + (high - low) * random_sample()`` as numpy computes it.
    This lets a workload feed TorchBench's exact ``np.random.seed(17)`` inputs.

    Example:
        >>> NumpyLegacyStream(17).uniform(0.0, 1.0, (2,)).tolist()  # numpy: [0.29466500..., 0.53058675...]
        [0.2946650026871097, 0.5305867556052941]
    """

    def __init__(self, seed: int) -> None:
        state = [seed & 0xFFFFFFFF]
        for i in range(1, 624):  # MT19937 init_genrand, as numpy's legacy integer seeding
            state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & 0xFFFFFFFF)
        self._random = random.Random()
        self._random.setstate((3, (*state, 624), None))

    def uniform(self, low: float, high: float, shape: tuple[int, ...]) -> torch.Tensor:
        """``numpy.random.uniform(low, high, shape)`` of the stream, as a CPU float64 tensor."""
        draws = torch.tensor([self._random.random() for _ in range(math.prod(shape))], dtype=torch.float64)
        return (low + (high - low) * draws).reshape(shape)


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
