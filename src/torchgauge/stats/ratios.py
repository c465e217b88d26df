"""Ratios of paired measurements, their geometric mean, and win counts.

Pure functions over numbers (no torch, no I/O) behind ``compare-backends`` (candidate /
baseline, the paper's Figures 3-4) and ``compare-devices`` (A / B, Figure 5). Ratios of
times or memory are multiplicative, so they are averaged with the geometric mean: a 2x
speed-up and a 2x slow-down cancel out, which an arithmetic mean of ratios would not do.

Example:
    >>> rows = ratio_rows({("m1", "eval"): ({"time": 10.0}, {"time": 5.0}),
    ...                    ("m2", "eval"): ({"time": 10.0}, {"time": 20.0})}, ["time"])
    >>> [r.ratios["time"] for r in rows], geomean(r.ratios["time"] for r in rows)
    ([0.5, 2.0], 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_TIE_BAND",
    "RatioRow",
    "WinCount",
    "count_wins",
    "geomean",
    "geomean_by",
    "ratio",
    "ratio_rows",
]

# Ratios within this relative band of 1.0 count as ties, not wins: per-model medians on a
# shared machine move by a percent or two between processes, and such a "win" means nothing.
DEFAULT_TIE_BAND = 0.02


def _value(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def ratio(base: float | None, new: float | None) -> float | None:
    """``new / base``, or None when either is missing (None/NaN) or ``base`` is not positive.

    Example:
        >>> ratio(4.0, 3.0), ratio(None, 3.0), ratio(0.0, 3.0)
        (0.75, None, None)
    """
    b, n = _value(base), _value(new)
    if b is None or n is None or b <= 0 or n < 0:
        return None
    return n / b


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the present values (None and NaN are skipped); None if none remain.

    Raises:
        ValueError: a value is zero, negative or infinite (a ratio must be positive).

    Example:
        >>> geomean([0.5, 2.0, 4.0])
        1.5874010519681994
    """
    logs = []
    for v in values:
        x = _value(v)
        if x is None:
            continue
        if not (x > 0 and math.isfinite(x)):
            raise ValueError(f"geometric mean needs positive finite values, got {x}")
        logs.append(math.log(x))
    if not logs:
        return None
    return math.exp(math.fsum(logs) / len(logs))


@dataclass(frozen=True)
class RatioRow:
    """One matched pair: the values of each side per metric and their ratios new / base."""

    key: Hashable  # e.g. (model, mode)
    base: Mapping[str, float | None]
    new: Mapping[str, float | None]
    ratios: Mapping[str, float | None] = field(default_factory=dict)


def ratio_rows(
    pairs: Mapping[Hashable, tuple[Mapping[str, float | None], Mapping[str, float | None]]],
    metrics: Sequence[str],
) -> list[RatioRow]:
    """One :class:`RatioRow` per key of ``pairs`` (in order): ``new[m] / base[m]`` per metric.

    Args:
        pairs: key -> (base values, new values), each a mapping metric -> value or None.
        metrics: the metric names to take ratios of; a metric missing on a side gives None.
    """
    return [
        RatioRow(key=key, base=dict(base), new=dict(new), ratios={m: ratio(base.get(m), new.get(m)) for m in metrics})
        for key, (base, new) in pairs.items()
    ]


def geomean_by(
    rows: Iterable[RatioRow],
    metric: str,
    group: Any = None,
) -> dict[Hashable, tuple[float | None, int]]:
    """Geometric mean of ``metric``'s ratios per group: group -> (geomean, ratios counted).

    Args:
        rows: ratio rows.
        metric: which ratio.
        group: callable key -> group label (e.g. the mode); None puts every row in ``"all"``.

    Example:
        >>> rows = ratio_rows({("a", "eval"): ({"t": 1}, {"t": 2}), ("a", "train"): ({"t": 1}, {"t": 8}),
        ...                    ("b", "train"): ({"t": 1}, {"t": 2})}, ["t"])
        >>> geomean_by(rows, "t", group=lambda k: k[1])
        {'eval': (2.0, 1), 'train': (4.0, 2)}
    """
    buckets: dict[Hashable, list[float]] = {}
    for row in rows:
        label = "all" if group is None else group(row.key)
        r = row.ratios.get(metric)
        bucket = buckets.setdefault(label, [])
        if r is not None:
            bucket.append(r)
    return {label: (geomean(vals), len(vals)) for label, vals in buckets.items()}


@dataclass(frozen=True)
class WinCount:
    """How many ratios favour each side (lower is better: time, memory)."""

    base: int  # ratio > 1 + band: the base side is better
    new: int  # ratio < 1 / (1 + band): the new side is better
    ties: int  # within the band
    band: float


def count_wins(ratios: Iterable[float | None], band: float = DEFAULT_TIE_BAND) -> WinCount:
    """Count ratios ``new / base`` of a lower-is-better metric by which side they favour.

    Example:
        >>> count_wins([0.5, 0.99, 1.0, 1.5, None])
        WinCount(base=1, new=1, ties=2, band=0.02)
    """
    if band < 0:
        raise ValueError(f"tie band must be >= 0, got {band}")
    base = new = ties = 0
    for r in ratios:
        if r is None:
            continue
        if r > 1.0 + band:
            base += 1
        elif r < 1.0 / (1.0 + band):
            new += 1
        else:
            ties += 1
    return WinCount(base=base, new=new, ties=ties, band=band)
