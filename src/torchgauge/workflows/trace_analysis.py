"""Offline analysis of trace files: breakdown, kernel tables and bug findings per device and step.

Glue between reading (:mod:`torchgauge.harness.trace_import`), the breakdown
(:mod:`torchgauge.harness.breakdown`), the kernel tables (:mod:`torchgauge.report.kernels`)
and the bug rules (:mod:`torchgauge.workflows.diagnose.rules`); ``breakdown --trace`` and
``diagnose --trace`` print what these return. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..harness.breakdown import breakdown, step_breakdowns
from ..harness.events import ProfileTrace
from ..harness.json_stream import TraceFormatError
from ..harness.trace_import import ImportedTrace, read_trace
from ..report.kernels import (
    TOP_KERNELS,
    KernelRow,
    kernel_type_shares,
    launches_per_step,
    top_kernels,
)
from .diagnose.rules import Finding, diagnose

__all__ = [
    "DeviceAnalysis",
    "DeviceDiagnosis",
    "TraceFileError",
    "analyse_trace_file",
    "diagnose_trace_file",
    "map_trace_files",
]

_Result = TypeVar("_Result")


class TraceFileError(ValueError):
    """A trace file could not be read or is not a trace (the message names the file and what is accepted)."""


@dataclass
class _DeviceOfFile:
    """One device of one trace file."""

    file: str
    device: str

    @property
    def label(self) -> str:
        return f"{os.path.basename(self.file)} {self.device}"


@dataclass
class DeviceAnalysis(_DeviceOfFile):
    """One device of one trace file: its breakdown over all steps and per step, and kernel tables."""

    platform: str
    rank: int | None
    breakdown: dict[str, Any]  # the breakdown record over the whole window
    per_step: list[dict[str, Any]]  # one record per step window
    top_kernels: list[KernelRow] = field(default_factory=list)
    kernel_types: dict[str, dict[str, float]] = field(default_factory=dict)
    launches: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    steps_annotated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "device": self.device,
            "platform": self.platform,
            "rank": self.rank,
            "steps_annotated": self.steps_annotated,
            "skipped": self.skipped,
            "breakdown": self.breakdown,
            "per_step": self.per_step,
            "top_kernels": [r.to_dict() for r in self.top_kernels],
            "kernel_types": self.kernel_types,
            "launches_per_step": self.launches,
        }


@dataclass
class DeviceDiagnosis(_DeviceOfFile):
    """Findings for one device of one trace file."""

    steps: int
    span_ms: float
    findings: list[Finding]
    skipped: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "device": self.device,
            "steps": self.steps,
            "span_ms": self.span_ms,
            "skipped": self.skipped,
            "findings": [f.to_dict() for f in self.findings],
        }


def _analyse(imported: ImportedTrace, device: str, trace: ProfileTrace, top: int) -> DeviceAnalysis:
    per_step = step_breakdowns(trace) if len(trace.steps) > 1 else []
    on_device = trace.kind == "cuda"
    return DeviceAnalysis(
        file=imported.path,
        device=device,
        platform=imported.platform,
        rank=imported.rank,
        breakdown=breakdown(trace),
        per_step=per_step,
        top_kernels=top_kernels(trace, top) if on_device else [],
        kernel_types=kernel_type_shares(trace) if on_device else {},
        launches=launches_per_step(trace) if on_device else [],
        skipped=imported.skipped,
        steps_annotated=imported.has_step_annotations,
    )


def analyse_trace_file(path: str | os.PathLike, *, top: int = TOP_KERNELS) -> list[DeviceAnalysis]:
    """Breakdown and kernel tables for every device in a Chrome/Kineto trace file.

    Raises:
        TraceFormatError: the file is not a usable trace.

    Example:
        >>> [a.breakdown["fractions"]["idle"] for a in analyse_trace_file("rank0.json.gz")]  # doctest: +SKIP
    """
    imported = read_trace(path, host=False)
    if imported.platform == "cpu":  # no device activity: the CPU breakdown needs the host operators
        imported = read_trace(path, host=True)
    return [_analyse(imported, dev, tr, top) for dev, tr in imported.traces.items()]


def diagnose_trace_file(path: str | os.PathLike, *, model_files: tuple[str, ...] = ()) -> list[DeviceDiagnosis]:
    """Apply the bug rules to every device in a trace file (source lines where it has stacks)."""
    imported = read_trace(path, host=True)
    out = []
    for dev, trace in imported.traces.items():
        lo, hi = trace.window()
        out.append(
            DeviceDiagnosis(
                file=imported.path,
                device=dev,
                steps=len(trace.steps),
                span_ms=(hi - lo) / 1e3,
                findings=diagnose(trace, model_files=model_files),
                skipped=imported.skipped,
            )
        )
    return out


def map_trace_files(
    paths: Iterable[str | os.PathLike], per_file: Callable[[str | os.PathLike], list[_Result]]
) -> list[_Result]:
    """``per_file`` applied to each trace file in turn, the per-device results in one list.

    Raises:
        TraceFileError: a file is unreadable or not a trace; the message is the reader's.

    Example:
        >>> map_trace_files(["rank0.json.gz", "rank1.json.gz"], diagnose_trace_file)  # doctest: +SKIP
    """
    results: list[_Result] = []
    for path in paths:
        try:
            results.extend(per_file(path))
        except (TraceFormatError, OSError) as exc:
            raise TraceFileError(str(exc)) from None
    return results
