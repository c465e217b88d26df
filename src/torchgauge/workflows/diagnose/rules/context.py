"""Shared look-ups over one profiled trace: structure (parents, launches) and source attribution.

Attribution: a finding names the innermost frame in the model's files, at the exact call
line (from :func:`torchgauge.harness.profile.record_call_sites`); where one function calls
the same operator on several lines, each line is its own finding (count and time split by
the recorded calls). Frames in torch, the standard library and torchgauge's own harness are
never named; a finding whose stack holds no other frame (the harness's optimizer step) is
not the model's and is dropped. Optimizer-internal calls (``torch/optim``) are not counted
when choosing a line.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence

from ....harness.breakdown import is_aten_op
from ....harness.events import (
    Frame,
    ProfileTrace,
    TraceEvent,
    is_framework_file,
    is_harness_file,
    parse_frame,
    top_level,
)

__all__ = ["HOST_CATEGORIES", "CallLines", "Callers", "Site", "TraceContext"]

# Trace categories of host-side events (what the host was busy with).
HOST_CATEGORIES = ("python", "cpu_op", "sync", "runtime", "annotation")

CallLines = Mapping[tuple[str, str, int], Mapping[int, int]]
Callers = Mapping[tuple[str, int], Mapping[tuple[str, int, int], int]]
# One place a finding is attributed to, and the share of the group's calls made there.
Site = tuple[str | None, float]


class TraceContext:
    """Shared look-ups over one trace."""

    def __init__(
        self,
        trace: ProfileTrace,
        model_files: tuple[str, ...],
        call_lines: CallLines,
        raised: CallLines,
        callers: Callers,
        direct: CallLines,
    ) -> None:
        self.trace = trace
        self.k = len(trace.steps)
        self.model_files = tuple(os.path.normpath(f) for f in model_files)
        self.call_lines = call_lines
        self.raised = raised
        self.callers = callers
        self.direct = direct
        self.in_steps = [e for e in trace.events if e.step is not None]
        self.index = {id(e): i for i, e in enumerate(trace.events)}
        self.top_ops = [e for e in top_level(e for e in self.in_steps if is_aten_op(e))]
        self._launchers: dict[int, TraceEvent] | None = None
        self._launching: set[int] | None = None

    # -- structure ---------------------------------------------------------------------------
    def parent(self, e: TraceEvent) -> TraceEvent | None:
        return self.trace.events[e.parent] if e.parent is not None else None

    def outermost_op(self, e: TraceEvent) -> TraceEvent | None:
        """The top-level operator enclosing ``e`` (``e`` itself when it is one)."""
        best = e if e.category == "cpu_op" else None
        p = self.parent(e)
        while p is not None:
            if p.category == "cpu_op":
                best = p
            p = self.parent(p)
        return best

    def frames(self, e: TraceEvent) -> tuple[str, ...]:
        """Python frames innermost first: the recorded stack, else the python parents."""
        if e.stack:
            return e.stack
        out = [e.name] if e.category == "python" else []
        p = self.parent(e)
        while p is not None:
            if p.category == "python":
                out.append(p.name)
            p = self.parent(p)
        return tuple(out)

    def launcher(self, device_event: TraceEvent) -> TraceEvent | None:
        """The host event that launched ``device_event``: the runtime call with its correlation
        id, else the host operator the profiler linked it to (its ``parent``)."""
        if self._launchers is None:
            self._launchers = {
                e.correlation: e
                for e in self.trace.events
                if e.correlation is not None and e.category in ("runtime", "sync") and e.device == "cpu"
            }
        found = self._launchers.get(device_event.correlation) if device_event.correlation is not None else None
        return found if found is not None else self.parent(device_event)

    def launches_device_work(self, op: TraceEvent) -> bool:
        """Whether a kernel, copy or fill was launched from inside ``op`` (device traces)."""
        if self._launching is None:
            self._launching = set()
            for e in self.trace.events:
                if not e.on_device:
                    continue
                p = self.launcher(e)
                while p is not None and id(p) not in self._launching:
                    self._launching.add(id(p))
                    p = self.parent(p)
        return id(op) in self._launching

    def in_grad_accumulation(self, e: TraceEvent) -> bool:
        """Inside autograd's per-parameter gradient accumulation (inherent to eager backward)."""
        p = self.parent(e)
        while p is not None:
            if "AccumulateGrad" in p.name:
                return True
            p = self.parent(p)
        return False

    # -- source attribution ------------------------------------------------------------------
    def _is_model_file(self, file: str) -> bool:
        f = os.path.normpath(file)
        return any(m.endswith(os.sep + f) or m == f for m in self.model_files)

    def user_frame(self, frames: Sequence[str]) -> Frame | None:
        """The frame a finding names: the innermost in the model's files, else the innermost
        outside torch and libraries; None when the stack holds no such frame."""
        parsed = []
        for p in (parse_frame(f) for f in frames):  # innermost first
            if p is None:
                continue
            if is_harness_file(p.file):
                break  # what lies outside torchgauge's harness is the benchmark's caller, not the model
            parsed.append(p)
        chosen = next((p for p in parsed if self._is_model_file(p.file)), None)
        if chosen is None:
            chosen = next((p for p in parsed if not is_framework_file(p.file)), None)
        return chosen

    def not_the_models(self, frames: Sequence[str]) -> bool:
        """The stack was recorded and holds only torch, library and torchgauge-harness frames."""
        return any(parse_frame(f) is not None for f in frames) and self.user_frame(frames) is None

    def call_sites(self, frames: Sequence[str], ops: Sequence[str] = (), table: CallLines | None = None) -> list[Site]:
        """``[(source, share), ...]``: each calling line of the innermost model frame, with the
        share of its calls (one entry, share 1, when the lines are unknown).

        ``ops`` are the operator names to look the call lines up with, most specific first.
        """
        chosen = self.user_frame(frames)
        if chosen is None:
            return [(None, 1.0)]
        entry = self.library_entry(tuple(frames))
        lines = self._caller_lines(chosen, entry[1]) if entry is not None and table is None else {}
        if not lines and table is None:
            lines = self.call_lines_in(chosen.file, chosen.line, tuple(ops), self.direct)
        if not lines:
            lines = self.call_lines_in(
                chosen.file, chosen.line, tuple(ops), self.call_lines if table is None else table
            )
        if not lines:
            return [(f"{chosen.file}:{chosen.line} in {chosen.func} (function start)", 1.0)]
        n = sum(lines.values())
        return [(f"{chosen.file}:{line} in {chosen.func}", c / n) for line, c in sorted(lines.items())]

    def source(self, frames: Sequence[str], ops: Sequence[str] = ()) -> str | None:
        """The calling line with the most calls (for findings that are one place by nature)."""
        return max(self.call_sites(frames, ops), key=lambda site: site[1])[0]

    def _caller_lines(self, user: Frame, callee: Frame) -> dict[int, int]:
        """Lines of ``user``'s function that called ``callee`` (from the call-site pass)."""
        callee_file = os.path.normpath(callee.file)
        user_file = os.path.normpath(user.file)
        lines: Counter[int] = Counter()
        for (file, first), sites in self.callers.items():
            if first != callee.line or not _same_file(file, callee_file):
                continue
            for (caller_file, caller_first, line), n in sites.items():
                if caller_first == user.line and _same_file(caller_file, user_file):
                    lines[line] += n
        return dict(lines)

    def call_lines_in(self, file: str, first_line: int, ops: tuple[str, ...], table: CallLines) -> dict[int, int]:
        """``{line: calls}`` of the function starting at ``file:first_line`` in ``table``; the first
        of ``ops`` with a recorded call there decides."""
        f = os.path.normpath(file)
        for wanted in ops:
            lines: Counter[int] = Counter()
            for (op, path, first), counts in table.items():
                if op == wanted and first == first_line and os.path.normpath(path).endswith(f):
                    lines.update(counts)
            if lines:
                return dict(lines)
        return {}

    def descendant_names(self, root: TraceEvent) -> tuple[str, ...]:
        """``root``'s name, then those of the ops nested in it, outermost first (for call-line
        look-ups: ``.item()`` reaches the dispatcher as ``aten::_local_scalar_dense``)."""
        names = [root.name]
        rid = self.index[id(root)]
        for e in self.in_steps:
            p = e.parent
            while p is not None:
                if p == rid:
                    if e.name not in names:
                        names.append(e.name)
                    break
                p = self.trace.events[p].parent
        return tuple(names)

    def library_entry(self, frames: tuple[str, ...]) -> tuple[Frame, Frame] | None:
        """(model frame, library frame it calls) when the operator is reached through library code
        (``print(t)`` -> ``torch/_tensor.py: __format__`` -> ...), else None."""
        user = self.user_frame(frames)
        if user is None:
            return None
        inner = None
        for f in frames:
            p = parse_frame(f)
            if p == user:
                return (user, inner) if inner is not None else None
            if p is not None:
                inner = p
        return None

    def raised_here(self, op: str, frames: tuple[str, ...]) -> bool:
        """Whether the model line behind ``frames`` recorded a raise of ``op`` (call-site pass)."""
        chosen = self.user_frame(frames)
        return chosen is not None and bool(self.call_lines_in(chosen.file, chosen.line, (op,), self.raised))


def _same_file(recorded: str, named: str) -> bool:
    # The profiler may name a file relative to a sys.path entry; the interpreter names it in full.
    recorded = os.path.normpath(recorded)
    return recorded == named or recorded.endswith(os.sep + named) or named.endswith(os.sep + recorded)
