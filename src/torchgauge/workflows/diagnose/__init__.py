"""``diagnose_model``: build a workload, profile it with Python stacks, apply the bug-finder rules.

Glue between measuring (:mod:`torchgauge.harness.profile`) and judging
(:mod:`torchgauge.workflows.diagnose.rules`); the ``diagnose`` command is a thin layer over it. It
runs in this process (diagnosis is interactive; a crash is the user's to see).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DIAGNOSE_STEPS", "DIAGNOSE_WARMUP", "Diagnosis", "diagnose_model", "diagnose_modes"]

# Profiled steps: the rules need recurrence (a bug in the step shows up every step).
DIAGNOSE_STEPS = 5
# Untimed steps first: lazy initialisation, allocator growth and autotuning stay out.
DIAGNOSE_WARMUP = 2


@dataclass
class Diagnosis:
    """Findings for one model in one mode on one device."""

    model: str
    mode: str
    device: str
    size: str
    batch_size: int
    steps: int
    span_ms: float  # profiled wall time of all steps
    findings: list = field(default_factory=list)  # of rules.Finding
    model_files: tuple[str, ...] = ()
    trace_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "mode": self.mode,
            "device": self.device,
            "size": self.size,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "span_ms": self.span_ms,
            "model_files": list(self.model_files),
            "trace_path": self.trace_path,
            "findings": [f.to_dict() for f in self.findings],
        }


def diagnose_model(
    name: str,
    mode: str = "train",
    device: str = "cpu",
    *,
    size: str = "full",
    batch_size: int | None = None,
    steps: int = DIAGNOSE_STEPS,
    warmup: int = DIAGNOSE_WARMUP,
    profile_dir: str | None = None,
    seed: int = 0,
) -> Diagnosis:
    """Profile ``steps`` iterations of a registered model and return the findings.

    Raises:
        UnsupportedError: the model does not run in ``mode`` on ``device``.

    Example:
        >>> d = diagnose_model("resnet18", "train", size="smoke")  # doctest: +SKIP
        >>> [f.rule for f in d.findings]  # doctest: +SKIP
    """
    from ...harness.profile import profile_for_diagnosis, trace_file_path
    from ...registry import create, get_builder
    from .rules import diagnose

    workload = create(name, mode=mode, device=device, batch_size=batch_size, size=size, seed=seed)
    trace_path = None
    if profile_dir:
        trace_path = str(trace_file_path(profile_dir, f"{name}/{mode}/{device}/diagnose"))
    trace, call_sites, model_files = profile_for_diagnosis(
        workload, steps, warmup=warmup, builder=get_builder(name), trace_path=trace_path
    )
    window = trace.window()
    return Diagnosis(
        model=name,
        mode=mode,
        device=device,
        size=size,
        batch_size=workload.batch_size,
        steps=len(trace.steps),
        span_ms=(window[1] - window[0]) / 1e3,
        findings=diagnose(
            trace,
            model_files=model_files,
            call_lines=call_sites.lines,
            raised=call_sites.raised,
            callers=call_sites.callers,
            direct=call_sites.direct,
        ),
        model_files=model_files,
        trace_path=trace_path,
    )


def diagnose_modes(
    name: str,
    modes: Sequence[str],
    device: str = "cpu",
    *,
    size: str = "full",
    batch_size: int | None = None,
    steps: int = DIAGNOSE_STEPS,
    profile_dir: str | None = None,
    on_event: Callable[[str], None] | None = None,
    on_unsupported: Callable[[str], None] | None = None,
) -> list[Diagnosis]:
    """:func:`diagnose_model` for each of ``modes`` in turn; a mode the model does not support
    is reported to ``on_unsupported`` and left out, ``on_event`` hears each profiling start."""
    from ...workload import UnsupportedError

    results = []
    for mode in modes:
        if on_event:
            on_event(f"profiling {name} {mode} on {device} ({size}, {steps} steps)")
        try:
            results.append(
                diagnose_model(
                    name, mode, device, size=size, batch_size=batch_size, steps=steps, profile_dir=profile_dir
                )
            )
        except UnsupportedError as exc:
            if on_unsupported:
                on_unsupported(f"{name} {mode}: unsupported: {exc}")
    return results
