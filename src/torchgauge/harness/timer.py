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
    warmup_cpu_ns: tuple[int, ...] | None = None  # CPU time per warm-up step, as cpu_ns

    @property
    def wall_ms(self) -> list[float]:
        return [ns / 1e6 for ns in self.wall_ns]

    @property
    def cpu_ms(self) -> list[float] | None:
        return None if self.cpu_ns is None else [ns / 1e6 for ns in self.cpu_ns]

    @property
    def warmup_ms(self) -> list[float]:
        return [ns / 1e6 for ns in self.warmup_ns]

    @property
    def warmup_cpu_ms(self) -> list[float] | None:
        return None if self.warmup_cpu_ns is None else [ns / 1e6 for ns in self.warmup_cpu_ns]


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

    def warm_up(
        self, n: int, stop: Callable[[list[float]], bool] | None = None, signal: str = "wall"
    ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """Run up to ``n`` untimed-for-the-result iterations: their wall and CPU times (ns; CPU
        None without a CPU clock or with events), kept for compile cost and the warm-up rule.

        ``stop(steps_ms)``, asked after each step with the ``signal`` series (``wall`` or
        ``cpu``), ends the warm-up early when it says so
        (:class:`~torchgauge.stats.adaptive.StableWarmup`).
        """
        wall, cpu, _ = self._sample(n, _asking(stop, signal, self._has_cpu_series()), events=False)
        return tuple(wall), None if cpu is None else tuple(cpu)

    def run(self, repeat: int = 10, warmup: int = 3) -> TimingSamples:
        """Warm up ``warmup`` times, then time ``repeat`` iterations."""
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        warm, warm_cpu = self.warm_up(warmup)
        return self.time(repeat, warmup_ns=warm, warmup_cpu_ns=warm_cpu)

    def time_until(
        self,
        should_check: Callable[[int], bool],
        stop: Callable[[list[float]], bool],
        max_repeat: int,
        warmup_ns: tuple[int, ...] = (),
        warmup_cpu_ns: tuple[int, ...] | None = None,
        signal: str = "wall",
    ) -> TimingSamples:
        """Time iterations until ``stop(samples_ms)`` says so or ``max_repeat`` is reached.

        ``stop`` sees the ``signal`` series (``wall`` or ``cpu``) and is asked only when
        ``should_check(n)`` holds, between steps (never inside a sample). The same series as
        :meth:`time` are kept (CPU time, or CUDA event times).
        """
        ask = _asking(stop, signal, self._has_cpu_series())
        done = None if ask is None else lambda wall, cpu: should_check(len(wall)) and ask(wall, cpu)
        return self._samples(max_repeat, done, warmup_ns, warmup_cpu_ns)

    def time(
        self, repeat: int, warmup_ns: tuple[int, ...] = (), warmup_cpu_ns: tuple[int, ...] | None = None
    ) -> TimingSamples:
        """Time ``repeat`` iterations (no warm-up)."""
        return self._samples(repeat, None, warmup_ns, warmup_cpu_ns)

    def _has_cpu_series(self) -> bool:
        return self._events is None and self._cpu_clock is not None

    def _samples(self, max_repeat: int, done, warmup_ns, warmup_cpu_ns) -> TimingSamples:
        wall, cpu, device = self._sample(max_repeat, done, events=self._events is not None)
        return TimingSamples(
            wall_ns=tuple(wall),
            warmup_ns=warmup_ns,
            device_ms=device,
            cpu_ns=None if cpu is None else tuple(cpu),
            warmup_cpu_ns=warmup_cpu_ns,
        )

    def _sample(
        self, max_repeat: int, done: Callable[[list[int], list[int] | None], bool] | None, *, events: bool
    ) -> tuple[list[int], list[int] | None, tuple[float, ...] | None]:
        """Up to ``max_repeat`` steps, fewer once ``done(wall_ns, cpu_ns)`` holds: (wall, CPU, device ms).

        With CUDA events each step also gets its device time (events are read once at the end,
        so reading them never waits inside the loop); without, the process's CPU time per step.
        """
        wall: list[int] = []
        if not events:
            cpu_clock = self._cpu_clock
            cpu: list[int] | None = None if cpu_clock is None else []
            while len(wall) < max_repeat:
                c0 = cpu_clock() if cpu_clock is not None else 0
                wall.append(self._timed_call())
                if cpu is not None:
                    cpu.append(cpu_clock() - c0)
                if done is not None and done(wall, cpu):
                    break
            return wall, cpu, None
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
            if done is not None and done(wall, None):
                break
        return wall, None, tuple(float(s.elapsed_time(e)) for s, e in pairs)


def _asking(
    stop: Callable[[list[float]], bool] | None, signal: str, has_cpu: bool
) -> Callable[[list[int], list[int] | None], bool] | None:
    """``stop`` asked with the ``signal`` series in ms, as the sampling loop calls it."""
    if signal not in ("wall", "cpu"):
        raise ValueError(f"invalid signal {signal!r}; accepted: wall, cpu")
    if signal == "cpu" and not has_cpu:
        raise ValueError("signal 'cpu' needs the CPU-time series (a CPU clock and no CUDA events)")
    if stop is None:
        return None
    if signal == "cpu":
        return lambda wall, cpu: stop([ns / 1e6 for ns in cpu])
    return lambda wall, cpu: stop([ns / 1e6 for ns in wall])
