"""Multiple-comparison corrections of p-values: Holm (family-wise) and Benjamini-Hochberg (false discovery rate).

Pure functions over lists of p-values, results in input order.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["CORRECTIONS", "DEFAULT_CORRECTION", "adjust_pvalues", "benjamini_hochberg", "holm"]

# Holm controls the family-wise error rate: the nightly compares hundreds of configs and a
# single false alarm already costs someone an investigation.
DEFAULT_CORRECTION = "holm"
CORRECTIONS = ("holm", "bh", "none")


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error rate), in input order.

    Example:
        >>> holm([0.01, 0.04, 0.03])
        [0.03, 0.06, 0.06]
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (false discovery rate), in input order.

    Example:
        >>> [round(p, 3) for p in benjamini_hochberg([0.01, 0.04, 0.03])]
        [0.03, 0.04, 0.04]
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i], reverse=True)
    out = [0.0] * m
    running = 1.0
    for pos, i in enumerate(order):
        rank = m - pos  # 1-based rank in ascending order
        running = min(running, m / rank * pvalues[i])
        out[i] = min(1.0, running)
    return out


def adjust_pvalues(pvalues: Sequence[float], method: str = DEFAULT_CORRECTION) -> list[float]:
    """Adjust for multiple comparisons with ``method`` in :data:`CORRECTIONS`."""
    if method == "holm":
        return holm(pvalues)
    if method == "bh":
        return benjamini_hochberg(pvalues)
    if method == "none":
        return [float(p) for p in pvalues]
    raise ValueError(f"invalid correction {method!r}; accepted: {', '.join(CORRECTIONS)}")
