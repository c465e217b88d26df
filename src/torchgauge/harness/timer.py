"""Step timer: warm-up, then ``repeat`` timed calls of one iteration, every sample kept.

Shape of torch.utils.benchmark's ``Timer``: what to run and how to synchronise are fixed at
construction; the clock and the device sync are injected, so the loop is tested on CPU with
fake clocks. Each sample is one ``step()``, bracketed by a device sync so that queued GPU
work is inside the sample. On CUDA, events recorded around the step give the device-side
time as a second series.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["StepTimer", "TimingSamples", "device_sync", "cuda_event_pair_factory"]


@dataclass(frozen=True)
class TimingSamples:
    """Raw timings of one measurement (nanoseconds, one entry per step)."""

    wall_ns: tuple[int, ...]  # timed steps, host clock, sync before and after
    warmup_ns: tuple[int, ...]  # warm-up steps (the first includes lazy init / compilation)
    device_ms: tuple[float, ...] | None = None  # CUDA event time per timed step
    # This process's CPU time per timed step (all its threads). With one intra-op thread it
    # does not grow when other processes deschedule ours, unlike wall time (harness.threads).
    cpu_ns: tuple[int, ...] | None = None

    @property
    def wall_ms(self) -> list[float]:
        return [ns / 1e6 for ns in self.wall_ns]

    @property
    def cpu_ms(self) -> list[float] | None:
        return None if self.cpu_ns is None else [ns / 1e6 for ns in self.cpu_ns]

    @property
    def warmup_ms(self) -> list[float]:
        return [ns / 1e6 for ns in self.warmup_ns]


def device_sync(device: Any) -> Callable[[], None]:
    """A zero-argument function that waits for all queued work on ``device``."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":  # pragma: no cover - no MPS in CI
        return torch.mps.synchronize
    if dev.type == "xpu":  # pragma: no cover
        return lambda: torch.xpu.synchronize(dev)
    return lambda: None


def cuda_event_pair_factory() -> Callable[[], tuple[Any, Any]]:
    """Factory of (start, end) CUDA events with timing enabled."""
    import torch

    return lambda: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))


class StepTimer:
    """Times ``step`` with a device sync around every call.

    Args:
        step: the zero-argument function to time (``Workload.step``).
        sync: waits for queued device work; a no-op on CPU.
        clock: monotonic nanosecond clock.
        events: optional factory of (start, end) event pairs with ``record()`` and
            ``elapsed_time(end)`` in ms (CUDA events); gives ``device_ms``.

    Example:
        >>> t = StepTimer(lambda: sum(range(1000)))
        >>> s = t.run(repeat=5, warmup=1)
        >>> len(s.wall_ns), len(s.warmup_ns)
        (5, 1)
    """

    def __init__(
        self,
        step: Callable[[], Any],
        *,
        sync: Callable[[], None] = lambda: None,
        clock: Callable[[], int] = time.perf_counter_ns,
        events: Callable[[], tuple[Any, Any]] | None = None,
        cpu_clock: Callable[[], int] | None = time.process_time_ns,
    ) -> None:
        self._step = step
        self._sync = sync
        self._clock = clock
        self._events = events
        self._cpu_clock = cpu_clock

    def _timed_call(self) -> int:
        sync, clock, step = self._sync, self._clock, self._step
        sync()
        t0 = clock()
        step()
        sync()
        return clock() - t0

    def warm_up(self, n: int, stop: Callable[[list[float]], bool] | None = None) -> tuple[int, ...]:
        """Run up to ``n`` untimed-for-the-result iterations; their durations are kept for compile cost.

        ``stop(steps_ms)``, asked after each step, ends the warm-up early when it says so
        (:class:`~torchgauge.stats.adaptive.StableWarmup`).
        """
        warm: list[int] = []
        while len(warm) < n:
            warm.append(self._timed_call())
            if stop is not None and stop([ns / 1e6 for ns in warm]):
                break
        return tuple(warm)

    def run(self, repeat: int = 10, warmup: int = 3) -> TimingSamples:
        """Warm up ``warmup`` times, then time ``repeat`` iterations."""
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        warm = self.warm_up(warmup)
        return self.time(repeat, warmup_ns=warm)

    def time_until(
        self,
        should_check: Callable[[int], bool],
        stop: Callable[[list[float]], bool],
        max_repeat: int,
        warmup_ns: tuple[int, ...] = (),
    ) -> TimingSamples:
        """Time iterations until ``stop(samples_ms)`` says so or ``max_repeat`` is reached.

        ``stop`` is asked only when ``should_check(n)`` holds, between steps (never inside a
        sample). The same series as :meth:`time` are kept (CPU time, or CUDA event times).
        """
        return self._sample(max_repeat, warmup_ns, lambda wall: should_check(len(wall)) and stop(_ms(wall)))

    def time(self, repeat: int, warmup_ns: tuple[int, ...] = ()) -> TimingSamples:
        """Time ``repeat`` iterations (no warm-up)."""
        return self._sample(repeat, warmup_ns, None)

    def _sample(
        self, max_repeat: int, warmup_ns: tuple[int, ...], done: Callable[[list[int]], bool] | None
    ) -> TimingSamples:
        """Up to ``max_repeat`` timed steps, fewer once ``done(wall_ns so far)`` holds.

        With CUDA events each step also gets its device time (events are read once at the end,
        so reading them never waits inside the loop); without, the process's CPU time per step.
        """
        wall: list[int] = []
        if self._events is None:
            cpu_clock = self._cpu_clock
            cpu: list[int] = []
            while len(wall) < max_repeat:
                c0 = cpu_clock() if cpu_clock is not None else 0
                wall.append(self._timed_call())
                if cpu_clock is not None:
                    cpu.append(cpu_clock() - c0)
                if done is not None and done(wall):
                    break
            cpu_ns = tuple(cpu) if cpu_clock is not None else None
            return TimingSamples(wall_ns=tuple(wall), warmup_ns=warmup_ns, cpu_ns=cpu_ns)
        pairs = []
        sync, clock, step = self._sync, self._clock, self._step
        while len(wall) < max_repeat:
            start, end = self._events()
            sync()
            t0 = clock()
            start.record()
            step()
            end.record()
            sync()
            wall.append(clock() - t0)
            pairs.append((start, end))
            if done is not None and done(wall):
                break
        device = tuple(float(s.elapsed_time(e)) for s, e in pairs)
        return TimingSamples(wall_ns=tuple(wall), warmup_ns=warmup_ns, device_ms=device)


def _ms(ns: list[int]) -> list[float]:
    return [x / 1e6 for x in ns]
