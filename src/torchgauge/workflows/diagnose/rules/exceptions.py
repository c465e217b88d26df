"""Rule (f) ``exception``: operators that raise inside the step and are caught in Python (the
paper's c10 exception case): each raise builds a C++ error with its backtrace.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict

from ....harness.events import TraceEvent
from .context import HOST_CATEGORIES, TraceContext
from .findings import Finding
from .thresholds import EXCEPTION_MIN_PER_STEP

__all__ = ["rule_exception"]


def rule_exception(ctx: TraceContext) -> list[Finding]:
    """Operators that raised (recorded by the call-site pass) matched to their trace events.

    The cost of a raise is measured on the trace: from the failing operator's start to the next
    host event on its thread (the error's construction, unwinding and translation to a Python
    exception happen in between), times the share of that function's calls that raised.
    """
    if not ctx.raised:
        return []
    by_thread: dict[int, list[TraceEvent]] = defaultdict(list)
    for e in ctx.in_steps:
        if e.category in HOST_CATEGORIES:
            by_thread[e.thread].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: e.start_us)
    starts = {t: [e.start_us for e in evs] for t, evs in by_thread.items()}
    groups: dict[tuple[str, tuple], list] = {}
    for e in ctx.top_ops:
        frames = ctx.frames(e)
        if not frames or not ctx.raised_here(e.name, frames) or ctx.not_the_models(frames):
            continue
        evs, st = by_thread[e.thread], starts[e.thread]
        i = bisect_right(st, e.end_us)
        step_end = ctx.trace.steps[e.step][1] if e.step is not None else e.end_us
        nxt = evs[i].start_us if i < len(evs) else step_end
        g = groups.setdefault((e.name, frames), [0, 0.0, (e.name,)])
        g[0] += 1
        g[1] += max(nxt, e.end_us) - e.start_us
    out = []
    for (op, frames), (n, t, names) in groups.items():
        chosen = ctx.user_frame(frames)
        raised = ctx.call_lines_in(chosen.file, chosen.line, names, ctx.raised)
        calls = ctx.call_lines_in(chosen.file, chosen.line, names, ctx.call_lines)
        for line, raised_n in sorted(raised.items()):
            share = raised_n / max(sum(calls.values()), raised_n)
            count = n * share / ctx.k
            if count < EXCEPTION_MIN_PER_STEP:
                continue
            out.append(
                Finding(
                    rule="exception",
                    operator=op,
                    count=count,
                    time_ms=t * share / ctx.k / 1e3,
                    source=f"{chosen.file}:{line} in {chosen.func}",
                    message=f"{count:g} calls of {op} per step raise an error that Python catches: each builds a "
                    "C++ exception with its backtrace and unwinds; test the condition first (shapes, "
                    "sizes) instead of trying and catching",
                )
            )
    return out
