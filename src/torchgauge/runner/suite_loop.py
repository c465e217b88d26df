"""The suite loop: pre-checks, worker groups, jobs at once, and each record handed on as it ends.

A model that raises, segfaults, exits, hangs or runs out of memory becomes a status
(``error``, ``oom``, ``timeout``, ``unsupported``, ``skipped``) and the suite goes on; every
finished run reaches ``on_result`` at once (the CLI writes it to disk there), so nothing
measured is lost to a later crash or Ctrl-C. Each record's domain comes from the one
registry lookup of the pre-check.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import multiprocessing as mp
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from ..results.schema import RunConfig, RunRecord
from .execution import execute
from .options import ISOLATIONS, RunnerOptions, threads_in_this_process
from .worker_process import Worker

__all__ = ["POLL_INTERVAL_S", "PRELOAD_ENV", "PRELOAD_MODULES", "run_suite"]

# How often the parent checks a worker's liveness, deadline and memory.
POLL_INTERVAL_S = 0.05
# Modules the forkserver imports once so that every worker starts warm.
PRELOAD_MODULES = ["torchgauge._preload"]
# The selected models' own heavy imports (ModelSpec.preload), comma-separated, for _preload.
PRELOAD_ENV = "TORCHGAUGE_PRELOAD"

# run_suite's default options; RunnerOptions is frozen, so one shared instance is safe.
_DEFAULT_OPTIONS = RunnerOptions()


def _precheck(config: RunConfig) -> tuple[str, RunRecord | None]:
    """The model's domain ("" for an unknown model) and, when it is decided without starting a
    worker (unknown model, unsupported mode or device), the run's record.

    This is the run's one registry lookup in the parent: every record of the run gets this domain.
    """
    from ..registry import UnknownModelError, get_spec

    try:
        spec = get_spec(config.model)
    except UnknownModelError as exc:
        return "", RunRecord(config, "error", error=str(exc))
    if config.mode not in spec.modes:
        return spec.domain, RunRecord(
            config,
            "unsupported",
            error=(f"{spec.name} does not support mode {config.mode!r} (supports {', '.join(spec.modes)})"),
        )
    device_type = config.device.split(":")[0]
    if device_type not in spec.devices:
        return spec.domain, RunRecord(
            config, "unsupported", error=f"{spec.name} does not support device {device_type!r}"
        )
    if device_type == "cuda":
        import torch

        if not torch.cuda.is_available():
            return spec.domain, RunRecord(config, "skipped", error="cuda requested but no CUDA device is available")
    return spec.domain, None


def _model_preloads(configs: Sequence[RunConfig]) -> list[str]:
    """The selected models' own modules and their heavy lazy imports (``ModelSpec.preload``).

    Only these: importing every model family costs seconds that a run of a few models
    should not pay (the registry lists models from its index without importing them).
    """
    from ..registry import UnknownModelError, get_spec

    modules: set[str] = set()
    for config in configs:
        try:
            spec = get_spec(config.model)
        except UnknownModelError:  # reported by the pre-check
            continue
        modules.update(spec.preload)
        if spec.builder is None:  # listed from the index: a built-in module not imported yet
            modules.add(spec.module)
    return sorted(modules)


def _mp_context(options: RunnerOptions, configs: Sequence[RunConfig]):
    ctx = mp.get_context(options.start_method)
    if options.start_method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD_MODULES)
        # Read by _preload inside the forkserver, which inherits this environment when it
        # starts: only the first suite of a process decides (the server then lives on).
        # _preload imports each module under try/except, so a broken optional package costs
        # its models a status, never the forkserver.
        os.environ[PRELOAD_ENV] = ",".join(_model_preloads(configs))
    return ctx


def run_suite(
    configs: Sequence[RunConfig] | Iterable[RunConfig],
    options: RunnerOptions = _DEFAULT_OPTIONS,
    *,
    on_result: Callable[[RunRecord], None] | None = None,
    on_start: Callable[[RunConfig], None] | None = None,
) -> list[RunRecord]:
    """Run every config, each isolated in a worker; returns the records in config order.

    ``on_result`` is called with each record as soon as its run ends (with ``options.jobs``
    > 1, in the order runs finish); a KeyboardInterrupt kills the running workers and
    propagates after everything finished was reported.
    """
    from ..registry import load_model_file

    for path in options.model_files:  # the parent needs their specs for the pre-checks
        load_model_file(path)
    if options.jobs < 1:
        raise ValueError(f"jobs must be >= 1; got {options.jobs}")
    if not (math.isfinite(options.timeout_s) and options.timeout_s > 0):  # nan would disable it
        raise ValueError(f"timeout_s must be a finite number > 0; got {options.timeout_s}")
    if options.memory_limit_mb is not None and not (
        math.isfinite(options.memory_limit_mb) and options.memory_limit_mb > 0
    ):
        raise ValueError(f"memory_limit_mb must be a finite number > 0 or None; got {options.memory_limit_mb}")
    if options.threads_per_worker is not None and options.threads_per_worker < 0:
        raise ValueError(f"threads_per_worker must be >= 0 (0: one per CPU); got {options.threads_per_worker}")
    configs = list(configs)
    done: dict[int, RunRecord] = {}
    domains: dict[int, str] = {}  # suite index -> the model's domain, from the pre-check
    mp_ctx = _mp_context(options, configs) if options.isolate else None

    def finish(index: int, config: RunConfig, record: RunRecord, t0: float) -> None:
        record.domain = domains[index]
        record.wall_s = round(time.perf_counter() - t0, 3)
        if record.phases_s and options.isolate:  # the rest of the wall time: fork, imports, result, exit
            record.phases_s["worker_start"] = round(max(0.0, record.wall_s - sum(record.phases_s.values())), 4)
        done[index] = record
        if on_result:
            _report(on_result, record, f"the finished run {config.label()}")

    # worker -> start time of the config it runs now
    running: dict[Worker, float] = {}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="torchgauge-") as tmp,
            contextlib.nullcontext() if options.isolate else threads_in_this_process(options),
            _instruction_counter(configs, options) as options,
        ):
            log_dir = Path(options.log_dir or tmp)
            log_dir.mkdir(parents=True, exist_ok=True)
            groups = _worker_groups(configs, options.isolation)
            while groups or running:
                while groups and len(running) < options.jobs:
                    group = []
                    for index, config in groups.popleft():
                        t0 = time.perf_counter()
                        domains[index], record = _precheck(config)
                        if record is not None or not options.isolate:
                            if on_start:
                                _report(on_start, config, f"the start of {config.label()}")
                            if record is None:
                                record = execute(config)
                            finish(index, config, record, t0)
                        else:
                            group.append((index, config))
                    if group:  # on_start for the first now, for the others as each starts
                        index, first = group[0]
                        if on_start:
                            _report(on_start, first, f"the start of {first.label()}")
                        log_path = str(log_dir / f"{index:04d}-{_file_safe(first.model)}-{first.mode}.log")
                        worker = Worker(mp_ctx, group, options, log_path, scratch_log=options.log_dir is None)
                        running[worker] = time.perf_counter()
                for worker, t0 in list(running.items()):
                    index, config = worker.index, worker.config
                    record = worker.poll(POLL_INTERVAL_S / len(running))
                    if record is None:
                        continue
                    if worker.finished and options.log_dir is None:  # read: only running workers' logs stay
                        Path(worker.log_path).unlink(missing_ok=True)
                    finish(index, config, record, t0)
                    if worker.leftover:
                        groups.appendleft(worker.leftover)
                    if worker.finished:
                        del running[worker]
                    else:
                        running[worker] = time.perf_counter()
                        if on_start:
                            _report(on_start, worker.config, f"the start of {worker.config.label()}")
    except BaseException:
        for worker in running:
            worker._kill()
        raise
    return [done[i] for i in sorted(done)]


@contextlib.contextmanager
def _instruction_counter(configs: Sequence[RunConfig], options: RunnerOptions) -> Iterator[RunnerOptions]:
    """Isolated runs that count instructions share one callgrind host (its start-up paid once).

    Yields ``options`` with the host's socket in the workers' environment; unchanged when no
    configuration counts on the CPU, the platform has no host, or it fails to start (each
    worker then starts its own valgrind child, as the metric does without a host).
    """
    from ..harness.callgrind_host import HOST_ENV, CallgrindHost, host_supported

    wanted = [c for c in configs if "instructions" in c.metrics and c.device.split(":")[0] == "cpu"]
    if not (options.isolate and wanted and host_supported()):
        yield options
        return
    from ..harness.instructions import child_env, find_valgrind
    from ..workload import UnsupportedError

    try:
        valgrind = find_valgrind()
    except UnsupportedError:  # no valgrind: each run's record says so (status unsupported)
        yield options
        return
    try:
        host = CallgrindHost(valgrind, child_env())
    except Exception as exc:  # no valgrind client requests in this torch, a host that died at start
        warnings.warn(f"instructions: no shared callgrind host ({exc}); each run starts its own", stacklevel=2)
        yield options
        return
    with host:
        yield dataclasses.replace(options, worker_env=(*options.worker_env, (HOST_ENV, host.address)))


def _report(callback: Callable, arg: object, what: str) -> None:
    """Call a progress/result callback; its failure is a warning, never the suite's end (Ctrl-C still is)."""
    try:
        callback(arg)
    except Exception as exc:
        warnings.warn(
            f"reporting {what} failed: {type(exc).__name__}: {exc}; the suite goes on", RuntimeWarning, stacklevel=3
        )


def _file_safe(name: str) -> str:
    # a model file may register any __name__; a log file name must stay in the log folder
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)[:100].lstrip(".") or "model"


def _worker_groups(configs: Sequence[RunConfig], isolation: str) -> collections.deque[list[tuple[int, RunConfig]]]:
    """(index, config) lists, one per worker, in plan order: one each, or a model's together."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"invalid isolation {isolation!r}; accepted: {', '.join(ISOLATIONS)}")
    groups: dict[object, list[tuple[int, RunConfig]]] = {}
    for index, config in enumerate(configs):
        # Only eager runs share a worker: a compiling backend's caches would make a later
        # config's compile a cache hit, and its precision flags are process-wide.
        shared = isolation == "per-model" and config.backend == "eager" and config.precision == "fp32"
        groups.setdefault(config.model if shared else index, []).append((index, config))
    return collections.deque(groups.values())
