"""One value of a quantity for a group of runs of one configuration (a side's rounds, reruns).

Rounds collect a deterministic metric in the first round only (:func:`torchgauge.config.later_round`),
so in a group of records some carry it and the rest do not: its value is that of the record(s)
that do. Records that carry it are expected to agree; when they do not (a count that is not
deterministic for this configuration, or records that are not one build's), nothing is picked:
callers get the values and say so. Noisy quantities take the median of the records' values (of
process medians, for time). ``compare``, ``history`` and the dashboard read groups through here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..harness.metrics import Quantity
from ..stats.compare import median

__all__ = ["AGREEMENT_SPREAD_MULTIPLE", "GroupValue", "Measured", "agree", "group_value", "listed", "record_values"]

# Records agree on a deterministic quantity when their values spread (max - min) by at most this
# many times its measured run-to-run spread (Quantity.spread) of their median: exact counts
# (spread 0) must be equal; instructions may wobble by 2 x 0.2%.
AGREEMENT_SPREAD_MULTIPLE = 2.0


class Measured(Protocol):
    """A run record or a stored series point: anything with a record's ``metrics``."""

    metrics: Mapping[str, Any]


@dataclass(frozen=True)
class GroupValue:
    """A group's value of one quantity; ``value`` is None when no record has it or they disagree."""

    value: float | None
    values: tuple[float, ...]  # every record's value, in record order (records without it left out)
    disagree: bool = False  # deterministic records whose values differ beyond the quantity's spread


def record_values(records: Sequence[Measured], q: Quantity) -> list[float]:
    """The finite values of ``q`` in ``records``, in order; records that do not carry it are left out."""
    return [v for v in (q.value(rec.metrics) for rec in records) if v is not None]


def agree(values: Sequence[float], spread: float) -> bool:
    """Whether per-process values of a deterministic quantity are one value (within
    :data:`AGREEMENT_SPREAD_MULTIPLE` x ``spread`` of their median).

    Example:
        >>> agree([1200.0, 1200.0], 0.0), agree([1200.0, 1201.0], 0.0), agree([1000.0, 1003.0], 0.002)
        (True, False, True)
    """
    return not values or max(values) - min(values) <= AGREEMENT_SPREAD_MULTIPLE * spread * abs(median(values))


def group_value(records: Sequence[Measured], q: Quantity) -> GroupValue:
    """``q``'s value for one configuration's records: deterministic, the records' common value
    (None and ``disagree`` when they differ); otherwise the median of their values."""
    values = record_values(records, q)
    if not values:
        return GroupValue(None, ())
    if q.deterministic and not agree(values, q.spread):
        return GroupValue(None, tuple(values), disagree=True)
    return GroupValue(median(values), tuple(values))


def listed(values: Sequence[float]) -> str:
    """Distinct values, ascending, for a message: ``1,200, 1,210``."""
    return ", ".join(f"{v:,.6g}" for v in sorted(set(values)))
