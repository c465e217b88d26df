"""Synthetic padded batches: per-sample lengths and the masks derived from them.

Used by the sequence models of ``nlp`` and ``speech``: a real loader pads every sample of a
batch to the longest one, so the benchmark does the same (the first sample has the full length,
the others are shorter and padded). The workload contract has no such helper, hence this module.
"""

from __future__ import annotations

import torch

from torchgauge.workload import BuildContext

__all__ = ["length_mask", "random_lengths"]


def random_lengths(ctx: BuildContext, batch: int, max_len: int, min_len: int) -> torch.Tensor:
    """Lengths ``(batch,)`` in ``[min_len, max_len]``, sorted longest first, the first one ``max_len``.

    Sorted because packed RNN inputs (``pack_padded_sequence``) and bucketing loaders expect it.
    """
    lengths = ctx.randint(min(min_len, max_len), max_len + 1, (batch,))
    lengths[0] = max_len
    return lengths.sort(descending=True).values


def length_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``(B, max_len)`` bool mask, True at the valid (non-padded) positions."""
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]
