"""Rule (a) ``launch_storm``: the same short operator pattern repeated back to back, every call
tiny (the per-parameter ``zero_grad`` loop); suggests the foreach/fused form.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from ....harness.events import TraceEvent, is_framework_file, parse_frame
from .context import TraceContext
from .findings import Finding
from .thresholds import FOREACH_OPS, STORM_MAX_GAP_US, STORM_MAX_PERIOD, STORM_MIN_REPEATS, TINY_OP_US

__all__ = ["rule_launch_storm"]


def _sequences(ops: list[TraceEvent]) -> list[list[TraceEvent]]:
    """Top-level ops per (thread, step), in order."""
    seqs: dict[tuple[int, int | None], list[TraceEvent]] = defaultdict(list)
    for e in ops:
        seqs[(e.thread, e.step)].append(e)
    return list(seqs.values())


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2 if v else 0.0


def _is_storm(calls: list[TraceEvent]) -> bool:
    # Medians, so that one call slowed by the scheduler neither hides nor splits a storm.
    gaps = [b.start_us - a.end_us for a, b in zip(calls, calls[1:])]
    return _median([c.duration_us for c in calls]) < TINY_OP_US and _median(gaps) <= STORM_MAX_GAP_US


def _periodic_stretches(names: list[str]) -> list[tuple[int, int, int]]:
    """(start, period, repeats) of non-overlapping stretches repeating a pattern >= STORM_MIN_REPEATS times."""
    out = []
    i, n = 0, len(names)
    while i < n:
        best = None
        for p in range(1, STORM_MAX_PERIOD + 1):
            j = i
            while j + p < n and names[j] == names[j + p]:
                j += 1
            reps = (j - i + p) // p
            if reps >= STORM_MIN_REPEATS and (best is None or reps * p > best[1] * best[2]):
                best = (i, p, reps)
        if best is None:
            i += 1
        else:
            # The shortest period describing the stretch wins (zero_ x 32, not (zero_ zero_) x 16).
            out.append(best)
            i = best[0] + best[1] * best[2]
    return out


def _loops_in_user_code(ctx: TraceContext, frames: tuple[str, ...]) -> bool:
    """A storm is a loop issuing operators one tensor at a time: the operators must be called
    straight from the model's code or an optimizer, not from a library module's forward (a deep
    nn.Sequential repeats Linear+ReLU by structure, not by a per-tensor loop)."""
    if not frames:
        return True  # no stacks recorded (a trace from elsewhere): judge by timing alone
    # The innermost Python-level frame (built-ins such as "<built-in method zero_>" have no file).
    inner = next((p for p in map(parse_frame, frames) if p is not None), None)
    if inner is None:
        return True
    f = inner.file.replace(os.sep, "/")
    return not is_framework_file(f) or "torch/optim/" in f


def _storm_hint(pattern: tuple[str, ...]) -> str:
    base = pattern[0].split("::")[-1]
    if pattern == ("aten::zero_",):
        return "zero all gradients at once (torch._foreach_zero_, or zero_grad(set_to_none=True))"
    if len(pattern) == 1 and f"_foreach_{base}" in FOREACH_OPS:
        return f"apply it to all tensors at once (torch._foreach_{base}; optimizers: foreach=True or fused=True)"
    return (
        "batch the loop into one operator over stacked tensors, use the optimizer's foreach=True or "
        "fused=True, or torch.compile"
    )


def rule_launch_storm(ctx: TraceContext) -> list[Finding]:
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    candidates = [e for e in ctx.top_ops if not ctx.in_grad_accumulation(e)]
    if ctx.trace.kind == "cuda":  # on a device, only operators that launch work can storm
        candidates = [e for e in candidates if ctx.launches_device_work(e)]
    for run in _sequences(candidates):
        names = [e.name for e in run]
        for start, period, reps in _periodic_stretches(names):
            pattern = tuple(names[start : start + period])
            calls = run[start : start + period * reps]
            frames = ctx.frames(calls[0])
            if (
                not _is_storm(calls)
                or not _loops_in_user_code(ctx, frames)
                or ctx.not_the_models(frames)
                or any(ctx.raised_here(op, frames) for op in pattern)
            ):
                continue
            g = groups.setdefault(pattern, {"reps": 0, "time": 0.0, "frames": Counter()})
            g["reps"] += reps
            # The launch-bound part: the stretch's span less the calls that do real work.
            g["time"] += (
                calls[-1].end_us - calls[0].start_us - sum(c.duration_us for c in calls if c.duration_us >= TINY_OP_US)
            )
            g["frames"][frames] += 1
    out = []
    for pattern, g in groups.items():
        op = " + ".join(pattern)
        frames = g["frames"].most_common(1)[0][0]
        per_step = g["reps"] / ctx.k
        out.append(
            Finding(
                rule="launch_storm",
                operator=op,
                count=per_step,
                time_ms=g["time"] / ctx.k / 1e3,
                source=ctx.source(frames, pattern),
                message=f"{per_step:g} back-to-back repetitions of {op} per step, median call under "
                f"{TINY_OP_US:g} us: launch/dispatch-bound; {_storm_hint(pattern)}",
            )
        )
    return out
