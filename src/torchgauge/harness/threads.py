"""Thread settings of a measurement, and how busy the machine was with other work meanwhile.

On a CPU that other processes also use, every intra-op parallel region waits for its
slowest thread; a thread that was descheduled makes the whole operator wait a scheduler
tick. Two intra-op threads on two shared cores gave process medians 10-20x apart (issue
17); one thread per process is stable (docs/regression-detection.md, "Thread settings",
has the measurements). So a CPU measurement runs with :data:`DEFAULT_INTRA_OP_THREADS`
intra-op threads unless told otherwise, records what it actually ran with, and records how
many CPUs other processes kept busy while it ran (``/proc/stat`` deltas minus this
process's own CPU time), so an oversubscribed measurement is marked in its record.

Applying settings is a process-wide side effect (``torch.set_num_threads``, the CPU
affinity); it is done once per worker process by the runner (:func:`apply_thread_settings`),
never by :func:`torchgauge.measure` itself.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALLOCATOR_ENV_VARS",
    "DEFAULT_INTRA_OP_THREADS",
    "DEFAULT_INTER_OP_THREADS",
    "OVERSUBSCRIBED_MARGIN_CPUS",
    "THREAD_ENV_VARS",
    "CpuSnapshot",
    "ThreadSettings",
    "apply_thread_settings",
    "cpu_snapshot",
    "others_busy_cpus",
    "parse_threads",
    "thread_record",
]

# Intra-op threads of a measurement unless --threads says otherwise: one thread never waits
# for a descheduled peer, so its process medians stay within the ordinary 10-15% on a loaded
# 2-core machine, where torch's default (one per core) spread them 10-20x (issue 17, item 1).
DEFAULT_INTRA_OP_THREADS = 1
# Inter-op threads (torch.jit fork/wait, the autograd engine's CPU queue): one for the same reason.
DEFAULT_INTER_OP_THREADS = 1
# A measurement is oversubscribed when its threads plus the CPUs busy with other work exceed
# the CPUs it may run on by more than this (a fraction of a CPU is background noise).
OVERSUBSCRIBED_MARGIN_CPUS = 0.5
# Environment variables that change how torch's thread pools behave; recorded and part of
# every cache key.
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "KMP_BLOCKTIME",
    "KMP_AFFINITY",
    "MKL_NUM_THREADS",
)

# Environment variables that change how the C allocator holds and returns memory (glibc's
# tunables, a preloaded jemalloc or tcmalloc): fixing glibc's thresholds moved peak RSS by up to
# 16% and step time by 0.7-2.5x (docs/regression-detection.md, "Allocator settings tried"), so a
# record keeps them beside the thread variables.
ALLOCATOR_ENV_VARS = (
    "MALLOC_ARENA_MAX",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_MAX_",
    "GLIBC_TUNABLES",
    "LD_PRELOAD",
)


@dataclass(frozen=True)
class ThreadSettings:
    """The thread settings to apply in a worker process."""

    intra_op: int  # torch.set_num_threads
    inter_op: int = DEFAULT_INTER_OP_THREADS  # torch.set_num_interop_threads (once per process)
    pin: bool = False  # restrict the process to `intra_op` CPUs of its affinity set (the last ones)

    def __post_init__(self) -> None:
        if self.intra_op < 1 or self.inter_op < 1:
            raise ValueError(f"thread counts must be >= 1; got intra-op {self.intra_op}, inter-op {self.inter_op}")


def parse_threads(text: str | int | None) -> int | None:
    """``--threads``: a positive integer, or ``all`` (None: one per CPU of the affinity set).

    Raises:
        ValueError: a one-line message naming the accepted forms.
    """
    if text is None or str(text).strip().lower() == "all":
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"invalid thread count {text!r}; accepted: a positive integer, or 'all' (one per CPU)")
    return value


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def apply_thread_settings(settings: ThreadSettings) -> None:
    """Set torch's thread pools (and the CPU affinity when pinning) for this process.

    ``OMP_NUM_THREADS`` is set to the intra-op count too, so that child processes and
    libraries reading it agree. Inter-op threads can only be set before the first inter-op
    work of a process; when that already happened the value stays and the record shows it.
    """
    import torch

    if settings.pin:
        cpus = _affinity()
        os.sched_setaffinity(0, set(cpus[-settings.intra_op :]))
    os.environ["OMP_NUM_THREADS"] = str(settings.intra_op)
    torch.set_num_threads(settings.intra_op)
    try:
        if torch.get_num_interop_threads() != settings.inter_op:
            torch.set_num_interop_threads(settings.inter_op)
    except RuntimeError:  # "cannot set number of interop threads after parallel work has started"
        pass


@dataclass(frozen=True)
class CpuSnapshot:
    """Machine-wide busy CPU time and this process's CPU time at one instant."""

    wall_s: float
    machine_busy_s: float | None  # None where /proc/stat is unavailable
    own_cpu_s: float
    load_avg: float | None  # 1-minute load average


def cpu_snapshot() -> CpuSnapshot:
    """Read ``/proc/stat``'s aggregate busy time, this process's CPU time and the load average."""
    busy = None
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:]]
        # user nice system idle iowait irq softirq steal [guest guest_nice, already in user/nice]
        busy_ticks = sum(fields[i] for i in (0, 1, 2, 5, 6, 7) if i < len(fields))
        busy = busy_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return CpuSnapshot(time.monotonic(), busy, time.process_time(), load)


def others_busy_cpus(start: CpuSnapshot, end: CpuSnapshot) -> float | None:
    """CPUs kept busy by other processes between two snapshots (machine busy time minus ours)."""
    wall = end.wall_s - start.wall_s
    if start.machine_busy_s is None or end.machine_busy_s is None or wall <= 0.05:
        return None  # a window shorter than a few scheduler ticks says nothing
    others = (end.machine_busy_s - start.machine_busy_s) - (end.own_cpu_s - start.own_cpu_s)
    return round(max(0.0, others / wall), 2)


def thread_record(start: CpuSnapshot, timed: CpuSnapshot, end: CpuSnapshot) -> dict[str, Any]:
    """The ``threads`` block of a run record: settings in effect and the machine's load.

    Args:
        start: before warm-up; timed: after warm-up, before the timed steps; end: after them.
    """
    import torch

    cpus = _affinity()
    intra = torch.get_num_threads()
    busy_start, busy_timed = others_busy_cpus(start, timed), others_busy_cpus(timed, end)
    busy = [b for b in (busy_start, busy_timed, others_busy_cpus(start, end)) if b is not None]
    if not busy and end.load_avg is not None:  # windows too short to read: the load average (which counts us)
        busy = [max(0.0, end.load_avg - intra)]
    return {
        "intra_op": intra,
        "inter_op": torch.get_num_interop_threads(),
        "env": {k: os.environ[k] for k in (*THREAD_ENV_VARS, *ALLOCATOR_ENV_VARS) if k in os.environ},
        "affinity": cpus,
        "cpu_count": os.cpu_count(),
        "others_busy_start": busy_start,  # average over the warm-up
        "others_busy_timed": busy_timed,  # average over the timed steps (None: too short to read)
        "load_avg_start": start.load_avg,
        "load_avg_end": end.load_avg,
        "oversubscribed": bool(busy) and intra + max(busy) > len(cpus) + OVERSUBSCRIBED_MARGIN_CPUS,
    }
