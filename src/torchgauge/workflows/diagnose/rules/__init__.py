"""Performance-bug finder: rules over a profiled pass (TorchBench paper sec. 4.1 case studies).

Pure judging over :class:`~torchgauge.harness.events.ProfileTrace` records (no torch). Each
rule has its thresholds as named constants (:mod:`.thresholds`); each finding names the
operator, how often it happens per step, the time it costs per step and the model source
line it comes from (:mod:`.context` attributes it).

Rules, one module per family:

- ``launch_storm`` (a, :mod:`.launch_storm`): the same short operator pattern repeated back to
  back, every call tiny (the per-parameter ``zero_grad`` loop); suggests the foreach/fused form.
- ``tiny_h2d`` (b) and ``heavy_traffic`` (c, :mod:`.transfers`): tiny host-to-device copies
  inside the step; host-device traffic large in bytes and in time relative to compute.
- ``sync`` (d, :mod:`.syncs`): the host waits for the device inside the step (``.item()``,
  ``nonzero``, printing tensors).
- ``idle_gap`` (e, :mod:`.idle_gaps`): long stretches where the device (CPU: every operator)
  waits for the host.
- ``exception`` (f, :mod:`.exceptions`): operators that raise inside the step and are caught
  in Python (the paper's c10 exception case).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from ....harness.events import ProfileTrace
from . import thresholds
from .context import Callers, CallLines, TraceContext
from .exceptions import rule_exception
from .findings import Finding
from .idle_gaps import rule_idle_gap
from .launch_storm import rule_launch_storm
from .syncs import rule_sync
from .thresholds import *  # noqa: F403 (the thresholds are part of the rules' public names)
from .transfers import rule_heavy_traffic, rule_tiny_h2d

__all__ = ["RULES", "Finding", "diagnose", *thresholds.__all__]

# Rule name -> the function finding it, in the order findings of equal cost are listed.
_RULE_FNS: dict[str, Callable[[TraceContext], list[Finding]]] = {
    "launch_storm": rule_launch_storm,
    "tiny_h2d": rule_tiny_h2d,
    "heavy_traffic": rule_heavy_traffic,
    "sync": rule_sync,
    "idle_gap": rule_idle_gap,
    "exception": rule_exception,
}
RULES = tuple(_RULE_FNS)


def diagnose(
    trace: ProfileTrace,
    *,
    model_files: Sequence[str] = (),
    call_lines: CallLines | None = None,
    raised: CallLines | None = None,
    callers: Callers | None = None,
    direct: CallLines | None = None,
    rules: Iterable[str] = RULES,
) -> list[Finding]:
    """Apply ``rules`` to ``trace``; findings sorted by time cost per step, largest first.

    Args:
        trace: a profiled pass (ideally recorded ``with_stack=True`` for source lines).
        model_files: the model's source files; a finding's source is the innermost frame in
            one of them (else the innermost frame outside torch and torchgauge's harness).
        call_lines: ``CallSites.lines`` from :func:`torchgauge.harness.profile.record_call_sites`,
            to turn a function's first line (what the profiler records) into calling lines.
        raised: ``CallSites.raised``: the calls that raised (the ``exception`` rule needs it).
        direct: ``CallSites.direct``: call lines of the innermost user frame only (so a line
            calling a helper that builds tensors is not taken for one that builds them itself).
        callers: ``CallSites.callers``: the line of the model's function that called a library
            function an operator was reached through (``print(t)``).
        rules: subset of :data:`RULES`.
    """
    ctx = TraceContext(trace, tuple(model_files), call_lines or {}, raised or {}, callers or {}, direct or {})
    found: list[Finding] = []
    for rule in rules:
        if rule not in RULES:
            raise ValueError(f"unknown rule {rule!r}; accepted: {', '.join(RULES)}")
        found.extend(_RULE_FNS[rule](ctx))
    return sorted(found, key=lambda f: -f.time_ms)
