"""Profiled pass: K steps under ``torch.profiler``, converted to plain :class:`TraceEvent` records.

Measuring only. Each step runs inside ``record_function("torchgauge.step#i")`` so its span is
in the trace; the device is synchronised before and after the steps (inside the profiler, so
the last kernels are collected). The result is torch-free: :mod:`.breakdown` does the
arithmetic and :mod:`torchgauge.workflows.diagnose.rules` the judging. Optionally the same pass is
exported as a Chrome/Perfetto trace.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils._python_dispatch import TorchDispatchMode

from .events import (
    SYNC_RUNTIME_CALLS,
    ProfileTrace,
    TraceEvent,
    is_framework_file,
    link_parents,
    memcpy_direction,
    python_stack,
    step_index,
)
from .timer import device_sync

if TYPE_CHECKING:  # pragma: no cover
    from ..workload import Workload

__all__ = [
    "INTERNAL_PATHS",
    "PROFILER_WARMUP_STEPS",
    "STEP_PREFIX",
    "SYNC_RUNTIME_CALLS",
    "CallSites",
    "model_source_files",
    "profile_for_diagnosis",
    "profile_steps",
    "profile_workload",
    "record_call_lines",
    "record_call_sites",
    "trace_file_path",
]

STEP_PREFIX = "torchgauge.step#"
# Steps run under the profiler before recording starts (its own start-up cost lands there).
PROFILER_WARMUP_STEPS = 1
# Host copy operators whose source size is recorded as ``bytes`` (CPU analogue of memcpys).
COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy", "aten::to"})
_ACTIVITY_CATEGORY = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cpu_op": "cpu_op",
    "python_function": "python",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
}
# Element sizes of the dtype names the profiler records (C++ spellings).
_ITEMSIZE = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
}
_SAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")


def trace_file_path(directory: str | os.PathLike, label: str) -> Path:
    """``DIR/<label with safe characters>.pt.trace.json`` (the directory is created)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stem = _SAFE_RE.sub("_", label.replace("/", "-")).strip("._-") or "run"
    return directory / f"{stem}.pt.trace.json"


def profile_workload(
    workload: Workload,
    steps: int = 5,
    *,
    with_stack: bool = False,
    record_shapes: bool = True,
    trace_path: str | os.PathLike | None = None,
) -> ProfileTrace:
    """Profile ``steps`` iterations of an already warmed-up workload on its device."""
    return profile_steps(
        workload.step, workload.device, steps, with_stack=with_stack, record_shapes=record_shapes, trace_path=trace_path
    )


def profile_steps(
    step: Callable[[], Any],
    device: Any,
    steps: int = 5,
    *,
    with_stack: bool = False,
    record_shapes: bool = True,
    trace_path: str | os.PathLike | None = None,
) -> ProfileTrace:
    """Run ``step`` ``steps`` times under torch.profiler and return the plain records.

    Args:
        step: one iteration (``Workload.step``).
        device: where it runs; CUDA adds the device activity and makes a ``"cuda"`` trace.
        steps: iterations profiled (K >= 1).
        with_stack: record Python frames (costs host time: keep it off for the breakdown).
        record_shapes: record input shapes (and copy sizes).
        trace_path: also write a Chrome/Perfetto trace there.
    """
    if steps < 1:
        raise ValueError(f"invalid number of profiled steps {steps}; accepted: an integer >= 1")
    dev = torch.device(device)
    on_cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    sync = device_sync(dev)
    sync()
    # The first step after the profiler starts pays its set-up (tens of ms on a CPU): run
    # PROFILER_WARMUP_STEPS under the profiler's warm-up phase, whose events are discarded.
    plan = schedule(wait=0, warmup=PROFILER_WARMUP_STEPS, active=steps, repeat=1)
    total_steps = PROFILER_WARMUP_STEPS + steps
    with profile(activities=activities, record_shapes=record_shapes, with_stack=with_stack, schedule=plan) as prof:
        for i in range(total_steps):
            with record_function(f"{STEP_PREFIX}{i - PROFILER_WARMUP_STEPS}"):
                step()
            if i == total_steps - 1:
                sync()  # the last kernels must finish while the profiler is still recording
            prof.step()
    trace = _convert(prof.profiler.kineto_results, "cuda" if on_cuda else "cpu", str(dev))
    if trace_path is not None:
        prof.export_chrome_trace(str(trace_path))
        trace.trace_path = str(trace_path)
    return trace


def _name(raw: Any) -> str:
    # The python tracer occasionally hands back names that are not UTF-8; keep the event.
    try:
        return raw.name()
    except UnicodeDecodeError:
        return "<undecodable>"


def _category(kind: str, name: str) -> str:
    cat = _ACTIVITY_CATEGORY.get(kind, "other")
    if cat == "runtime" and name in SYNC_RUNTIME_CALLS:
        return "sync"
    if cat == "other" and name.startswith(("Memcpy", "Memset")):
        return "memcpy" if name.startswith("Memcpy") else "memset"
    return cat


_BYTES_RE = re.compile(r'"bytes"\s*:\s*(\d+)')


def _device_bytes(raw: Any) -> int | None:
    # Kineto exposes a memcpy's size as nbytes() or, depending on the build, only in the
    # event's metadata ("bytes": N, as in the Chrome trace's args).
    try:
        nbytes = int(raw.nbytes())
    except (AttributeError, RuntimeError, TypeError):
        nbytes = 0
    if nbytes:
        return nbytes
    try:
        m = _BYTES_RE.search(raw.metadata_json() or "")
    except (AttributeError, RuntimeError, UnicodeDecodeError):
        return None
    return int(m.group(1)) if m else None


def _copy_bytes(name: str, raw: Any) -> int | None:
    if name not in COPY_OPS:
        return None
    try:
        shapes, dtypes = raw.shapes(), raw.dtypes()
    except (RuntimeError, UnicodeDecodeError):
        return None
    src = 1 if name == "aten::copy_" and len(shapes) > 1 else 0
    if len(shapes) <= src or len(dtypes) <= src or dtypes[src] not in _ITEMSIZE:
        return None
    numel = 1
    for d in shapes[src]:
        numel *= d
    return numel * _ITEMSIZE[dtypes[src]]


def _convert(results: Any, kind: str, device: str) -> ProfileTrace:
    base = results.trace_start_ns()
    raw_events = list(results.events())
    rows: list[dict[str, Any]] = []
    for raw in raw_events:
        name = _name(raw)
        cat = _category(raw.activity_type(), name)
        on_dev = raw.device_type() != torch.autograd.DeviceType.CPU and cat in ("kernel", "memcpy", "memset", "other")
        row: dict[str, Any] = {
            "name": name,
            "category": cat,
            "start_us": (raw.start_ns() - base) / 1e3,
            "end_us": (raw.end_ns() - base) / 1e3,
            "device": f"{device.split(':')[0]}:{raw.device_index()}" if on_dev else "cpu",
            "thread": raw.device_resource_id() if on_dev else raw.start_thread_id(),
            "correlation": raw.correlation_id() or None,
        }
        if cat in ("memcpy", "memset"):
            row["direction"] = memcpy_direction(name)
            row["bytes"] = _device_bytes(raw)
        elif cat == "cpu_op":
            row["bytes"] = _copy_bytes(name, raw)
            try:
                row["shapes"] = tuple(tuple(s) for s in raw.shapes())
            except (RuntimeError, UnicodeDecodeError):
                pass
        if on_dev:  # the host op that launched it (kineto links it by the op's correlation id)
            row["_linked"] = getattr(raw, "linked_correlation_id", lambda: 0)()
        rows.append(row)
    op_by_corr = {r["correlation"]: i for i, r in enumerate(rows) if r["category"] == "cpu_op" and r["correlation"]}
    for r in rows:
        linked = r.pop("_linked", 0)
        if linked and linked in op_by_corr:
            r["parent"] = op_by_corr[linked]
    steps = sorted(
        (r["start_us"], r["end_us"])
        for r in rows
        if r["category"] == "annotation" and r["name"].startswith(STEP_PREFIX)
    )
    if not steps:
        raise RuntimeError("the profiler recorded no step annotations; is another profiler already running?")
    host_parents = link_parents([(r["start_us"], r["end_us"], r["thread"], r["category"]) for r in rows])
    for r, p in zip(rows, host_parents):
        if p is not None:
            r["parent"] = p
    parents = [r.get("parent") for r in rows]
    python_names = [r["name"] if r["category"] == "python" else None for r in rows]
    starts = [s for s, _ in steps]
    for i, r in enumerate(rows):
        r["step"] = step_index(r["start_us"], starts)
        if r["category"] in ("cpu_op", "sync", "runtime"):
            r["stack"] = python_stack(i, parents, python_names)
    return ProfileTrace(kind=kind, steps=steps, events=[TraceEvent(**r) for r in rows], device=device)


# Code whose operator calls are not the user's to attribute: the optimizers' internals (Adam
# reads its step counts with .item()); a call under one of these frames is left out of the lines.
INTERNAL_PATHS = ("/torch/optim/",)


@dataclass
class CallSites:
    """Exact call lines of one step's ATen ops, which calls raised, and who called each Python function.

    ``lines`` and ``raised`` map ``(op, file, function's first line)`` to ``{call line: calls}``;
    ``callers`` maps a Python function ``(file, first line)`` to ``{(caller file, caller's first
    line, call line): calls}`` (how ``print(t)`` in a model reaches ``torch/_tensor.py``, whose
    operators run with dispatch modes disabled and so never reach ``lines``).
    """

    lines: dict[tuple[str, str, int], dict[int, int]] = field(default_factory=dict)
    direct: dict[tuple[str, str, int], dict[int, int]] = field(default_factory=dict)  # innermost user frame only
    raised: dict[tuple[str, str, int], dict[int, int]] = field(default_factory=dict)
    callers: dict[tuple[str, int], dict[tuple[str, int, int], int]] = field(default_factory=dict)


class _CallLineRecorder(TorchDispatchMode):
    """For every ATen op call: the Python frames (file, first line, call line) that led to it,
    and the same for calls that raised (a c10::Error surfacing as a Python exception)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites = CallSites()

    def _record(self, table: dict, op: str, frame: Any, direct: dict | None = None) -> None:
        while frame is not None:
            code = frame.f_code
            by_line = table.setdefault((op, code.co_filename, code.co_firstlineno), {})
            by_line[frame.f_lineno] = by_line.get(frame.f_lineno, 0) + 1
            if direct is not None and not is_framework_file(code.co_filename):
                by_line = direct.setdefault((op, code.co_filename, code.co_firstlineno), {})
                by_line[frame.f_lineno] = by_line.get(frame.f_lineno, 0) + 1
                direct = None  # only the innermost user frame
            frame = frame.f_back

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = f"{getattr(func, 'namespace', 'aten')}::{func.overloadpacket.__name__}"
        caller = sys._getframe(1)
        frame, internal = caller, False
        while frame is not None and not internal:
            internal = any(p in frame.f_code.co_filename.replace(os.sep, "/") for p in INTERNAL_PATHS)
            frame = frame.f_back
        if not internal:
            self._record(self.sites.lines, op, caller, self.sites.direct)
        try:
            return func(*args, **(kwargs or {}))
        except Exception:
            if not internal:
                self._record(self.sites.raised, op, caller)
            raise


def record_call_sites(step: Callable[[], Any]) -> CallSites:
    """Run one ``step`` under a dispatch mode and return its ops' exact call lines.

    The profiler names a Python frame by its function's *first* line; this maps
    ``(op, file, first line)`` to ``{call line: calls}`` so a finding can name the line itself
    (and split one function's calls of an op by line). Ops reached only through composite ones
    are named as they reach the dispatcher (``.item()`` appears as
    ``aten::_local_scalar_dense``, ``.tolist()`` as ``aten::resolve_conj``). Backward ops have no
    Python frames; calls made inside :data:`INTERNAL_PATHS` are left out.
    """
    rec = _CallLineRecorder()
    callers = rec.sites.callers

    def on_event(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_back is not None:
            back = frame.f_back
            by_site = callers.setdefault((frame.f_code.co_filename, frame.f_code.co_firstlineno), {})
            site = (back.f_code.co_filename, back.f_code.co_firstlineno, back.f_lineno)
            by_site[site] = by_site.get(site, 0) + 1

    previous = sys.getprofile()
    sys.setprofile(on_event)
    try:
        with rec:
            step()
    finally:
        sys.setprofile(previous)
    return rec.sites


def record_call_lines(step: Callable[[], Any]) -> dict[tuple[str, str, int], dict[int, int]]:
    """The ``lines`` of :func:`record_call_sites`."""
    return record_call_sites(step).lines


def model_source_files(workload: Workload, builder: Callable[..., Any] | None = None) -> tuple[str, ...]:
    """Source files of the model: its builder, workload class and module classes (not torch's,
    not torchgauge's generic workload), where a finding's source line is looked for."""
    import inspect

    from ..workload import Workload

    torch_dir = os.path.dirname(torch.__file__)
    generic = os.path.abspath(inspect.getsourcefile(Workload) or "")
    files: list[str] = []
    for obj in (builder, type(workload), *(type(m) for m in workload.module.modules())):
        if obj is None:
            continue
        try:
            path = inspect.getsourcefile(inspect.unwrap(obj))
        except TypeError:  # built-in classes
            continue
        if path and not path.startswith(torch_dir) and os.path.abspath(path) != generic and path not in files:
            files.append(os.path.abspath(path))
    return tuple(files)


def profile_for_diagnosis(
    workload: Workload,
    steps: int = 3,
    *,
    warmup: int = 2,
    builder: Callable[..., Any] | None = None,
    trace_path: str | os.PathLike | None = None,
) -> tuple[ProfileTrace, CallSites, tuple[str, ...]]:
    """Warm up, then profile ``steps`` steps with Python stacks and record exact call lines.

    Returns:
        (trace, call_sites, model_files): the inputs of :func:`torchgauge.workflows.diagnose.rules.diagnose`
        (``call_lines=call_sites.lines, raised=call_sites.raised``).
    """
    for _ in range(warmup):
        workload.step()
    device_sync(workload.device)()
    trace = profile_workload(workload, steps, with_stack=True, trace_path=trace_path)
    call_sites = record_call_sites(workload.step)
    return trace, call_sites, model_source_files(workload, builder)
