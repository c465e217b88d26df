"""Which per-step time series ``compare`` tests for a configuration: wall time or process CPU time.

On a shared CPU a process's wall time per step measures its share of the CPU as much as its
code; the process's CPU time per step (``time_ms.cpu_samples``, recorded since the thread
settings were) does not count the time it spent descheduled. With one intra-op thread on a CPU
device it is the step's own work, and it found planted 10% and 25% slowdowns that wall time
missed (docs/regression-detection.md, "Measured detection power"). It is not the step's cost
where other work is not on this process's CPU clock: a GPU's kernels, or several intra-op
threads whose spin-waits count as CPU time. ``auto`` (the default) therefore tests CPU time
where every record of the pair allows it and wall time elsewhere, saying why.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..results.schema import RunRecord
from ..stats.undisturbed import cpu_time_unfit

__all__ = ["DEFAULT_TIME_SIGNAL", "TIME_SIGNALS", "TIME_SIGNAL_CHOICES", "signal_for"]

# Signal -> the last key of the per-step samples path a rank test reads (``time_ms.<key>``).
TIME_SIGNALS = {"wall": "samples", "cpu": "cpu_samples"}
# What a caller may ask for: a signal, or ``auto`` (CPU time where it is the step's cost, else wall).
TIME_SIGNAL_CHOICES = ("auto", *TIME_SIGNALS)
# The signal the docs justify (detection power: CPU time 5/5 planted slowdowns, wall time 0-2/5).
DEFAULT_TIME_SIGNAL = "auto"


def _has_cpu_samples(record: RunRecord) -> bool:
    timing = record.metrics.get("time_ms")
    return isinstance(timing, dict) and bool(timing.get("cpu_samples"))


def _cpu_time_unfit(record: RunRecord) -> str | None:
    """Why this record's CPU time is not its step's cost (None: it is)."""
    return cpu_time_unfit(record.config.device, (record.threads or {}).get("intra_op"))


def signal_for(requested: str, base: Sequence[RunRecord], new: Sequence[RunRecord]) -> tuple[str, str | None]:
    """The signal to test for one configuration's two sides, and why it is not the requested one.

    Args:
        requested: a key of :data:`TIME_SIGNALS`, or ``"auto"``.
        base, new: the configuration's records on each side (one per process).

    Returns:
        ``(signal, note)``: ``note`` is None when ``signal`` is what was asked for (``auto``:
        CPU time); else it says why wall time is tested instead. A side without per-step CPU
        time (records stored before it was recorded) always falls back to wall time.

    Example:
        >>> signal_for("wall", [], [])
        ('wall', None)
    """
    if requested not in TIME_SIGNAL_CHOICES:
        raise ValueError(f"invalid time signal {requested!r}; accepted: {', '.join(TIME_SIGNAL_CHOICES)}")
    if requested == "wall":
        return "wall", None
    records = [*base, *new]
    lacking = [side for side, recs in (("base", base), ("new", new)) if not all(map(_has_cpu_samples, recs))]
    if lacking:
        return "wall", f"no per-step CPU time in the {' and '.join(lacking)} records"
    if requested == "auto":
        unfit = next((why for why in map(_cpu_time_unfit, records) if why), None)
        if unfit:
            return "wall", unfit
    return "cpu", None
