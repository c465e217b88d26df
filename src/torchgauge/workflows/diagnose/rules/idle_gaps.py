"""Rule (e) ``idle_gap``: long stretches where the device (CPU: every operator) waits for the host."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from ....harness.breakdown import clip, is_aten_op, subtract, union
from ....harness.events import STEP_NAME_RE
from .context import HOST_CATEGORIES, TraceContext
from .findings import Finding
from .thresholds import IDLE_GAP_US, IDLE_MIN_FRACTION, IDLE_MIN_STEP_FRACTION

__all__ = ["rule_idle_gap"]

# Python's reprs of built-ins carry object addresses that differ between runs.
_ADDRESS_RE = re.compile(r" at 0x[0-9a-fA-F]+")


def rule_idle_gap(ctx: TraceContext) -> list[Finding]:
    window = ctx.trace.window()
    if ctx.trace.kind == "cuda":
        busy = [(e.start_us, e.end_us) for e in ctx.trace.events if e.on_device]
    else:
        busy = [(e.start_us, e.end_us) for e in ctx.in_steps if is_aten_op(e)]
    gaps = [g for g in subtract([window], union(clip(busy, window))) if g[1] - g[0] >= IDLE_GAP_US]
    span = window[1] - window[0]
    groups: dict[tuple[str, str | None], list] = defaultdict(lambda: [0, 0.0, set()])
    host = [e for e in ctx.trace.events if e.category in HOST_CATEGORIES and not STEP_NAME_RE.match(e.name)]
    for lo, hi in gaps:
        length = hi - lo
        # The deepest host event covering most of the gap is what the host was busy with.
        cover = [e for e in host if min(e.end_us, hi) - max(e.start_us, lo) >= 0.5 * length]
        culprit = min(cover, key=lambda e: e.duration_us) if cover else None
        if culprit is not None and ctx.not_the_models(ctx.frames(culprit)):
            continue
        name = _ADDRESS_RE.sub("", culprit.name) if culprit is not None else "host (no event recorded)"
        src = ctx.source(ctx.frames(culprit)) if culprit is not None else None
        g = groups[(name, src)]
        g[0] += 1
        g[1] += length
        g[2].add(_step_at(ctx.trace.steps, lo))
    target = "the device" if ctx.trace.kind == "cuda" else "the operators"
    out = []
    for (name, src), (n, t, steps) in groups.items():
        if t < IDLE_MIN_FRACTION * span or len(steps) < IDLE_MIN_STEP_FRACTION * ctx.k:
            continue  # too small, or a one-off pause rather than something every step does
        out.append(
            Finding(
                rule="idle_gap",
                operator=name,
                count=n / ctx.k,
                time_ms=t / ctx.k / 1e3,
                source=src,
                message=f"{n / ctx.k:g} gaps of at least {IDLE_GAP_US / 1e3:g} ms per step ({t / span:.0%} of the "
                f"profiled time) where {target} waited for host code; move that work out of the step, "
                "overlap it, or capture the step (CUDA graphs via torch.cuda.graphs, or torch.compile)",
            )
        )
    return out


def _step_at(steps: Sequence[tuple[float, float]], t: float) -> int:
    return max((i for i, (s, _) in enumerate(steps) if s <= t), default=0)
