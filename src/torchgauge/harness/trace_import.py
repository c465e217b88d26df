"""Chrome/Kineto trace files (``torch.profiler`` output, CUDA or ROCm) -> :class:`ProfileTrace` per device.

Traces captured elsewhere (a GPU cluster, or torchgauge's own ``--profile``) are read
without torch, one event at a time (:mod:`.json_stream`), into the same plain records that
:mod:`.profile` makes, so the breakdown and the bug rules apply unchanged. Torch-free.

Reading rules:

- Complete events (``"ph": "X"``) with a number ``ts`` and ``dur`` are kept; times are
  microseconds (floats where the profiler recorded nanosecond resolution), shifted by a
  whole number of microseconds so that the first event kept starts in [0, 1). Everything else (metadata, flow arrows,
  counters, instants, unknown categories, events missing a field) is skipped and counted by reason.
- The category comes from ``cat``: ``kernel``, ``gpu_memcpy``, ``gpu_memset`` and
  ``cuda_sync`` run on a device (``args.device``, else the process id) and stream
  (``args.stream``, else the thread id); ``cpu_op``, ``python_function``,
  ``user_annotation`` and the runtime/driver calls are host events. A device's
  ``cuda_sync`` records (stream waits, stream and context syncs) are kept as ``sync``
  events on the device: they are not work, so no breakdown counts them busy.
- Steps are torchgauge's ``torchgauge.step#N`` annotations, else ``ProfilerStep#N``.
  Without any, the whole trace is one step: the device's first to last event (host events
  for a trace with no device activity).
- A device event's step is its launching runtime call's step (linked by ``correlation``),
  so a kernel that runs after its step ended on the host is still charged to it.
- One :class:`ProfileTrace` per device holds the host events followed by that device's
  events (parent indices point into the shared host prefix). A trace with no device
  activity gives one CPU trace.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .events import (
    STEP_NAME_RE,
    SYNC_RUNTIME_CALLS,
    ProfileTrace,
    TraceEvent,
    link_parents,
    memcpy_direction,
    python_stack,
    step_index,
)
from .json_stream import TraceFormatError, iter_trace_json, open_trace_text

__all__ = ["HOST_CATEGORIES_FOR_BREAKDOWN", "ImportedTrace", "TraceFormatError", "read_trace"]

# Host categories a breakdown needs: step annotations and the runtime calls that give device
# events their step. ``read_trace(..., host=False)`` keeps only these.
HOST_CATEGORIES_FOR_BREAKDOWN = frozenset({"annotation", "runtime", "sync"})

# Chrome ``cat`` -> TraceEvent.category (None: a device-side category).
_HOST_CATS = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "python",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "hip_runtime": "runtime",
}
_DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync"}
# Known categories that carry nothing the analysis uses (device copies of host annotations,
# range-profiler counters, the profiler's own span).
_IGNORED_CATS = frozenset(
    {"gpu_user_annotation", "cuda_profiler_range", "trace", "overhead", "ac2g", "async_cpu_to_gpu", "fwdbwd"}
)
_PHASE_NAMES = {
    "M": "metadata",
    "s": "flow",
    "f": "flow",
    "t": "flow",
    "i": "instant",
    "I": "instant",
    "C": "counter",
    "B": "begin/end pair (unsupported)",
    "E": "begin/end pair (unsupported)",
}


@dataclass
class ImportedTrace:
    """One trace file, read: a :class:`ProfileTrace` per device, and what was left out."""

    path: str
    platform: str  # "cuda", "rocm" or "cpu" (no device activity)
    traces: dict[str, ProfileTrace]  # "cuda:0" -> its trace; "cpu" when the file has no device activity
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> events skipped
    events_read: int = 0  # events in the file's traceEvents
    rank: int | None = None  # distributedInfo.rank, when the job recorded it
    has_step_annotations: bool = False


class _Builder:
    """Accumulates converted events; one pass over the file."""

    def __init__(self, host: bool) -> None:
        self.keep_host = host
        self.host: list[tuple] = []  # (name, category, start, end, thread, stack, shapes, correlation)
        self.device: dict[str, list[tuple]] = {}  # (name, category, start, end, stream, bytes, direction, correlation)
        self.skipped: Counter[str] = Counter()
        self.read = 0
        self.origin: float | None = None
        self.metadata: dict[str, Any] = {}
        self.hip = False

    def on_metadata(self, key: str, value: Any) -> None:
        if key in ("distributedInfo", "deviceProperties"):
            self.metadata[key] = value

    def add(self, raw: Any) -> None:
        self.read += 1
        if not isinstance(raw, dict):
            self.skipped["not an object"] += 1
            return
        ph = raw.get("ph")
        if ph != "X":
            self.skipped[_PHASE_NAMES.get(ph, f"phase {ph!r}")] += 1
            return
        cat_raw = str(raw.get("cat", "")).lower()
        name = raw.get("name")
        ts, dur = raw.get("ts"), raw.get("dur")
        if cat_raw in _IGNORED_CATS:
            self.skipped[f"category {cat_raw}"] += 1
            return
        host_cat = _HOST_CATS.get(cat_raw)
        dev_cat = _DEVICE_CATS.get(cat_raw)
        if host_cat is None and dev_cat is None:
            self.skipped[f"unknown category {cat_raw or '(none)'}"] += 1
            return
        if not isinstance(name, str) or not _is_number(ts) or not _is_number(dur) or dur < 0:
            self.skipped["missing or invalid name/ts/dur"] += 1
            return
        args = raw.get("args") if isinstance(raw.get("args"), dict) else {}
        if self.origin is None:  # a whole microsecond, so fractions stay as recorded
            self.origin = math.floor(ts)
        start = ts - self.origin
        name = sys.intern(name)
        corr = args.get("correlation")
        corr = corr if isinstance(corr, int) and corr > 0 else None
        if dev_cat is not None:
            dev = args.get("device", raw.get("pid"))
            if not isinstance(dev, int):
                self.skipped["device event without a device index"] += 1
                return
            stream = args.get("stream", raw.get("tid"))
            stream = stream if isinstance(stream, int) else -1
            nbytes = args.get("bytes")
            direction = memcpy_direction(name) if dev_cat in ("memcpy", "memset") else None
            if dev_cat == "memcpy" and direction is None and isinstance(args.get("kind"), str):
                direction = memcpy_direction(args["kind"])  # ROCm: "kind": "HtoD"
            # Plain tuples until the end: parents and steps are known only after the last event.
            self.device.setdefault(f"cuda:{dev}", []).append(
                (
                    name,
                    dev_cat,
                    start,
                    start + dur,
                    stream,
                    nbytes if isinstance(nbytes, int) else None,
                    direction,
                    corr,
                )
            )
            return
        if host_cat == "runtime":
            if name.startswith("hip"):
                self.hip = True
            if name in SYNC_RUNTIME_CALLS:
                host_cat = "sync"
        is_step = host_cat in ("annotation", "cpu_op") and STEP_NAME_RE.match(name) is not None
        if is_step:
            host_cat = "annotation"
        if not self.keep_host and host_cat not in HOST_CATEGORIES_FOR_BREAKDOWN:
            return
        tid = raw.get("tid")
        stack: tuple[str, ...] = ()
        call_stack = args.get("Call stack")
        if isinstance(call_stack, str) and call_stack:
            stack = tuple(sys.intern(f) for f in call_stack.split(";") if f)
        dims = args.get("Input Dims")
        shapes = tuple(tuple(d) if isinstance(d, list) else () for d in dims) if isinstance(dims, list) else ()
        self.host.append((name, host_cat, start, start + dur, tid if isinstance(tid, int) else 0, stack, shapes, corr))

    def finish(self, path: str) -> ImportedTrace:
        rows = self.host
        steps = _step_spans(rows)
        parents = link_parents([(r[2], r[3], r[4], r[1]) for r in rows])
        python_names = [r[0] if r[1] == "python" else None for r in rows]
        starts = [s for s, _ in steps]
        by_corr: dict[int, int] = {}
        host: list[TraceEvent] = []
        for i, (name, cat, start, end, tid, stack, shapes, corr) in enumerate(rows):
            if not stack and cat in ("cpu_op", "sync", "runtime") and parents[i] is not None:
                stack = python_stack(i, parents, python_names)
            host.append(
                TraceEvent(
                    name,
                    cat,
                    start,
                    end,
                    thread=tid,
                    step=step_index(start, starts) if starts else 0,
                    stack=stack,
                    shapes=shapes,
                    correlation=corr,
                    parent=parents[i],
                )
            )
            if corr is not None and cat in ("runtime", "sync"):
                by_corr[corr] = i
        rows.clear()
        traces: dict[str, ProfileTrace] = {}
        for dev in sorted(self.device, key=_device_order):
            dev_rows = self.device.pop(dev)
            dev_rows.sort(key=lambda r: r[2])
            own_steps = steps or [(dev_rows[0][2], max(r[3] for r in dev_rows))]
            own_starts = [s for s, _ in own_steps]
            events = list(host)
            for name, cat, start, end, stream, nbytes, direction, corr in dev_rows:
                launcher = by_corr.get(corr) if corr is not None else None
                step = host[launcher].step if launcher is not None else step_index(start, own_starts)
                events.append(
                    TraceEvent(
                        name,
                        cat,
                        start,
                        end,
                        device=dev,
                        thread=stream,
                        step=step,
                        bytes=nbytes,
                        direction=direction,
                        correlation=corr,
                        parent=launcher,
                    )
                )
            dev_rows.clear()
            traces[dev] = ProfileTrace(kind="cuda", steps=own_steps, events=events, device=dev, trace_path=path)
        if not traces:
            if not host:
                raise TraceFormatError(
                    f"{path}: no profiler events in the file (read {self.read}, skipped "
                    f"{sum(self.skipped.values())}); accepted: a torch.profiler/Kineto "
                    "Chrome trace"
                )
            own_steps = steps or [(min(e.start_us for e in host), max(e.end_us for e in host))]
            traces["cpu"] = ProfileTrace(kind="cpu", steps=own_steps, events=host, device="cpu", trace_path=path)
        dist = self.metadata.get("distributedInfo")
        rank = dist.get("rank") if isinstance(dist, dict) and isinstance(dist.get("rank"), int) else None
        platform = "cpu" if "cpu" in traces else ("rocm" if self.hip or _is_rocm(self.metadata) else "cuda")
        return ImportedTrace(
            path=path,
            platform=platform,
            traces=traces,
            skipped=dict(self.skipped),
            events_read=self.read,
            rank=rank,
            has_step_annotations=bool(steps),
        )


def read_trace(path: str | os.PathLike, *, host: bool = True) -> ImportedTrace:
    """Read a Chrome/Kineto trace (plain or gzipped JSON) into per-device :class:`ProfileTrace` records.

    Args:
        path: the trace file.
        host: keep every host event (operators, Python frames: what ``diagnose`` needs); False
            keeps only step annotations and runtime calls (enough for the breakdown, less memory).

    Raises:
        TraceFormatError: not a Chrome trace, cut short, or holding no profiler event.
        OSError: the file cannot be read.

    Example:
        >>> t = read_trace("trace.json.gz")  # doctest: +SKIP
        >>> {dev: len(tr.steps) for dev, tr in t.traces.items()}  # doctest: +SKIP
        {'cuda:0': 6}
    """
    where = os.fspath(path)
    builder = _Builder(host)
    with open_trace_text(path) as fh:
        for raw in iter_trace_json(fh, builder.on_metadata, where):
            builder.add(raw)
    return builder.finish(where)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x  # NaN is not a time


def _step_spans(rows: Iterable[tuple]) -> list[tuple[float, float]]:
    # One span per step number (a step annotated on several threads keeps its outermost span).
    # torchgauge's own annotations win over torch.profiler's: a trace from torchgauge's
    # --profile has both, and ProfilerStep#N there also counts the warm-up step.
    spans: dict[str, dict[int, tuple[float, float]]] = {"torchgauge": {}, "ProfilerStep": {}}
    for name, cat, start, end, *_ in rows:
        if cat == "annotation":
            m = STEP_NAME_RE.match(name)
            if m:
                family = spans["torchgauge" if name.startswith("torchgauge") else "ProfilerStep"]
                n = int(m.group(1))
                s, t = family.get(n, (start, end))
                family[n] = (min(s, start), max(t, end))
    return sorted((spans["torchgauge"] or spans["ProfilerStep"]).values())


def _device_order(dev: str) -> int:
    return int(dev.split(":")[1])


def _is_rocm(metadata: dict[str, Any]) -> bool:
    props = metadata.get("deviceProperties")
    return isinstance(props, list) and any(isinstance(p, dict) and "gcnArchName" in p for p in props)
