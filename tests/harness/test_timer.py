"""StepTimer with injected fake clocks and event pairs: counts, order, syncs."""

from __future__ import annotations

import pytest

from torchgauge.harness.timer import StepTimer, TimingSamples


class FakeClock:
    """Advances by the step's 'cost' when the step runs; the clock itself costs nothing."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_samples_counted_and_kept_raw() -> None:
    clock = FakeClock()
    costs = iter([100, 200, 300, 10, 20, 30, 40, 50])
    calls = []

    def step():
        calls.append(1)
        clock.now += next(costs)

    s = StepTimer(step, clock=clock).run(repeat=5, warmup=3)
    assert s.warmup_ns == (100, 200, 300)
    assert s.wall_ns == (10, 20, 30, 40, 50)
    assert len(calls) == 8 and s.device_ms is None
    assert s.wall_ms == [1e-5, 2e-5, 3e-5, 4e-5, 5e-5]


def test_sync_brackets_every_step() -> None:
    log = []
    StepTimer(lambda: log.append("step"), sync=lambda: log.append("sync")).run(repeat=2, warmup=1)
    assert log == ["sync", "step", "sync"] * 3


class FakeEvent:
    """A CUDA event stand-in: ``elapsed_time`` is the difference of two ticks."""

    def __init__(self, t):
        self.t = t

    def record(self):
        pass

    def elapsed_time(self, end):
        return end.t - self.t


def test_event_pairs_give_device_times() -> None:
    ticks = iter(range(0, 1000, 3))
    s = StepTimer(lambda: None, events=lambda: (FakeEvent(next(ticks)), FakeEvent(next(ticks)))).run(repeat=4, warmup=0)
    assert s.device_ms == (3.0, 3.0, 3.0, 3.0) and len(s.wall_ns) == 4


def test_invalid_counts() -> None:
    with pytest.raises(ValueError, match="repeat must be >= 1"):
        StepTimer(lambda: None).run(repeat=0)
    with pytest.raises(ValueError, match="warmup must be >= 0"):
        StepTimer(lambda: None).run(repeat=1, warmup=-1)


def test_samples_are_immutable() -> None:
    s = TimingSamples(wall_ns=(1,), warmup_ns=())
    with pytest.raises(AttributeError):
        s.wall_ns = (2,)


def _costed_step(clock: FakeClock, costs: list[int], cpu: FakeClock | None = None):
    it = iter(costs)

    def step():
        cost = next(it)
        clock.now += cost
        if cpu is not None:
            cpu.now += cost // 2  # descheduled half of each step

    return step


def _stable(seen: list):
    def stable(steps_ms):
        seen.append(list(steps_ms))
        return len(steps_ms) >= 2 and abs(steps_ms[-1] - steps_ms[-2]) <= 0.1 * steps_ms[-2]

    return stable


def test_warm_up_stops_when_the_rule_says_so_and_keeps_every_step() -> None:
    clock, cpu = FakeClock(), FakeClock()
    timer = StepTimer(_costed_step(clock, [900, 300, 310, 305, 7, 7], cpu), clock=clock, cpu_clock=cpu)
    seen: list = []
    # steps 2 and 3 agree: warm; the wall and CPU time of every warm-up step are kept
    assert timer.warm_up(5, stop=_stable(seen)) == ((900, 300, 310), (450, 150, 155))
    assert [len(s) for s in seen] == [1, 2, 3] and seen[-1] == [9e-4, 3e-4, 3.1e-4]
    assert timer.warm_up(1, stop=lambda ms: False) == ((305,), (152,))  # the cap holds without a stop
    assert StepTimer(lambda: None, cpu_clock=None).warm_up(2)[1] is None  # no CPU clock: no CPU series


def test_the_rules_may_judge_the_cpu_series() -> None:
    clock, cpu = FakeClock(), FakeClock()
    walls = iter([300, 900, 310, 2000, 4000, 8000])
    cpus = iter([300, 150, 155, 150, 152, 151])  # lazy init in step 1; later waits cost no CPU time

    def step():
        clock.now += next(walls)
        cpu.now += next(cpus)

    timer = StepTimer(step, clock=clock, cpu_clock=cpu)
    seen: list = []
    wall, cpu_ns = timer.warm_up(5, stop=_stable(seen), signal="cpu")
    # on wall time step 3 (310) disagrees with step 2 (900); on CPU time they agree: warm
    assert wall == (300, 900, 310) and cpu_ns == (300, 150, 155) and seen[-1] == [3e-4, 1.5e-4, 1.55e-4]
    s = timer.time_until(lambda n: n >= 3, lambda ms: max(ms) < 1e-3, 10, wall, cpu_ns, signal="cpu")
    assert s.wall_ns == (2000, 4000, 8000) and s.cpu_ns == (150, 152, 151) and s.warmup_cpu_ns == cpu_ns
    with pytest.raises(ValueError, match="accepted: wall, cpu"):
        timer.warm_up(1, stop=_stable([]), signal="device")
    with pytest.raises(ValueError, match="needs the CPU-time series"):
        StepTimer(lambda: None, cpu_clock=None).warm_up(1, stop=_stable([]), signal="cpu")


def test_time_until_keeps_the_cpu_series_as_time_does() -> None:
    clock, cpu = FakeClock(), FakeClock()
    timer = StepTimer(_costed_step(clock, [10, 20, 30, 40, 50, 60, 70], cpu), clock=clock, cpu_clock=cpu)
    s = timer.time_until(lambda n: n >= 2, lambda ms: len(ms) >= 3, max_repeat=10, warmup_ns=(5,))
    assert s.wall_ns == (10, 20, 30) and s.cpu_ns == (5, 10, 15) and s.warmup_ns == (5,)
    fixed = timer.time(2)
    assert fixed.wall_ns == (40, 50) and fixed.cpu_ns == (20, 25)
    capped = timer.time_until(lambda n: True, lambda ms: False, max_repeat=2)
    assert capped.wall_ns == (60, 70) and capped.cpu_ns == (30, 35)


def test_time_until_with_events_gives_device_times() -> None:
    ticks = iter(range(0, 1000, 2))
    timer = StepTimer(lambda: None, events=lambda: (FakeEvent(next(ticks)), FakeEvent(next(ticks))))
    s = timer.time_until(lambda n: True, lambda ms: len(ms) == 3, max_repeat=10)
    assert s.device_ms == (2.0, 2.0, 2.0) and len(s.wall_ns) == 3 and s.cpu_ns is None
