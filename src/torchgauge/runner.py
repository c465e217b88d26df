"""Isolated runner: one worker process per (model, config), with a timeout and a memory cap.

A model that raises, segfaults, exits, hangs or runs out of memory becomes a status
(``error``, ``oom``, ``timeout``, ``unsupported``, ``skipped``) with the last lines of its
error, and the suite goes on. Every finished run is handed to ``on_result`` as soon as it
ends (the CLI writes it to disk there), so nothing measured is lost to a later crash or
Ctrl-C.

Workers are forked from a forkserver that has already imported torch and the model
registry, so starting one costs milliseconds instead of the seconds a fresh interpreter
needs to import torch (suite wall time on 100+ models would otherwise be start-up).

No process of a run outlives it. Each worker starts its own session (process group), and
a timeout, an abort or the worker's end kills the whole group, so processes a model
started die with it. A worker also watches its parent through a pipe only the parent
holds open: when the parent dies, even by SIGKILL, the pipe reaches EOF and the worker
kills its group and removes its scratch log; the forkserver gets a parent-death signal
and exits at once (:func:`forkserver_dies_with_parent`), and the resource tracker exits
when its last writer is gone. docs/reliability.md lists what is tested.
"""

from __future__ import annotations

import collections
import contextlib
import math
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from .results.schema import RunConfig, RunRecord, SchemaError

__all__ = [
    "ERROR_LINE_CHARS",
    "ERROR_TAIL_LINES",
    "LOG_TAIL_BYTES",
    "POLL_INTERVAL_S",
    "RunnerOptions",
    "classify_exception",
    "execute",
    "run_suite",
]

# Lines of a traceback or worker log kept in a record's ``error``.
ERROR_TAIL_LINES = 20
# Characters of one such line kept (its start and end): a model that prints megabytes on
# one line must not put them into the results file, every rewrite of it and the database.
ERROR_LINE_CHARS = 2000
# Bytes read from the end of a worker's log for the error (the file may be huge).
LOG_TAIL_BYTES = 64 * 1024
# How often the parent checks a worker's liveness, deadline and memory.
POLL_INTERVAL_S = 0.05
# Grace period for a worker to exit after it sent its result.
EXIT_GRACE_S = 10.0
# Modules the forkserver imports once so that every worker starts warm.
PRELOAD_MODULES = ["torchgauge._preload"]
# The selected models' own heavy imports (ModelSpec.preload), comma-separated, for _preload.
PRELOAD_ENV = "TORCHGAUGE_PRELOAD"

_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "defaultcpuallocator",
    "std::bad_alloc",
)


@dataclass(frozen=True)
class RunnerOptions:
    """How to run, as opposed to what (that is RunConfig)."""

    timeout_s: float = 900.0  # per run, build + warm-up + timing + extra metrics
    memory_limit_mb: float | None = None  # worker RSS cap; exceeding it gives status "oom"
    model_files: tuple[str, ...] = ()  # user files registering models, loaded in each worker
    isolate: bool = True  # False: run in this process (debugging; no timeout or crash safety)
    log_dir: str | None = None  # keep each worker's full stdout/stderr here (default: temp, deleted)
    # Workers at once. Keep 1 for timing (parallel runs disturb each other's samples); more
    # is for coverage recording and smoke checks, where only the outcome matters.
    jobs: int = 1
    # torch intra-op threads per worker; None: harness.threads.DEFAULT_INTRA_OP_THREADS with
    # one job, else the CPU count shared out between the jobs (two workers of 2 threads on 2
    # cores spin against each other: OpenMP oversubscription made parallel runs several times
    # slower). 0: one per CPU (torch's own default), for throughput on a dedicated machine.
    threads_per_worker: int | None = None
    # CPU ids the worker is pinned to (os.sched_setaffinity); empty: not pinned. Executors that
    # share a machine between several runners (executors/ray_cluster.py) claim cores for it.
    cpu_affinity: tuple[int, ...] = ()
    # Environment variables set in the worker before the run (e.g. CUDA_VISIBLE_DEVICES for the
    # GPU a cluster assigned): workers fork from a long-lived forkserver, not from the caller.
    worker_env: tuple[tuple[str, str], ...] = ()
    pin_threads: bool = False  # restrict each worker to as many CPUs as it has threads
    start_method: str = field(default_factory=lambda: "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    # "per-run": a fresh worker per configuration. "per-model": one worker runs all of a
    # model's configurations in turn (each still built fresh, with its own timeout), saving
    # a worker start per configuration; a crash, OOM or timeout ends that worker and the
    # model's remaining configurations go on in a new one. See docs/performance.md (A/A).
    isolation: str = "per-run"


def _clip_line(line: str, limit: int = ERROR_LINE_CHARS) -> str:
    if len(line) <= limit:
        return line
    half = limit // 2
    return f"{line[:half]} [... {len(line) - 2 * half:,} characters cut ...] {line[-half:]}"


def _tail(text: str, n: int = ERROR_TAIL_LINES) -> str:
    """The last ``n`` non-blank lines, each clipped to ERROR_LINE_CHARS, saying what was cut."""
    lines = [ln for ln in text.rstrip().splitlines() if ln.strip()]
    kept = [_clip_line(ln) for ln in lines[-n:]]
    if len(lines) > n:
        kept.insert(0, f"[... {len(lines) - n} earlier lines cut ...]")
    return "\n".join(kept)


def classify_exception(exc: BaseException) -> str:
    """Status for an exception raised by a run: ``unsupported``, ``oom`` or ``error``."""
    from .workload import UnsupportedError

    if isinstance(exc, UnsupportedError):
        return "unsupported"
    if isinstance(exc, MemoryError):
        return "oom"
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    message = str(exc).lower()
    if isinstance(exc, RuntimeError) and any(m in message for m in _OOM_MARKERS):
        return "oom"
    return "error"


def _precheck(config: RunConfig) -> RunRecord | None:
    """Statuses decided without starting a worker: unknown model, unsupported mode/device."""
    from .registry import UnknownModelError, get_spec

    try:
        spec = get_spec(config.model)
    except UnknownModelError as exc:
        return RunRecord(config, "error", error=str(exc))
    if config.mode not in spec.modes:
        return RunRecord(config, "unsupported", domain=spec.domain,
                         error=f"{spec.name} does not support mode {config.mode!r} (supports {', '.join(spec.modes)})")
    device_type = config.device.split(":")[0]
    if device_type not in spec.devices:
        return RunRecord(config, "unsupported", domain=spec.domain,
                         error=f"{spec.name} does not support device {device_type!r}")
    if device_type == "cuda":
        import torch

        if not torch.cuda.is_available():
            return RunRecord(config, "skipped", domain=spec.domain, error="cuda requested but no CUDA device is available")
    return None


def execute(config: RunConfig) -> RunRecord:
    """Build, configure and measure one run in this process; exceptions become statuses."""
    from .configure import apply_config, build_workload
    from .measurement import measure_run

    try:
        t_build = time.perf_counter()
        workload = apply_config(build_workload(config), config)
        build_s = time.perf_counter() - t_build
        record = measure_run(workload, config)
        record.phases_s = {"build": round(build_s, 4), **record.phases_s}
        if config.options.get("accuracy"):
            del workload  # the check builds fresh workloads from the seed; free this one first
            _add_accuracy(record)
        return record
    except Exception as exc:  # a failing model never takes the suite down
        status = classify_exception(exc)
        if status == "unsupported":
            error = str(exc)
        else:
            error = _tail(traceback.format_exc())
        return RunRecord(config, status, error=error)


def _add_accuracy(record: RunRecord) -> None:
    """Run the --accuracy check in its own pass; a failed check sets the run's status."""
    from .accuracy import check_accuracy

    try:
        accuracy = check_accuracy(record.config)
    except Exception as exc:  # the timing stands; say why it could not be judged
        # The first line: dispatcher errors end in a long list of registered kernels.
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        record.error = f"accuracy check could not run: {type(exc).__name__}: {first}"
        return
    record.metrics["accuracy"] = accuracy
    if accuracy["status"] != "pass":  # fail_accuracy or eager_nondeterministic
        record.status = accuracy["status"]
        record.error = accuracy.get("reason")


def worker_threads(options: RunnerOptions) -> int:
    """Intra-op threads each worker uses: the explicit setting (0: one per CPU), the CPUs
    split between jobs, or :data:`~torchgauge.harness.threads.DEFAULT_INTRA_OP_THREADS`."""
    from .harness.threads import DEFAULT_INTRA_OP_THREADS

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if options.threads_per_worker == 0:
        return max(1, cpus // options.jobs)
    if options.threads_per_worker is not None:
        return options.threads_per_worker
    if options.jobs > 1:
        return max(1, cpus // options.jobs)
    return DEFAULT_INTRA_OP_THREADS


# prctl(2) option: the signal a process gets when its parent thread dies.
_PR_SET_PDEATHSIG = 1


def _die_with_parent(signum: int) -> None:
    """Linux: get ``signum`` when the parent dies; elsewhere a no-op (the pipes cover it)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def forkserver_dies_with_parent() -> None:
    """Called in the forkserver (by ``_preload``): exit at once, and tidy up, when the suite dies.

    The forkserver exits by itself when the parent's pipe reaches EOF, but only after an
    interpreter shutdown that takes seconds with torch loaded, and it leaves the folder of
    its socket behind when the parent was SIGKILLed. With a parent-death SIGTERM it gives
    its workers' watchdogs a moment to clean up, kills the process group of any worker
    still alive (one whose model holds the GIL), removes that folder and leaves at once.
    Workers reset SIGTERM to the default.
    """
    import re
    import socket

    import psutil

    match = re.search(r"main\((\d+),", " ".join(getattr(sys, "orig_argv", [])))
    server_pid = os.getpid()

    def leave(signum: int, frame: object) -> None:
        if os.getpid() != server_pid:  # a worker that has not reset the handler yet
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        workers = psutil.Process().children()
        _, alive = psutil.wait_procs(workers, timeout=WATCHDOG_GRACE_S)
        for worker in alive:
            _kill_group(worker.pid)
        if match:
            with contextlib.suppress(OSError, ValueError):
                address = socket.socket(fileno=os.dup(int(match.group(1)))).getsockname()
                if isinstance(address, str) and os.path.basename(os.path.dirname(address)).startswith("pymp-"):
                    os.unlink(address)
                    os.rmdir(os.path.dirname(address))
        os._exit(0)

    signal.signal(signal.SIGTERM, leave)
    _die_with_parent(signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before the prctl
        leave(signal.SIGTERM, None)


def _watch_parent(parent_alive, scratch: tuple[str, ...]) -> None:
    """Kill this worker's process group once the parent is gone (EOF on ``parent_alive``).

    The parent never writes to the pipe and holds its only writer, so EOF means the parent
    died, however it died. ``scratch`` files are removed (then their folders, if empty).
    """

    def watch() -> None:
        try:
            while True:
                parent_alive.recv()
        except (EOFError, OSError):
            pass
        for path in scratch:
            with contextlib.suppress(OSError):
                os.unlink(path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="torchgauge-parent-watch", daemon=True).start()


# Seconds the forkserver, once the parent is dead, leaves the workers' watchdogs to clean up.
WATCHDOG_GRACE_S = 1.0


def _apply_threads(options: RunnerOptions) -> None:
    from .harness.threads import ThreadSettings, apply_thread_settings

    apply_thread_settings(ThreadSettings(worker_threads(options), pin=options.pin_threads))


@contextlib.contextmanager
def _threads_in_this_process(options: RunnerOptions) -> Iterator[None]:
    """--in-process runs: apply the worker's thread settings here, restore them afterwards."""
    import torch

    saved, saved_env, saved_affinity = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"), None
    if options.pin_threads and hasattr(os, "sched_getaffinity"):
        saved_affinity = os.sched_getaffinity(0)
    _apply_threads(options)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
        if saved_env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved_env
        if saved_affinity is not None:
            os.sched_setaffinity(0, saved_affinity)


ISOLATIONS = ("per-run", "per-model")


def _worker_main(configs: Sequence[RunConfig], options: RunnerOptions, conn, log_path: str, parent_alive=None,
                 scratch_log: bool = False) -> None:
    """Run ``configs`` in turn, sending each record as soon as it exists."""
    # Own session and process group: killing the group kills whatever the model started,
    # and the terminal's Ctrl-C reaches only the parent, which then stops the workers.
    with contextlib.suppress(PermissionError):  # already a group leader (never, when forked)
        os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the forkserver's handler
    if parent_alive is not None:  # (the forkserver is the backstop: forkserver_dies_with_parent)
        _watch_parent(parent_alive, (log_path,) if scratch_log else ())
    # Everything the model prints (and a C-level crash message) goes to the log file.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    setup_error = None
    try:
        os.environ.update(dict(options.worker_env))
        if options.cpu_affinity:  # cores an executor claimed for this run
            os.sched_setaffinity(0, options.cpu_affinity)
        from .registry import load_model_file

        _apply_threads(options)
        for path in options.model_files:
            load_model_file(path)
    except BaseException as exc:  # model-file import errors, KeyboardInterrupt, SystemExit
        setup_error = _tail(f"{type(exc).__name__}: {exc}\n" + traceback.format_exc())
    for config in configs:
        try:
            record = RunRecord(config, "error", error=setup_error) if setup_error else execute(config)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit
            record = RunRecord(config, "error", error=_tail(f"{type(exc).__name__}: {exc}\n" + traceback.format_exc()))
        conn.send(record.to_dict())
    conn.close()


def _read_log(path: str, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of a worker's log (a model may have printed gigabytes)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError:
        return ""
    text = data.decode(errors="replace")
    if size > max_bytes:  # the first line is a fragment: _tail clips it and says so
        text = f"[... log of {size:,} bytes: only its last {max_bytes:,} read ...]\n..." + text
    return text


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of the worker's group; nothing if the group is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Hide ``__main__``'s file and spec while a worker starts.

    multiprocessing re-imports the parent's main script in every forkserver/spawn child so
    that pickled references to ``__main__`` resolve. Workers only need torchgauge (already
    preloaded), and re-running the caller's script is slow at best and, for a script
    without an ``if __name__ == "__main__"`` guard, recursive. Start-up is synchronous, so
    restoring the attributes right after ``start()`` is safe.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    missing = object()
    saved_file = main.__dict__.get("__file__", missing)
    saved_spec = main.__dict__.get("__spec__", missing)
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        if saved_file is not missing:
            main.__file__ = saved_file
        if saved_spec is missing:
            main.__dict__.pop("__spec__", None)
        else:
            main.__spec__ = saved_spec


class _Worker:
    """One worker process running one or more configs in turn, watched by the parent.

    ``items`` are (suite index, config) pairs; ``index``/``config`` name the one running now;
    each record received moves on to the next and restarts the timeout. ``leftover`` holds
    the items a dead worker never started.
    """

    def __init__(self, mp_ctx, items: Sequence[tuple[int, RunConfig]], options: RunnerOptions, log_path: str, *,
                 scratch_log: bool) -> None:
        self.items = list(items)
        self.configs = [config for _, config in self.items]
        self.position = 0
        self.options = options
        self.log_path = log_path
        self.leftover: list[tuple[int, RunConfig]] = []
        self.recv, send = mp_ctx.Pipe(duplex=False)
        # the parent holds the only writer of this one: EOF in the worker means we died
        alive_r, self.alive_w = mp_ctx.Pipe(duplex=False)
        self.proc = mp_ctx.Process(target=_worker_main, args=(self.configs, options, send, log_path, alive_r, scratch_log),
                                   daemon=True)
        with _main_module_hidden():
            self.proc.start()
        send.close()  # the child holds the only writer: EOF on recv means it died
        alive_r.close()
        self.deadline = time.monotonic() + options.timeout_s

    @property
    def config(self) -> RunConfig:
        return self.configs[self.position]

    @property
    def index(self) -> int:
        return self.items[self.position][0]

    @property
    def finished(self) -> bool:
        return self.position >= len(self.configs)

    def _advance(self, record: RunRecord) -> RunRecord:
        self.position += 1
        self.deadline = time.monotonic() + self.options.timeout_s
        return record

    def _end(self, record: RunRecord) -> RunRecord:
        """The worker is gone: the current config gets ``record``, the rest go back to the queue."""
        self.leftover = self.items[self.position + 1:]
        self.position = len(self.configs)
        return record

    def _kill(self) -> None:
        """Kill the worker and everything in its process group, then reap it."""
        _kill_group(self.proc.pid)  # the group is the worker's pid (it called setsid)
        if self.proc.is_alive():  # killed before its setsid: its group does not exist yet
            self.proc.kill()
        self.proc.join(EXIT_GRACE_S)
        self.alive_w.close()
        self.recv.close()

    def poll(self, timeout_s: float = 0.0) -> RunRecord | None:
        """The run's record once it has ended (result, crash, OOM or timeout); None while it runs."""
        from .harness.memory import pid_rss_mb

        cfg, opts = self.config, self.options
        if self.recv.poll(timeout_s):
            try:
                doc = self.recv.recv()
            except EOFError:  # died without a result
                return self._end(self._died())
            if self.position + 1 == len(self.configs):  # the worker's last config: it exits now
                self.proc.join(EXIT_GRACE_S)
                self._kill()  # also whatever the model left running in its group
            try:
                record = RunRecord.from_dict(doc)
            except (SchemaError, TypeError, ValueError) as exc:  # a model that broke its own record
                record = RunRecord(cfg, "error", error=_tail(f"the worker sent an invalid result: {exc}"))
            return self._advance(record)
        if not self.proc.is_alive() and not self.recv.poll(0):
            return self._end(self._died())
        if opts.memory_limit_mb is not None:
            rss = pid_rss_mb(self.proc.pid) or 0.0
            if rss > opts.memory_limit_mb:
                self._kill()
                return self._end(RunRecord(cfg, "oom", error=f"worker exceeded the memory limit of {opts.memory_limit_mb:.0f} MiB (RSS {rss:.0f} MiB)"))
        if time.monotonic() > self.deadline:
            self._kill()
            log = _tail(_read_log(self.log_path), 5)
            return self._end(RunRecord(cfg, "timeout", error=f"timed out after {opts.timeout_s:g} s" + (f"\n{log}" if log else "")))
        return None

    def _died(self) -> RunRecord:
        cfg = self.config
        self.proc.join(EXIT_GRACE_S)
        code = self.proc.exitcode
        self._kill()
        log = _tail(_read_log(self.log_path))
        if code is not None and code < 0:
            # SIGKILL without our doing it is almost always the kernel's OOM killer.
            status = "oom" if code == -signal.SIGKILL else "error"
            what = f"worker killed by {_signal_name(code)}"
        else:
            status, what = "error", f"worker exited with code {code} before reporting a result"
        return RunRecord(cfg, status, error=what + (f"\n{log}" if log else ""))


def _model_preloads(configs: Sequence[RunConfig]) -> list[str]:
    """The selected models' own modules and their heavy lazy imports (``ModelSpec.preload``).

    Only these: importing every model family costs seconds that a run of a few models
    should not pay (the registry lists models from its index without importing them).
    """
    from .registry import UnknownModelError, get_spec

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
    options: RunnerOptions = RunnerOptions(),
    *,
    on_result: Callable[[RunRecord], None] | None = None,
    on_start: Callable[[RunConfig], None] | None = None,
) -> list[RunRecord]:
    """Run every config, each isolated in a worker; returns the records in config order.

    ``on_result`` is called with each record as soon as its run ends (with ``options.jobs``
    > 1, in the order runs finish); a KeyboardInterrupt kills the running workers and
    propagates after everything finished was reported.
    """
    from .registry import load_model_file

    for path in options.model_files:  # the parent needs their specs for the pre-checks
        load_model_file(path)
    if options.jobs < 1:
        raise ValueError(f"jobs must be >= 1; got {options.jobs}")
    if not (math.isfinite(options.timeout_s) and options.timeout_s > 0):  # nan would disable it
        raise ValueError(f"timeout_s must be a finite number > 0; got {options.timeout_s}")
    if options.memory_limit_mb is not None and not (math.isfinite(options.memory_limit_mb) and options.memory_limit_mb > 0):
        raise ValueError(f"memory_limit_mb must be a finite number > 0 or None; got {options.memory_limit_mb}")
    if options.threads_per_worker is not None and options.threads_per_worker < 0:
        raise ValueError(f"threads_per_worker must be >= 0 (0: one per CPU); got {options.threads_per_worker}")
    configs = list(configs)
    done: dict[int, RunRecord] = {}
    mp_ctx = _mp_context(options, configs) if options.isolate else None

    def finish(index: int, config: RunConfig, record: RunRecord, t0: float) -> None:
        if not record.domain:
            record.domain = _domain_of(config.model)
        record.wall_s = round(time.perf_counter() - t0, 3)
        if record.phases_s and options.isolate:  # the rest of the wall time: fork, imports, result, exit
            record.phases_s["worker_start"] = round(max(0.0, record.wall_s - sum(record.phases_s.values())), 4)
        done[index] = record
        if on_result:
            _report(on_result, record, f"the finished run {config.label()}")

    # worker -> start time of the config it runs now
    running: dict[_Worker, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="torchgauge-") as tmp, \
                (contextlib.nullcontext() if options.isolate else _threads_in_this_process(options)):
            log_dir = Path(options.log_dir or tmp)
            log_dir.mkdir(parents=True, exist_ok=True)
            groups = _worker_groups(configs, options.isolation)
            while groups or running:
                while groups and len(running) < options.jobs:
                    group = []
                    for index, config in groups.popleft():
                        t0 = time.perf_counter()
                        record = _precheck(config)
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
                        worker = _Worker(mp_ctx, group, options, log_path, scratch_log=options.log_dir is None)
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


def _report(callback: Callable, arg: object, what: str) -> None:
    """Call a progress/result callback; its failure is a warning, never the suite's end (Ctrl-C still is)."""
    try:
        callback(arg)
    except Exception as exc:
        warnings.warn(f"reporting {what} failed: {type(exc).__name__}: {exc}; the suite goes on", RuntimeWarning,
                      stacklevel=3)


def _file_safe(name: str) -> str:
    # a model file may register any __name__; a log file name must stay in the log folder
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)[:100].lstrip(".") or "model"


def _worker_groups(configs: Sequence[RunConfig], isolation: str) -> "collections.deque[list[tuple[int, RunConfig]]]":
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


def _domain_of(name: str) -> str:
    from .registry import UnknownModelError, get_spec

    try:
        return get_spec(name).domain
    except UnknownModelError:
        return ""
