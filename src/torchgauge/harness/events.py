"""Plain, torch-free records of a profiled pass: what :mod:`torchgauge.harness.profile` returns.

The profiler's own objects are converted into these records at the measuring edge, so the
arithmetic (:mod:`torchgauge.harness.breakdown`) and the judging
(:mod:`torchgauge.workflows.diagnose.rules`) are pure functions over lists that tests can build by
hand. Times are microseconds from the start of the trace.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "CATEGORIES",
    "DIRECTIONS",
    "STEP_NAME_RE",
    "SYNC_RUNTIME_CALLS",
    "Frame",
    "ProfileTrace",
    "TraceEvent",
    "is_framework_file",
    "is_harness_file",
    "link_parents",
    "memcpy_direction",
    "parse_frame",
    "python_stack",
    "step_index",
    "top_level",
]

# kernel/memcpy/memset run on the device; the rest are host-side records.
CATEGORIES = ("kernel", "memcpy", "memset", "cpu_op", "python", "annotation", "runtime", "sync", "other")
DEVICE_CATEGORIES = frozenset({"kernel", "memcpy", "memset"})
# Step annotations: torch.profiler's "ProfilerStep#3" and torchgauge's own "torchgauge.step#3".
STEP_NAME_RE = re.compile(r"^(?:ProfilerStep|torchgauge\.step)\s*#\s*(\d+)$")
# Host runtime calls that block until the device has caught up (CUDA and HIP spellings).
SYNC_RUNTIME_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
    }
)
# Memcpy directions; memsets are device-side writes and count as "d2d".
DIRECTIONS = ("h2d", "d2h", "d2d", "h2h")

_DIRECTION_NAMES = {"htod": "h2d", "dtoh": "d2h", "dtod": "d2d", "htoh": "h2h", "ptop": "d2d"}
_FRAME_RE = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One profiler event, with plain fields only (slotted: an imported trace holds millions)."""

    name: str
    category: str  # one of CATEGORIES
    start_us: float
    end_us: float
    device: str = "cpu"  # "cpu" for host records, "cuda:0" for device ones
    thread: int = 0  # host thread id, or the stream for device events
    step: int | None = None  # index of the step whose span contains the start
    bytes: int | None = None  # memcpy/memset size; copy ops on CPU: bytes of the source
    direction: str | None = None  # memcpy: one of DIRECTIONS
    stack: tuple[str, ...] = ()  # Python frames "file(def line): func", innermost first
    shapes: tuple = ()  # input shapes when recorded
    correlation: int | None = None  # links a device event to the runtime call that launched it
    parent: int | None = None  # index of the enclosing host event in the trace, if any

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def on_device(self) -> bool:
        return self.category in DEVICE_CATEGORIES


@dataclass
class ProfileTrace:
    """K profiled steps: their spans and every event recorded while they ran."""

    kind: str  # "cuda" (device timeline) or "cpu" (host only)
    steps: list[tuple[float, float]]  # (start_us, end_us) of each step on the host
    events: list[TraceEvent] = field(default_factory=list)
    device: str = "cpu"
    trace_path: str | None = None  # Chrome trace written alongside, if any

    def __post_init__(self) -> None:
        if self.kind not in ("cuda", "cpu"):
            raise ValueError(f"invalid trace kind {self.kind!r}; accepted: cuda, cpu")
        if not self.steps:
            raise ValueError("a profile trace needs at least one step span")

    def window(self) -> tuple[float, float]:
        """The wall-clock span of the steps: first step start to the last step's end, or to
        the last device event that started inside the steps (the device runs behind the host)."""
        start, end = self.steps[0][0], self.steps[-1][1]
        for e in self.events:
            if e.on_device and start <= e.start_us < end:
                end = max(end, e.end_us)
        return start, end

    def in_steps(self, categories: Iterable[str] | None = None) -> list[TraceEvent]:
        """Events assigned to a step, optionally of the given categories."""
        wanted = set(categories) if categories is not None else None
        return [e for e in self.events if e.step is not None and (wanted is None or e.category in wanted)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "device": self.device,
            "steps": [list(s) for s in self.steps],
            "trace_path": self.trace_path,
            "events": [asdict(e) for e in self.events],
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ProfileTrace:
        events = [
            TraceEvent(**{**e, "stack": tuple(e.get("stack") or ()), "shapes": tuple(e.get("shapes") or ())})
            for e in doc.get("events", [])
        ]
        return cls(
            kind=doc["kind"],
            steps=[tuple(s) for s in doc["steps"]],
            events=events,
            device=doc.get("device", "cpu"),
            trace_path=doc.get("trace_path"),
        )


@dataclass(frozen=True)
class Frame:
    """A Python frame as the profiler names it: ``torch/nn/modules/linear.py(124): forward``."""

    file: str
    line: int  # the function's first line (the profiler records definitions, not call sites)
    func: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} {self.func}"


def parse_frame(text: str) -> Frame | None:
    """``"file(12): func"`` -> Frame; None for built-ins such as ``<built-in method sleep>``."""
    m = _FRAME_RE.match(text)
    if m is None:
        return None
    return Frame(m.group("file"), int(m.group("line")), m.group("func"))


def is_harness_file(file: str) -> bool:
    """torchgauge's own code, except its model zoo (which is the user's code here)."""
    f = file.replace("\\", "/")
    return (f.startswith("torchgauge/") or "/torchgauge/" in f) and "torchgauge/models/" not in f


def is_framework_file(file: str) -> bool:
    """torch, Python's libraries or torchgauge's harness: code a finding never names."""
    f = file.replace("\\", "/")
    return (
        f.startswith(("torch/", "<"))
        or "/torch/" in f
        or "site-packages/" in f
        or "/lib/python" in f
        or f.startswith(("contextlib", "functools", "threading"))
        or is_harness_file(f)
    )


def memcpy_direction(name: str) -> str | None:
    """Direction of a CUDA memcpy from its profiler name (``"Memcpy HtoD (Pageable -> Device)"``)."""
    lowered = name.lower()
    if lowered.startswith("memset"):
        return "d2d"
    for token, direction in _DIRECTION_NAMES.items():
        if token in lowered:
            return direction
    return None


def top_level(events: Iterable[TraceEvent], category: str = "cpu_op") -> list[TraceEvent]:
    """Events of ``category`` not nested in another of the same category on the same thread.

    Nesting is read from the intervals (a child starts and ends inside its parent), so the
    result does not depend on parent links being recorded. Returned sorted by start.
    """
    by_thread: dict[int, list[TraceEvent]] = {}
    for e in events:
        if e.category == category:
            by_thread.setdefault(e.thread, []).append(e)
    out: list[TraceEvent] = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.start_us, -e.end_us))
        open_end = float("-inf")
        for e in evs:
            if e.start_us >= open_end:  # not inside the current top-level event
                out.append(e)
                open_end = e.end_us
    out.sort(key=lambda e: e.start_us)
    return out


# Host categories that nest: a host event's parent is the innermost one of these enclosing it.
NESTING_CATEGORIES = frozenset({"python", "cpu_op", "annotation", "runtime", "sync"})


def link_parents(spans: Sequence[tuple[float, float, int, str]]) -> list[int | None]:
    """Parent index of each host event: the innermost enclosing nesting event on its thread.

    Args:
        spans: ``(start_us, end_us, thread, category)`` per event, in trace order.

    Returns:
        One entry per span: the index of its parent, or None (device events, outermost events).
    """
    parents: list[int | None] = [None] * len(spans)
    by_thread: dict[int, list[int]] = {}
    for i, (_, _, thread, cat) in enumerate(spans):
        if cat in NESTING_CATEGORIES:
            by_thread.setdefault(thread, []).append(i)
    for idxs in by_thread.values():
        idxs.sort(key=lambda i: (spans[i][0], -spans[i][1]))
        # A stack whose ends shrink toward the top: an open event that ends before a newer
        # one (overlapping it without nesting: record_function starts inside the Python call
        # that enters it) can contain nothing the newer one does not, so it is dropped. The
        # parent is then the top, when anything is left open. Linear in the events.
        open_: list[int] = []
        for i in idxs:
            start, end = spans[i][0], spans[i][1]
            while open_ and spans[open_[-1]][1] <= start:
                open_.pop()
            while open_ and spans[open_[-1]][1] < end:
                open_.pop()
            if open_:
                parents[i] = open_[-1]
            open_.append(i)
    return parents


def python_stack(index: int, parents: Sequence[int | None], python_names: Sequence[str | None]) -> tuple[str, ...]:
    """Names of the Python frames enclosing event ``index``, innermost first.

    ``python_names[i]`` is event i's name when it is a Python frame, else None.
    """
    frames = []
    p = parents[index]
    while p is not None:
        if python_names[p] is not None:
            frames.append(python_names[p])
        p = parents[p]
    return tuple(frames)


def step_index(t: float, starts: Sequence[float]) -> int | None:
    """Index of the last step (by sorted ``starts``) started at or before ``t``; None before the first.

    Steps are contiguous in a training loop: an event belongs to the last step started before it.
    """
    i = bisect_right(starts, t)
    return i - 1 if i else None
