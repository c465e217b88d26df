"""Claim whole CPU cores on a machine so that two runs never share one.

Ray counts CPUs but does not pin tasks to cores, and several Ray nodes (or several runners)
may share one machine. Each core has a lock file under ``$TMPDIR/torchgauge-cores``; a run
holds ``flock`` on the cores it uses for as long as it runs. The kernel drops the locks of a
process that dies, so a lost task never leaks its cores.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CORE_LOCK_DIR_ENV", "CoresUnavailable", "claim_cores"]

# Environment variable overriding the lock directory (every runner on a machine must agree).
CORE_LOCK_DIR_ENV = "TORCHGAUGE_CORE_LOCK_DIR"
# How often a run waiting for free cores tries again.
CLAIM_POLL_S = 0.1


class CoresUnavailable(RuntimeError):
    """Not enough free cores within the waiting time."""


def _lock_dir() -> Path:
    path = Path(os.environ.get(CORE_LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "torchgauge-cores")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def claim_cores(count: int, *, timeout_s: float) -> Iterator[tuple[int, ...]]:
    """Hold ``count`` cores of this process's CPU set that no other claimant holds.

    Waits up to ``timeout_s`` for cores to free up (a node that declares more CPUs than the
    machine has makes runs wait instead of sharing cores).

    Raises:
        CoresUnavailable: ``count`` exceeds the cores this process may use, or they did not
            free up in time.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if not 1 <= count <= len(allowed):
        raise CoresUnavailable(
            f"cannot claim {count} cores; this machine offers {len(allowed)} (accepted: 1..{len(allowed)})"
        )
    lock_dir = _lock_dir()
    deadline = time.monotonic() + timeout_s
    while True:
        held: dict[int, int] = {}
        for core in allowed:
            fd = _try_lock(lock_dir / f"cpu{core}.lock")
            if fd is not None:
                held[core] = fd
                if len(held) == count:
                    break
        if len(held) == count:
            break
        # All or nothing: two runs each holding part of what they need would wait forever.
        _release(held)
        if time.monotonic() > deadline:
            raise CoresUnavailable(
                f"waited {timeout_s:g} s for {count} free cores of {len(allowed)}; at most {len(held)} were free"
            )
        time.sleep(CLAIM_POLL_S)
    try:
        yield tuple(sorted(held))
    finally:
        _release(held)


def _release(held: dict[int, int]) -> None:
    for fd in held.values():
        os.close(fd)  # closing the descriptor drops its flock
