"""What a rule reports (:class:`Finding`), and the grouping shared by the per-call-site rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .context import TraceContext

__all__ = ["Finding", "split_by_call_site"]


@dataclass(frozen=True)
class Finding:
    """One performance problem found in the profiled steps."""

    rule: str  # one of RULES
    operator: str  # operator, operator pattern or host call responsible
    count: float  # occurrences per step
    time_ms: float  # per step: storm span less its non-tiny calls, copy/sync op time, or gap length
    source: str | None  # "file:line in func" of the model code, when stacks were recorded
    message: str  # what happens and what to do instead

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_by_call_site(
    ctx: TraceContext, rule: str, groups: Mapping[tuple[str, tuple], list], message: Callable[[str, float], str]
) -> list[Finding]:
    """One finding per call site of each ``(operator, frames) -> [calls, time_us, names]`` group;
    calls and measured time split by the calls recorded on each line.

    Operators reached through the same library call from the same model function (the
    several reads ``print(t)`` makes) are one call site: their groups are merged first.
    """
    merged: dict[Any, list] = {}
    for (op, frames), (n, t, names) in groups.items():
        entry = ctx.library_entry(frames)
        key = entry if entry is not None else (op, frames)
        g = merged.setdefault(key, [[], frames, 0, 0.0, []])
        if op not in g[0]:
            g[0].append(op)
        g[2] += n
        g[3] += t
        g[4] += [x for x in names if x not in g[4]]
    # Groups with different stacks can end on the same line (a helper called from two places):
    # one finding per (operator, line), counts and times summed.
    sites: dict[tuple[str, str | None], list[float]] = {}
    for ops, frames, n, t, names in merged.values():
        op = " + ".join(ops)
        for src, share in ctx.call_sites(frames, names):
            acc = sites.setdefault((op, src), [0.0, 0.0])
            acc[0] += n * share / ctx.k
            acc[1] += t * share / ctx.k / 1e3
    return [
        Finding(rule=rule, operator=op, count=count, time_ms=time_ms, source=src, message=message(op, count))
        for (op, src), (count, time_ms) in sites.items()
    ]
