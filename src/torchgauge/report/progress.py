"""Progress of a long suite: done/total, an ETA from the finished runs, a summary by status.

Pure bookkeeping (the clock is injected), no printing: ``torchgauge run`` prints the lines
this module formats, one per finished run, so piped output (CI logs, ``| tee``) shows how
far the suite is, which a progress bar on a terminal cannot do there.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ..results.schema import STATUSES, RunRecord

__all__ = ["REASON_CHARS", "SuiteProgress", "format_duration"]

# A failed run's count line ends with this much of its error's last line (the table has more).
REASON_CHARS = 100


def format_duration(seconds: float) -> str:
    """``42s``, ``7m02s``, ``1h23m``: compact, fixed meaning, no locale."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class SuiteProgress:
    """Counts of a running suite of ``total`` planned runs.

    The ETA is the elapsed time per finished run times the runs left: it needs no model of
    parallelism (with ``--jobs`` the elapsed time already reflects it) and it follows a
    machine that gets busier, unlike a figure fixed at the start.
    """

    total: int
    clock: Callable[[], float] = time.monotonic
    started: float = field(default=-1.0)
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def add(self, record: RunRecord) -> None:
        """Count one finished run."""
        self.counts[record.status] += 1

    def elapsed_s(self) -> float:
        return self.clock() - self.started

    def eta_s(self) -> float | None:
        """Seconds until the last planned run ends; None before the first one finished."""
        if not self.done:
            return None
        return self.elapsed_s() / self.done * max(0, self.total - self.done)

    def count_line(self, record: RunRecord) -> str:
        """``[12/336] resnet50 eval ok 3.1 ms (2.4s) eta 6m10s``, for the run just added."""
        width = len(str(self.total))
        time_ms = (record.metrics.get("time_ms") or {}).get("median")
        median = f"{time_ms:.3f} ms" if time_ms is not None else ""
        eta = self.eta_s()
        tail = f"eta {format_duration(eta)}" if eta else "done"
        reason = ""
        if record.status != "ok" and record.error:
            reason = "  " + record.error.strip().splitlines()[-1][:REASON_CHARS]
        return (
            f"[{self.done:>{width}}/{self.total}] {record.config.model:<32} {record.config.mode:<5} "
            f"{median:>14}  {record.status:<11} ({record.wall_s:.1f}s)  {tail}{reason}"
        )

    def summary(self) -> str:
        """``336 of 336 runs in 7m02s: 328 ok, 8 unsupported`` (statuses in schema order)."""
        order = [s for s in STATUSES if self.counts.get(s)] + sorted(set(self.counts) - set(STATUSES))
        by_status = ", ".join(f"{self.counts[s]} {s}" for s in order) or "none finished"
        missing = f"; {self.total - self.done} not run" if self.done < self.total else ""
        return f"{self.done} of {self.total} runs in {format_duration(self.elapsed_s())}: {by_status}{missing}"
