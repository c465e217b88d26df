"""Rule (d) ``sync``: the host waits for the device inside the step (``.item()``, ``nonzero``,
printing tensors). CPU analogue: the operators that would force that wait on a device.
"""

from __future__ import annotations

import os

from ....harness.events import TraceEvent, parse_frame
from .context import TraceContext
from .findings import Finding, split_by_call_site
from .thresholds import HOST_READ_OPS, HOST_STATE_PATHS, SYNC_OPS, SYNC_WRAPPERS

__all__ = ["rule_sync"]


def _is_sync(ctx: TraceContext, e: TraceEvent) -> bool:
    if ctx.trace.kind == "cuda":
        return e.category == "sync" and e.device == "cpu"
    if e.category != "cpu_op":
        return False
    if e.name in HOST_READ_OPS:  # .tolist()/.numpy(): only when called from Python, not inside an op
        p = ctx.parent(e)
        return p is None or p.category != "cpu_op"
    return e.name in SYNC_OPS


def rule_sync(ctx: TraceContext) -> list[Finding]:
    groups: dict[tuple[str, tuple], list] = {}
    for e in ctx.in_steps:
        if not _is_sync(ctx, e):
            continue
        frames = ctx.frames(e)
        if any(
            p is not None and p.file.replace(os.sep, "/").startswith(HOST_STATE_PATHS) for p in map(parse_frame, frames)
        ) or ctx.not_the_models(frames):
            continue
        op = ctx.outermost_op(e)
        if ctx.trace.kind == "cpu" and op is not None and op.name not in SYNC_OPS | SYNC_WRAPPERS | HOST_READ_OPS:
            continue  # a CPU kernel reading a scalar of its own: no device would wait for it
        name = op.name if op is not None else e.name
        if name in HOST_READ_OPS:
            name = f"{name} (.tolist()/.numpy())"
        g = groups.setdefault((name, frames), [0, 0.0, ctx.descendant_names(op) if op is not None else (e.name,)])
        g[0] += 1
        g[1] += e.duration_us
    return split_by_call_site(
        ctx,
        "sync",
        groups,
        lambda op, n: (
            f"{n:g} device-to-host synchronisations per step: the host waits for the device and the launch "
            "queue drains; keep the value on the device (torch.where, torch.nonzero_static, masking) or read "
            "it outside the step"
        ),
    )
