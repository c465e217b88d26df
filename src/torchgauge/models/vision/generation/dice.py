"""Soft Dice score shared by the 2D (Pytorch-UNet) and 3D (MLPerf KiTS19) U-Net losses.

Both references compute ``(2 * sum(p * t) + eps) / (sum(p) + sum(t) + eps)``; they differ
only in the axes they sum over, which the caller passes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["soft_dice"]


def soft_dice(probs: torch.Tensor, target: torch.Tensor, dims: Sequence[int], eps: float = 1e-6) -> torch.Tensor:
    """Dice overlap of probabilities and a one-hot target, summed over ``dims``.

    Args:
        probs: predicted class probabilities, e.g. ``(B, C, H, W)`` after softmax.
        target: one-hot target of the same shape.
        dims: axes reduced; the others remain (``(2, 3)`` gives one score per image and class).
        eps: smoothing added to numerator and denominator, so empty classes score 1.

    Returns:
        The score in [0, 1] with ``dims`` removed; 1 means a perfect prediction.

    Example:
        >>> t = torch.tensor([[1.0, 0.0]])
        >>> float(soft_dice(t, t, dims=(0, 1)))
        1.0
    """
    dims = tuple(dims)
    intersection = (probs * target).sum(dims)
    total = probs.sum(dims) + target.sum(dims)
    return (2 * intersection + eps) / (total + eps)
