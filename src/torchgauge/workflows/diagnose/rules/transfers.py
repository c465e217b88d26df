"""Host-device transfer rules.

- (b) ``tiny_h2d``: tiny host-to-device copies inside the step (``torch.tensor(...)`` built
  each step). On a CPU-only trace there is no device copy, so the host-side tensor
  construction (``aten::lift_fresh``) that would become one is reported instead.
- (c) ``heavy_traffic``: host-device traffic large in bytes and in time relative to compute
  (offload ping-pong). CPU analogue: top-level copy operators versus the other operators.
"""

from __future__ import annotations

from collections import Counter

from ....harness.breakdown import clip, total, union
from ....harness.events import TraceEvent
from .context import TraceContext
from .findings import Finding, split_by_call_site
from .thresholds import HEAVY_TRAFFIC_MIN_BYTES, HEAVY_TRAFFIC_RATIO, TINY_COPY_BYTES

__all__ = ["rule_heavy_traffic", "rule_tiny_h2d"]

# CPU traces: the top-level operators that copy (host-device copies on an accelerator).
_COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to"})


def rule_tiny_h2d(ctx: TraceContext) -> list[Finding]:
    groups: dict[tuple[str, tuple], list] = {}
    if ctx.trace.kind == "cuda":
        for e in ctx.in_steps:
            if e.category != "memcpy" or e.direction != "h2d":
                continue
            launch = ctx.launcher(e)
            op = ctx.outermost_op(launch) if launch is not None else None
            size = e.bytes if e.bytes is not None else (op.bytes if op is not None else None)
            if size is None or size > TINY_COPY_BYTES:
                continue
            frames = ctx.frames(op if op is not None else e)
            if ctx.not_the_models(frames):
                continue
            g = groups.setdefault(
                (op.name if op is not None else e.name, frames),
                [0, 0.0, ctx.descendant_names(op) if op is not None else ()],
            )
            g[0] += 1
            # Host time of the copying operator (launch and, for pageable memory, the wait),
            # or the device time when the launch is unknown.
            g[1] += op.duration_us if op is not None else e.duration_us
        what = "host-to-device copies of at most {b} bytes"
    else:
        for e in ctx.in_steps:
            if e.category == "cpu_op" and e.name == "aten::lift_fresh":
                frames = ctx.frames(e)
                if ctx.not_the_models(frames):
                    continue
                g = groups.setdefault((e.name, frames), [0, 0.0, (e.name,)])
                g[0] += 1
                g[1] += e.duration_us
        what = "tensors built from host data (torch.tensor); on an accelerator each is a tiny host-to-device copy"
    return split_by_call_site(
        ctx,
        "tiny_h2d",
        groups,
        lambda op, n: (
            f"{n:g} {what.format(b=TINY_COPY_BYTES)} per step; create the tensor once outside the step (a "
            "buffer) or use a Python scalar (torch.rsqrt(t) -> t * d ** -0.5)"
        ),
    )


# -- (c) heavy host-device traffic ------------------------------------------------------------------
def rule_heavy_traffic(ctx: TraceContext) -> list[Finding]:
    window = ctx.trace.window()
    if ctx.trace.kind == "cuda":
        copies = [e for e in ctx.in_steps if e.category == "memcpy" and e.direction in ("h2d", "d2h")]
        compute = union(clip([(e.start_us, e.end_us) for e in ctx.in_steps if e.category == "kernel"], window))
    else:
        copies = [e for e in ctx.top_ops if e.name in _COPY_OPS and e.bytes and _copies(ctx, e)]
        compute = union(clip([(e.start_us, e.end_us) for e in ctx.top_ops if e.name not in _COPY_OPS], window))
    moved = sum(e.bytes or 0 for e in copies) / ctx.k
    copy_time = total(union(clip([(e.start_us, e.end_us) for e in copies], window))) / ctx.k
    compute_time = total(compute) / ctx.k
    if moved < HEAVY_TRAFFIC_MIN_BYTES or copy_time < HEAVY_TRAFFIC_RATIO * compute_time:
        return []
    by_site: Counter = Counter()
    for e in copies:
        op = ctx.outermost_op(ctx.launcher(e) or e) if ctx.trace.kind == "cuda" else e
        by_site[(op.name if op is not None else e.name, ctx.frames(op if op is not None else e))] += e.bytes or 0
    (op_name, frames), _ = by_site.most_common(1)[0]
    if ctx.not_the_models(frames):
        return []
    ratio = copy_time / compute_time if compute_time > 0 else float("inf")
    return [
        Finding(
            rule="heavy_traffic",
            operator=op_name,
            count=len(copies) / ctx.k,
            time_ms=copy_time / 1e3,
            source=ctx.source(frames, (op_name, "aten::_to_copy", "aten::copy_")),
            message=f"{moved / 2**20:.1f} MiB copied per step taking {ratio:.2f}x the compute time: data ping-pongs "
            "between host and device; keep it resident on the device or overlap the copies "
            "(pinned memory, non_blocking=True, a side stream)",
        )
    ]


def _copies(ctx: TraceContext, e: TraceEvent) -> bool:
    # aten::to returns its input when nothing changes; count it only when it really copied.
    if e.name != "aten::to":
        return True
    idx = ctx.index[id(e)]
    return any(c.parent == idx and c.name in ("aten::_to_copy", "aten::copy_") for c in ctx.in_steps)
