"""Time breakdown of a profiled pass (TorchBench paper sec. 3.1, Table 2): pure interval arithmetic.

Over the wall-clock window of K profiled steps (:meth:`ProfileTrace.window`):

- **CUDA** (``kind="cuda"``): ``active`` is the union of kernel intervals; data movement is
  the union of memcpy/memset intervals *not covered by a kernel*, split by direction
  (``data_movement_h2d``, ``_d2h``, ``_d2d``; memsets count as d2d, and where copies of
  different directions overlap, the time goes to the first in :data:`DIRECTION_PRIORITY`);
  ``idle`` is the rest of the window. The fractions sum to 1.
- **CPU** (``kind="cpu"``): ``aten`` is the union of ATen-operator intervals (any thread),
  ``overhead`` the rest of the window: Python, the autograd engine's bookkeeping and the
  framework between operators.

This module imports nothing from torch: it registers the ``breakdown`` metric, whose
collector imports the profiler lazily and runs in its own pass after timing.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .events import ProfileTrace, TraceEvent
from .kernel_types import KERNEL_TYPES, kernel_type
from .metrics import register_metric

if TYPE_CHECKING:  # pragma: no cover
    from ..results.schema import RunConfig
    from ..workload import Workload

__all__ = [
    "CPU_NAMES",
    "CUDA_NAMES",
    "DIRECTION_PRIORITY",
    "PROFILE_STEPS",
    "Interval",
    "breakdown",
    "clip",
    "cpu_breakdown",
    "cuda_breakdown",
    "is_aten_op",
    "step_breakdowns",
    "step_windows",
    "subtract",
    "total",
    "union",
]

Interval = tuple[float, float]

# Steps profiled for the breakdown (after the timed pass's warm-up, so no lazy init inside).
PROFILE_STEPS = 5
CUDA_NAMES = ("active", "data_movement_h2d", "data_movement_d2h", "data_movement_d2d", "idle")
CPU_NAMES = ("aten", "overhead")
# Overlapping copies of different directions are charged once, to the first listed.
DIRECTION_PRIORITY = ("h2d", "d2h", "d2d")
# Host "operators" that are autograd-engine bookkeeping rather than ATen kernels.
_NON_ATEN_NAMESPACES = ("autograd::", "torch::autograd::", "profiler::", "ProfilerStep")


# -- interval arithmetic ---------------------------------------------------------------------
def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly the input (empty ones dropped)."""
    out: list[list[float]] = []
    for s, e in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    """The parts of ``intervals`` inside ``window``."""
    lo, hi = window
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """``a`` minus ``b``; both must be disjoint and sorted (as :func:`union` returns)."""
    out: list[Interval] = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def total(intervals: Iterable[Interval]) -> float:
    """Summed length of disjoint intervals."""
    return sum(e - s for s, e in intervals)


def _spans(events: Iterable[TraceEvent]) -> list[Interval]:
    return [(e.start_us, e.end_us) for e in events]


def _result(kind: str, trace: ProfileTrace, window: Interval, parts: dict[str, float], extra: dict) -> dict[str, Any]:
    span = window[1] - window[0]
    if span <= 0:
        raise ValueError(f"profiled window is empty ({window}); the steps recorded no time")
    return {
        "kind": kind,
        "steps": len(trace.steps),
        "span_ms": span / 1e3,
        "fractions": {k: v / span for k, v in parts.items()},
        "ms": {k: v / 1e3 for k, v in parts.items()},
        **extra,
    }


def cuda_breakdown(
    trace: ProfileTrace, window: Interval | None = None, *, events: Sequence[TraceEvent] | None = None
) -> dict[str, Any]:
    """Device active / data movement (per direction) / idle over the steps' window.

    Also ``kernel_types``: the fraction of the window covered by each kind of device work
    (:func:`~torchgauge.harness.kernel_types.kernel_type`; unions, so they overlap and need
    not sum to 1: ``compute`` is HTA's compute share). ``window`` overrides the steps' window
    (one step's span, for per-step figures); ``events``, the trace's device events or any
    superset of those overlapping the window, saves scanning the whole trace.
    """
    window = window if window is not None else trace.window()
    device_events = [e for e in (trace.events if events is None else events) if e.on_device]
    active = union(clip(_spans(e for e in device_events if e.category == "kernel"), window))
    remaining = subtract([window], active)  # time no kernel covers
    parts: dict[str, float] = {"active": total(active)}
    moved_bytes: dict[str, int] = {}
    for direction in DIRECTION_PRIORITY:
        copies = [
            e for e in device_events if e.category in ("memcpy", "memset") and (e.direction or "d2d") == direction
        ]
        covered = union(clip(_spans(copies), window))
        charged = [iv for iv in _intersect(covered, remaining)]
        parts[f"data_movement_{direction}"] = total(charged)
        remaining = subtract(remaining, charged)
        moved_bytes[direction] = sum(e.bytes or 0 for e in copies)
    parts["idle"] = total(remaining)
    span = window[1] - window[0]
    by_type: dict[str, list[Interval]] = {t: [] for t in KERNEL_TYPES if t != "other"}
    for e in device_events:
        kind = kernel_type(e)
        if kind in by_type:
            by_type[kind].append((e.start_us, e.end_us))
    shares = {t: total(union(clip(ivs, window))) / span if span > 0 else 0.0 for t, ivs in by_type.items()}
    return _result(
        "cuda",
        trace,
        window,
        parts,
        {
            "bytes": moved_bytes,
            "kernel_types": shares,
            "kernels": sum(1 for e in device_events if e.category == "kernel" and window[0] <= e.start_us < window[1]),
        },
    )


def _intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    # a ∩ b = a − (a − b); both sorted and disjoint.
    return subtract(a, subtract(a, b))


def is_aten_op(event: TraceEvent) -> bool:
    """A host operator that runs framework kernels (``aten::mm``, ``torchvision::nms``), not
    autograd-engine bookkeeping (``autograd::engine::evaluate_function: ...``)."""
    return event.category == "cpu_op" and "::" in event.name and not event.name.startswith(_NON_ATEN_NAMESPACES)


def cpu_breakdown(
    trace: ProfileTrace, window: Interval | None = None, *, events: Sequence[TraceEvent] | None = None
) -> dict[str, Any]:
    """Time inside ATen operators vs framework/Python overhead between them (``window`` and
    ``events`` as in :func:`cuda_breakdown`)."""
    window = window if window is not None else trace.window()
    ops = [e for e in (trace.events if events is None else events) if is_aten_op(e)]
    aten = union(clip(_spans(ops), window))
    parts = {"aten": total(aten)}
    parts["overhead"] = (window[1] - window[0]) - parts["aten"]
    return _result("cpu", trace, window, parts, {"ops": len(ops)})


def breakdown(trace: ProfileTrace, window: Interval | None = None) -> dict[str, Any]:
    """The ``metrics["breakdown"]`` record for a trace (CUDA or CPU by ``trace.kind``), over
    the steps' window or ``window``."""
    return cuda_breakdown(trace, window) if trace.kind == "cuda" else cpu_breakdown(trace, window)


def step_breakdowns(trace: ProfileTrace) -> list[dict[str, Any]]:
    """One breakdown record per step window (:func:`step_windows`), in one pass over the trace."""
    counted = (lambda e: e.on_device) if trace.kind == "cuda" else is_aten_op
    pool = sorted((e for e in trace.events if counted(e)), key=lambda e: e.start_us)
    starts = [e.start_us for e in pool]
    longest = max((e.duration_us for e in pool), default=0.0)
    fn = cuda_breakdown if trace.kind == "cuda" else cpu_breakdown
    out = []
    for lo, hi in step_windows(trace):
        # Only events starting less than the longest duration before the window can reach into it.
        nearby = pool[bisect_left(starts, lo - longest) : bisect_left(starts, hi)]
        out.append({**fn(trace, (lo, hi), events=nearby), "steps": 1})
    return out


def step_windows(trace: ProfileTrace) -> list[Interval]:
    """Each step's window: from its start to the next step's start; the last one ends where
    :meth:`ProfileTrace.window` does (its device work included)."""
    end = trace.window()[1]
    starts = [s for s, _ in trace.steps]
    return [(s, starts[i + 1] if i + 1 < len(starts) else end) for i, s in enumerate(starts)]


@register_metric("breakdown", "profiled pass: GPU active / data movement / idle (CPU: ATen vs overhead)")
def collect_breakdown(workload: Workload, config: RunConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """Profile PROFILE_STEPS steps (no Python stacks, to keep the tracer's cost out of the
    gaps) and, when ``config.options.profile_dir`` is set, a second pass exported as a Chrome trace
    with shapes and stacks."""
    from .profile import profile_workload, trace_file_path

    record = breakdown(profile_workload(workload, steps=PROFILE_STEPS, with_stack=False))
    profile_dir = config.options.profile_dir
    if profile_dir:
        path = trace_file_path(profile_dir, config.label())
        profile_workload(workload, steps=PROFILE_STEPS, with_stack=True, trace_path=path)
        record["trace"] = str(path)
    return {"breakdown": record}
