"""``measure_run(workload, config)``: the timed pass plus any extra metric passes, as a run record.

This is the one function the library surface, the CLI and the isolated runner all use (the
library's ``measure(workload, repeat, warmup)`` builds the configuration, then calls it):
warm-up, a memory window opened after warm-up, ``repeat`` timed steps with device syncs,
then each extra metric in its own pass (so profilers and counters never touch the timed
samples).

A training run whose parameters hold NaN or infinity after the timed steps diverged (pure
fp16 with Adam is the usual cause): its timings describe NaN arithmetic, so the record keeps
them but gets status ``fail_accuracy`` with the reason, instead of passing as ``ok``.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .harness.memory import MemoryProbe
from .harness.metrics import TIMED_PASS_METRICS, get_metric, validate_metrics
from .harness.threads import cpu_snapshot, thread_record
from .harness.timer import StepTimer, TimingSamples, cuda_event_pair_factory, device_sync
from .results.schema import RunConfig, RunRecord
from .stats.adaptive import AdaptiveRule, StableWarmup
from .stats.summary import summarize
from .stats.undisturbed import cpu_time_unfit, undisturbed_median, undisturbed_steps

if TYPE_CHECKING:  # pragma: no cover
    from .workload import Workload

__all__ = [
    "adaptive_rule",
    "config_for",
    "judged_signal",
    "measure",
    "measure_run",
    "nonfinite_parameters",
    "timing_metrics",
    "warmup_rule",
]


def timing_metrics(samples: TimingSamples) -> dict[str, Any]:
    """The ``time_ms`` record: every sample plus derived summary statistics."""
    wall = samples.wall_ms
    s = summarize(wall)
    out: dict[str, Any] = {
        "samples": wall,
        "median": s.median,
        "min": s.min,
        "max": s.max,
        "iqr": s.iqr,
        "q1": s.q1,
        "q3": s.q3,
        "mean": s.mean,
        "stdev": s.stdev,
        "ci_low": s.ci_low,
        "ci_high": s.ci_high,
        "noisy": s.noisy,
        "warmup_samples": samples.warmup_ms,
    }
    if samples.warmup_cpu_ns is not None:
        out["warmup_cpu_samples"] = samples.warmup_cpu_ms
    if samples.cpu_ms is not None:
        out["cpu_samples"] = samples.cpu_ms
        out["cpu_median"] = summarize(samples.cpu_ms).median
        # Steps whose CPU time is near their wall time held the CPU (one intra-op thread): the
        # share of them says how much of the timed pass was descheduled (stats.undisturbed).
        held = undisturbed_steps(wall, samples.cpu_ms)
        out["undisturbed_fraction"] = round(len(held) / len(wall), 3) if wall else None
        out["undisturbed_median"] = undisturbed_median(wall, samples.cpu_ms)
    if samples.device_ms is not None:
        out["device_samples"] = list(samples.device_ms)
        out["device_median"] = summarize(samples.device_ms).median
    return out


def _collect_extra(name: str, workload: Workload, config: RunConfig, measured: dict[str, Any]) -> None:
    """Run one extra metric's pass; a metric that fails or cannot run is noted, never fatal.

    The timings already measured stand: the failure goes to ``metrics["metric_errors"][name]``
    (``"unsupported: <reason>"`` or ``"<ExceptionType>: <message>"``).
    """
    from .workload import UnsupportedError

    try:
        measured.update(get_metric(name).collect(workload, config, measured))
    except UnsupportedError as exc:
        measured.setdefault("metric_errors", {})[name] = f"unsupported: {exc}"
    except Exception as exc:  # any failure of an optional pass is reported, not raised
        measured.setdefault("metric_errors", {})[name] = f"{type(exc).__name__}: {exc}"


def config_for(workload: Workload, repeat: int, warmup: int, metrics: Iterable[str]) -> RunConfig:
    """The RunConfig describing an already built workload (library use of ``measure``)."""
    ctx = workload.ctx
    return RunConfig(
        model=ctx.name,
        mode=ctx.mode,
        device=str(ctx.device),
        batch_size=ctx.batch_size,
        size=ctx.size,
        repeat=repeat,
        warmup=warmup,
        seed=ctx.seed,
        metrics=tuple(metrics),
    )


def nonfinite_parameters(workload: Workload) -> list[str]:
    """Names of the module's floating-point parameters that hold a NaN or an infinity.

    Every process of a training run checks its own parameters (its timings are what the check
    vouches for), so the check must cost little beside a step: a real parameter is finite exactly
    when its minimum and maximum are (``aminmax`` propagates NaN), one read of the tensor with
    nothing allocated; ``isfinite(p).all()`` allocated a mask of every element and cost
    3.7-5.1 s of CPU on dlrm's 514M full-size parameters against 0.26-0.28 s (a step: 0.9-1.2 s).
    """
    import torch

    named = [(n, p) for n, p in workload.module.named_parameters() if p.is_floating_point() or p.is_complex()]
    if not named:
        return []
    with torch.no_grad():
        finite = torch.stack([_all_finite(p.detach()) for _, p in named]).tolist()  # one device sync
    return [n for (n, _), ok in zip(named, finite) if not ok]


def _all_finite(tensor: Any) -> Any:
    """A 0-d bool tensor: every element of ``tensor`` is finite (judged in its own dtype)."""
    import torch

    if tensor.numel() == 0:
        return torch.ones((), dtype=torch.bool, device=tensor.device)
    if tensor.is_complex() or tensor.layout != torch.strided:  # aminmax takes real dense tensors
        return torch.isfinite(tensor.to_dense() if tensor.layout != torch.strided else tensor).all()
    low, high = torch.aminmax(tensor)
    return torch.isfinite(low) & torch.isfinite(high)


def _divergence_reason(workload: Workload, steps: int, precision: str) -> str | None:
    bad = nonfinite_parameters(workload)
    if not bad:
        return None
    shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    return (
        f"training diverged: {len(bad)} parameter tensors hold NaN/inf after {steps} {precision} train steps "
        f"({shown}); the timings describe NaN arithmetic"
    )


def adaptive_rule(config: RunConfig) -> AdaptiveRule | None:
    """The run's adaptive-repeat rule (``options.adaptive``: target and max_repeat; the
    config's ``repeat`` is the minimum), or None for a fixed ``repeat``."""
    spec = config.options.adaptive
    if spec is None:
        return None
    return AdaptiveRule(target=float(spec.target), min_repeat=config.repeat, max_repeat=spec.max_repeat)


def warmup_rule(config: RunConfig) -> StableWarmup | None:
    """The run's warm-up rule (``options.stable_warmup``: the tolerance; the config's ``warmup``
    is the maximum), or None for exactly ``warmup`` warm-up steps."""
    tolerance = config.options.stable_warmup
    if tolerance is None:
        return None
    return StableWarmup(tolerance=float(tolerance), max_warmup=config.warmup)


def judged_signal(device: Any) -> str:
    """The series the warm-up and repeat rules judge: ``cpu`` (the process's CPU time per step)
    where it is the step's cost, a CPU device with one intra-op thread, as ``compare
    --time-signal auto`` tests it there (stats.undisturbed.cpu_time_unfit); else ``wall``.

    On a shared machine a wall-time interval measures the load as much as the step: at load
    4-6 on 2 cores every full-size configuration of docs/performance.md's side-by-side ran to
    the cap with wall-time intervals 14-200% wide.
    """
    import torch

    return "cpu" if cpu_time_unfit(str(device), torch.get_num_threads()) is None else "wall"


def _time_adaptively(
    timer: StepTimer, rule: AdaptiveRule, warm: tuple[int, ...], warm_cpu: tuple[int, ...] | None, signal: str
) -> TimingSamples:
    checkpoint = rule.min_repeat

    def should_check(n: int) -> bool:
        nonlocal checkpoint
        if n < checkpoint:
            return False
        checkpoint = rule.next_check(n)
        return True

    def stop(ms: list[float]) -> bool:
        return rule.stop_reason(ms) is not None

    return timer.time_until(should_check, stop, rule.max_repeat, warm, warm_cpu, signal=signal)


def measure(
    workload: Workload,
    repeat: int = 10,
    warmup: int = 3,
    *,
    metrics: Iterable[str] = ("time", "memory"),
) -> RunRecord:
    """Measure ``workload`` in this process (the library path; the runner uses :func:`measure_run`).

    Args:
        workload: from :func:`torchgauge.create`.
        repeat: timed iterations; every sample is kept.
        warmup: untimed iterations first (lazy init, autotuning, compilation).
        metrics: names from :func:`torchgauge.harness.metrics.list_metrics`.

    Returns:
        A :class:`~torchgauge.results.schema.RunRecord` with ``metrics["time_ms"]``
        (``samples``, ``median``, ``min``, ``max``, ``iqr``, ...) and memory fields, whose
        configuration describes the workload as built (:func:`config_for`).

    Example:
        >>> w = torchgauge.create("resnet18", mode="eval", size="smoke")  # doctest: +SKIP
        >>> torchgauge.measure(w, repeat=10).metrics["time_ms"]["median"]  # doctest: +SKIP
    """
    return measure_run(workload, config_for(workload, repeat, warmup, metrics))


def measure_run(workload: Workload, config: RunConfig) -> RunRecord:
    """Measure ``workload`` as ``config`` says (``repeat``, ``warmup``, ``metrics``, adaptive
    options) and record it under that configuration.

    Args:
        workload: built (and configured) for ``config``.
        config: the run configuration; the record carries it unchanged.

    Returns:
        The run's :class:`~torchgauge.results.schema.RunRecord` (see :func:`measure`).
    """
    repeat, warmup = config.repeat, config.warmup
    names = validate_metrics(tuple(config.metrics))
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    device = workload.device
    timer = StepTimer(
        workload.step,
        sync=device_sync(device),
        events=cuda_event_pair_factory() if device.type == "cuda" else None,
    )
    measured: dict[str, Any] = {}
    # Attached by torchgauge.backends for compiled backends: compilation must happen in warm-up.
    compile_probe = workload.compile_probe
    if compile_probe is not None and warmup < 1:
        raise ValueError(
            f"{workload.name} is compiled ({compile_probe.backend}) and compiles in warm-up; accepted: warmup >= 1"
        )
    at_start = cpu_snapshot()
    t_warm = time.perf_counter()
    warm_rule, rule = warmup_rule(config), adaptive_rule(config)
    signal = judged_signal(device) if warm_rule is not None or rule is not None else "wall"
    warm_stop = None if warm_rule is None else lambda ms: warm_rule.stop_reason(ms) is not None
    warm, warm_cpu = timer.warm_up(warmup, stop=warm_stop, signal=signal)
    t_timed = time.perf_counter()
    at_timed = cpu_snapshot()
    if compile_probe is not None:
        compile_probe.mark_warm()
    timed_ms: list[float] | None = None
    if "time" in names or "memory" in names:
        probe = MemoryProbe(device.type)
        probe.start()
        if rule is None:
            samples = timer.time(repeat, warmup_ns=warm, warmup_cpu_ns=warm_cpu)
        else:
            samples = _time_adaptively(timer, rule, warm, warm_cpu, signal)
        timed_ms = samples.wall_ms
        if "time" in names:
            measured["time_ms"] = timing_metrics(samples)
            if rule is not None:
                judged = samples.cpu_ms if signal == "cpu" else timed_ms
                measured["time_ms"]["stopping"] = rule.record(judged, rule.stop_reason(judged), signal)
            if warm_rule is not None:
                judged = samples.warmup_cpu_ms if signal == "cpu" else samples.warmup_ms
                measured["time_ms"]["warmup_stopping"] = warm_rule.record(judged, warm_rule.stop_reason(judged), signal)
        if "memory" in names:
            measured.update(probe.read())
    at_end = cpu_snapshot()  # before the extra passes, whose own load is not the measurement's
    if compile_probe is not None:  # before the extra passes, which may trigger recompiles
        measured["compile"] = compile_probe.read([ns / 1e6 for ns in warm], timed_ms)
    t_extra = time.perf_counter()
    steps = len(warm) + (len(timed_ms) if timed_ms is not None else 0)
    diverged = _divergence_reason(workload, steps, config.precision) if workload.mode == "train" else None
    for name in names:
        if name not in TIMED_PASS_METRICS:
            _collect_extra(name, workload, config, measured)
    t_end = time.perf_counter()
    phases = {"warmup": t_timed - t_warm, "timed": t_extra - t_timed, "extra": t_end - t_extra}
    return RunRecord(
        phases_s={k: round(v, 4) for k, v in phases.items()},
        config=config,
        status="fail_accuracy" if diverged else "ok",
        domain=workload.ctx.domain,
        metrics=measured,
        error=diverged,
        batch_size=workload.batch_size,
        started_at=started,
        wall_s=round(time.perf_counter() - t_start, 3),
        threads=thread_record(at_start, at_timed, at_end),
    )
