"""Comparing deterministic metrics: instruction counts, FLOPs and ATen operator counts.

These counts do not depend on machine load, so a plain relative threshold decides (no rank
test): that is what lets a noisy 2-core CI gate on them (issue 9, item 5). A 10x change in
exception-handling code (the TorchBench paper's c10 regression, sec. 4.2) shows up as a jump
in instructions and often as new operators, whatever the wall-clock noise.

Pure functions (no torch); ``compare`` calls them on two run records::

    compare_counts(base["instructions"]["per_step"], new["instructions"]["per_step"])
    op_count_changes(base["op_counts"]["by_op"], new["op_counts"]["by_op"])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .compare import Change, compare_values

__all__ = [
    "COUNT_THRESHOLD",
    "INSTRUCTIONS_SPREAD",
    "INSTRUCTIONS_THRESHOLD",
    "OpCountChange",
    "compare_counts",
    "op_count_changes",
]

# FLOPs and operator counts are exact: any change is a change in the work done, but a
# threshold of 1% keeps shape-rounding differences (e.g. a padded vocabulary) out.
COUNT_THRESHOLD = 0.01
# Instruction counts move a little between fresh processes (allocator state, address-
# dependent paths): 0.15-0.2% measured for resnet18 and a tiny matmul on torch 2.13 (see
# harness/instructions.py); 2% sits an order of magnitude above that wobble.
INSTRUCTIONS_THRESHOLD = 0.02
# That wobble as the quantity's run-to-run spread (its ``Quantity.spread``): two processes'
# counts within twice this of each other agree; FLOPs and operator counts agree only when equal.
INSTRUCTIONS_SPREAD = 0.002


def compare_counts(base: float, new: float, threshold: float = COUNT_THRESHOLD) -> Change:
    """Compare two deterministic totals (instructions per step, FLOPs, operator total).

    Args:
        base: the baseline count.
        new: the candidate count.
        threshold: relative change that counts, in both directions (0.01 = 1%).

    Returns:
        A :class:`torchgauge.stats.compare.Change` with ``verdict`` ``regression`` (new is
        at least ``threshold`` larger), ``improvement`` (at least ``threshold`` smaller) or
        ``unchanged``; ``p_value`` is None (no test).

    Raises:
        ValueError: a negative count, a NaN, or a negative threshold.

    Example:
        >>> compare_counts(1_000_000, 1_030_000).verdict
        'regression'
        >>> compare_counts(1_000_000, 1_005_000).verdict
        'unchanged'
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0 (a fraction, 0.01 = 1%), got {threshold}")
    for label, value in (("base", base), ("new", new)):
        if value is None or value != value or value < 0:
            raise ValueError(f"{label} count must be a number >= 0, got {value!r}")
    return compare_values(base, new, threshold=threshold)


@dataclass(frozen=True)
class OpCountChange:
    """One operator whose per-step count differs between base and new."""

    op: str  # e.g. "aten::mm"
    kind: str  # "added" (absent in base), "removed" (absent in new) or "changed"
    old: int  # count in base (0 when added)
    new: int  # count in new (0 when removed)

    @property
    def delta(self) -> int:
        return self.new - self.old


def op_count_changes(base_by_op: Mapping[str, int], new_by_op: Mapping[str, int]) -> list[OpCountChange]:
    """Operators whose counts differ between two ``op_counts["by_op"]`` (or FLOPs ``by_op``)
    mappings.

    Args:
        base_by_op: operator name -> count per step in the baseline.
        new_by_op: the same for the candidate.

    Returns:
        Changes sorted by the size of the change (largest ``|delta|`` first, then name):
        ``added`` for operators only in new, ``removed`` for those only in base, ``changed``
        for those in both with different counts. Equal counts are left out, so an empty
        list means the operator mix is identical.

    Example:
        >>> [(c.op, c.kind, c.old, c.new) for c in op_count_changes({"aten::mm": 2, "aten::add": 1},
        ...                                                          {"aten::mm": 3, "aten::relu": 1})]
        [('aten::add', 'removed', 1, 0), ('aten::mm', 'changed', 2, 3), ('aten::relu', 'added', 0, 1)]
    """
    out = []
    for op in set(base_by_op) | set(new_by_op):
        old, new = int(base_by_op.get(op, 0)), int(new_by_op.get(op, 0))
        if op not in base_by_op:
            kind = "added"
        elif op not in new_by_op:
            kind = "removed"
        elif old != new:
            kind = "changed"
        else:
            continue
        out.append(OpCountChange(op=op, kind=kind, old=old, new=new))
    return sorted(out, key=lambda c: (-abs(c.delta), c.op))
