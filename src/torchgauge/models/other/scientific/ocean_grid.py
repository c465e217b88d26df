"""Shared pieces of the pyhpc ocean-model kernels: grid shape, TorchBench's input stream, metadata.

pyhpc-benchmarks (Dion Häfner, https://github.com/dionhaefner/pyhpc-benchmarks, Unlicense)
times three kernels taken from the Veros ocean model (MIT). A problem of ``n`` grid points
is laid out on a ``(ceil(2 n^(1/3)), ceil(2 n^(1/3)), ceil(n^(1/3) / 4))`` grid: wide in the
horizontal, shallow in the vertical, like an ocean. TorchBench runs ``n = 2**20`` in eval
only, in float64, and calls ``n`` the batch size; we do the same.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Callable
from typing import Any

import torch

from torchgauge.workload import BuildContext

__all__ = [
    "PYHPC_INPUT_SEED",
    "PYHPC_SPEC",
    "NumpyLegacyStream",
    "SMOKE_POINTS",
    "grid_shape",
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

    numpy's legacy generator is MT19937 seeded by ``init_genrand(seed)``; Python's
    ``random.Random`` is the same MT19937, so given numpy's initial state it yields numpy's
    32-bit words in numpy's order (``getrandbits(32 * n)`` packs ``n`` of them, little end
    first). Each draw below is then numpy's own arithmetic on those words, vectorised:

    - ``rand`` / ``uniform``: ``random_sample``, the 53-bit double ``((a >> 5) * 2**26 + (b >> 6)) / 2**53``
      of two words, then ``low + (high - low) * x``;
    - ``randn``: ``legacy_gauss``, Marsaglia's polar method on pairs of such doubles, which
      rejects pairs outside the unit disc, yields ``f * x2`` and keeps ``f * x1`` for the next
      normal (the cache outlives the call, as numpy's ``has_gauss`` does);
    - ``randint``: int64 values of ``[low, high)`` by masked rejection of single words.

    The rejection samplers draw, round after round, one try per value still wanted, so they
    consume exactly numpy's words. The polar factor goes through
    ``math.log`` and ``math.sqrt`` (the C library's, as numpy's) so the normals are numpy's to the last bit.
    This lets a workload feed TorchBench's exact ``np.random.seed(17)`` inputs. Drawing a
    2**20-point grid takes seconds; with ``meta=True`` nothing is drawn and every draw is a
    meta tensor of numpy's shape and dtype (what a build on the meta device needs).

    Example:
        >>> NumpyLegacyStream(17).uniform(0.0, 1.0, (2,)).tolist()  # numpy: [0.29466500..., 0.53058675...]
        [0.2946650026871097, 0.5305867556052941]
    """

    def __init__(self, seed: int, *, meta: bool = False, use_numpy: bool | None = None) -> None:
        self.meta = meta  # draw nothing: meta tensors of numpy's shapes and dtypes, for shape inspection
        # numpy itself where it is installed: the same values, drawn in C (a 2**20-point grid's 21-23
        # arrays take about 1 s instead of 10-40 s here); None = numpy when importable
        self._numpy = _numpy_state(seed) if use_numpy is not False and not meta else None
        if use_numpy and self._numpy is None:
            raise ModuleNotFoundError("use_numpy=True needs numpy; accepted: use_numpy=False or None")
        state = [seed & 0xFFFFFFFF]
        for i in range(1, 624):  # MT19937 init_genrand, as numpy's legacy integer seeding
            state.append((1812433253 * (state[-1] ^ (state[-1] >> 30)) + i) & 0xFFFFFFFF)
        self._random = random.Random()
        self._random.setstate((3, (*state, 624), None))
        self._gauss: float | None = None  # numpy's cached second normal of a polar pair

    def _words(self, count: int) -> torch.Tensor:
        """The next ``count`` 32-bit outputs of the generator, as int64."""
        if count == 0:
            return torch.zeros(0, dtype=torch.int64, device="cpu")
        raw = self._random.getrandbits(32 * count).to_bytes(4 * count, "little")
        return torch.frombuffer(bytearray(raw), dtype=torch.int32).to(torch.int64) & 0xFFFFFFFF

    def _doubles(self, count: int) -> torch.Tensor:
        """The next ``count`` ``random_sample`` doubles in [0, 1)."""
        return _words_to_doubles(self._words(2 * count).reshape(count, 2))

    @staticmethod
    def _kept(wanted: int, tries: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """The first ``wanted`` values a rejection sampler keeps, in order.

        ``tries(n)`` makes ``n`` tries and returns the values it keeps. Each round makes as many
        tries as values are still wanted, which numpy makes at the least, so no word is drawn
        that numpy would not draw.
        """
        chunks = [tries(wanted)]
        wanted -= len(chunks[-1])
        while wanted > 0:
            chunks.append(tries(wanted))
            wanted -= len(chunks[-1])
        return torch.cat(chunks)

    def rand(self, *shape: int) -> torch.Tensor:
        """``numpy.random.rand(*shape)``: float64 in [0, 1)."""
        if self.meta:
            return torch.empty(shape, dtype=torch.float64, device="meta")
        if self._numpy is not None:
            return torch.from_numpy(self._numpy.random_sample(shape))
        return self._doubles(math.prod(shape)).reshape(shape)

    def uniform(self, low: float, high: float, shape: tuple[int, ...]) -> torch.Tensor:
        """``numpy.random.uniform(low, high, shape)`` of the stream, as a CPU float64 tensor."""
        return low + (high - low) * self.rand(*shape)

    def randn(self, *shape: int) -> torch.Tensor:
        """``numpy.random.randn(*shape)``: float64 standard normals (legacy polar method)."""
        count = math.prod(shape)
        if self.meta:
            return torch.empty(shape, dtype=torch.float64, device="meta")
        if self._numpy is not None:
            return torch.from_numpy(self._numpy.standard_normal(shape))
        if count == 0:
            return torch.zeros(shape, dtype=torch.float64, device="cpu")
        cached = [] if self._gauss is None else [self._gauss]
        self._gauss = None

        def in_unit_disc(tries: int) -> torch.Tensor:  # (x1, x2, r2) of the pairs inside the unit disc
            x = 2.0 * self._doubles(2 * tries).reshape(tries, 2) - 1.0
            r2 = x[:, 0] * x[:, 0] + x[:, 1] * x[:, 1]
            return torch.cat([x, r2[:, None]], dim=1)[(r2 < 1.0) & (r2 != 0.0)]

        points = self._kept(math.ceil((count - len(cached)) / 2), in_unit_disc)
        x1, x2, r2 = points[:, 0], points[:, 1], points[:, 2].tolist()
        # math's log and sqrt are the C library's, as numpy's (torch.sqrt may differ in the last bit)
        factors = array("d", [math.sqrt(-2.0 * math.log(v) / v) for v in r2])
        f = (
            torch.frombuffer(factors, dtype=torch.float64)
            if factors
            else torch.zeros(0, dtype=torch.float64, device="cpu")
        )
        normals = torch.cat(
            [torch.tensor(cached, dtype=torch.float64, device="cpu"), torch.stack([f * x2, f * x1], -1).flatten()]
        )
        if len(normals) > count:  # the odd one out: numpy keeps it for the next normal
            self._gauss = normals[-1].item()
        return normals[:count].reshape(shape)

    def randint(self, low: int, high: int, shape: tuple[int, ...]) -> torch.Tensor:
        """``numpy.random.randint(low, high, shape)``: int64 in ``[low, high)`` by masked rejection."""
        span = high - 1 - low
        if not 0 <= span <= 0xFFFFFFFF:
            raise ValueError(f"randint needs 1 <= high - low <= 2**32, got low={low}, high={high}")
        count = math.prod(shape)
        if self.meta:
            return torch.empty(shape, dtype=torch.int64, device="meta")
        if self._numpy is not None:
            return torch.from_numpy(self._numpy.randint(low, high, shape, dtype="int64"))
        if span == 0:  # numpy draws nothing for a single value
            return torch.full(shape, low, dtype=torch.int64, device="cpu")
        mask = (1 << span.bit_length()) - 1

        def below_span(tries: int) -> torch.Tensor:
            values = self._words(tries) & mask
            return values[values <= span]

        return (low + self._kept(count, below_span)).reshape(shape)


def _numpy_state(seed: int) -> Any:
    """``numpy.random.RandomState(seed)``, or None where numpy is not installed."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy.random.RandomState(seed)


def _words_to_doubles(words: torch.Tensor) -> torch.Tensor:
    """numpy's ``random_sample`` of word pairs ``(..., 2)``: ``((a >> 5) * 2**26 + (b >> 6)) / 2**53``."""
    return ((words[..., 0] >> 5) * 67108864 + (words[..., 1] >> 6)).to(torch.float64) / 9007199254740992.0


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
