"""The worker process: its start, its watchdogs, and the parent's watch over it.

Workers are forked from a forkserver that has already imported torch and the model
registry, so starting one costs milliseconds instead of the seconds a fresh interpreter
needs to import torch.

No process of a run outlives it. Each worker starts its own session (process group), and
a timeout, an abort or the worker's end kills the whole group, so processes a model
started die with it. A worker also watches its parent through a pipe only the parent
holds open: when the parent dies, even by SIGKILL, the pipe reaches EOF and the worker
kills its group and removes its scratch log; the forkserver gets a parent-death signal
and exits at once (:func:`forkserver_dies_with_parent`), and the resource tracker exits
when its last writer is gone. docs/reliability.md lists what is tested.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence

from ..results.schema import RunConfig, RunRecord, SchemaError
from .execution import error_tail, execute
from .options import RunnerOptions, apply_threads

__all__ = ["EXIT_GRACE_S", "LOG_TAIL_BYTES", "WATCHDOG_GRACE_S", "Worker", "forkserver_dies_with_parent", "kill_group"]

# Bytes read from the end of a worker's log for the error (the file may be huge).
LOG_TAIL_BYTES = 64 * 1024
# Grace period for a worker to exit after it sent its result.
EXIT_GRACE_S = 10.0
# Seconds the forkserver, once the parent is dead, leaves the workers' watchdogs to clean up.
WATCHDOG_GRACE_S = 1.0


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
            kill_group(worker.pid)
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


def _worker_main(
    configs: Sequence[RunConfig],
    options: RunnerOptions,
    conn,
    log_path: str,
    parent_alive=None,
    scratch_log: bool = False,
) -> None:
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
        from ..registry import load_model_file

        apply_threads(options)
        for path in options.model_files:
            load_model_file(path)
    except BaseException as exc:  # model-file import errors, KeyboardInterrupt, SystemExit
        setup_error = error_tail(f"{type(exc).__name__}: {exc}\n" + traceback.format_exc())
    for config in configs:
        try:
            record = RunRecord(config, "error", error=setup_error) if setup_error else execute(config)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit
            record = RunRecord(
                config, "error", error=error_tail(f"{type(exc).__name__}: {exc}\n" + traceback.format_exc())
            )
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


def kill_group(pgid: int) -> None:
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


class Worker:
    """One worker process running one or more configs in turn, watched by the parent.

    ``items`` are (suite index, config) pairs; ``index``/``config`` name the one running now;
    each record received moves on to the next and restarts the timeout. ``leftover`` holds
    the items a dead worker never started.
    """

    def __init__(
        self,
        mp_ctx,
        items: Sequence[tuple[int, RunConfig]],
        options: RunnerOptions,
        log_path: str,
        *,
        scratch_log: bool,
    ) -> None:
        self.items = list(items)
        self.configs = [config for _, config in self.items]
        self.position = 0
        self.options = options
        self.log_path = log_path
        self.leftover: list[tuple[int, RunConfig]] = []
        self.recv, send = mp_ctx.Pipe(duplex=False)
        # the parent holds the only writer of this one: EOF in the worker means we died
        alive_r, self.alive_w = mp_ctx.Pipe(duplex=False)
        self.proc = mp_ctx.Process(
            target=_worker_main, args=(self.configs, options, send, log_path, alive_r, scratch_log), daemon=True
        )
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
        self.leftover = self.items[self.position + 1 :]
        self.position = len(self.configs)
        return record

    def _kill(self) -> None:
        """Kill the worker and everything in its process group, then reap it."""
        kill_group(self.proc.pid)  # the group is the worker's pid (it called setsid)
        if self.proc.is_alive():  # killed before its setsid: its group does not exist yet
            self.proc.kill()
        self.proc.join(EXIT_GRACE_S)
        self.alive_w.close()
        self.recv.close()

    def poll(self, timeout_s: float = 0.0) -> RunRecord | None:
        """The run's record once it has ended (result, crash, OOM or timeout); None while it runs."""
        from ..harness.memory import pid_rss_mb

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
                record = RunRecord(cfg, "error", error=error_tail(f"the worker sent an invalid result: {exc}"))
            return self._advance(record)
        if not self.proc.is_alive() and not self.recv.poll(0):
            return self._end(self._died())
        if opts.memory_limit_mb is not None:
            rss = pid_rss_mb(self.proc.pid) or 0.0
            if rss > opts.memory_limit_mb:
                self._kill()
                return self._end(
                    RunRecord(
                        cfg,
                        "oom",
                        error=f"worker exceeded the memory limit of {opts.memory_limit_mb:.0f} MiB (RSS {rss:.0f} MiB)",
                    )
                )
        if time.monotonic() > self.deadline:
            self._kill()
            log = error_tail(_read_log(self.log_path), 5)
            return self._end(
                RunRecord(cfg, "timeout", error=f"timed out after {opts.timeout_s:g} s" + (f"\n{log}" if log else ""))
            )
        return None

    def _died(self) -> RunRecord:
        cfg = self.config
        self.proc.join(EXIT_GRACE_S)
        code = self.proc.exitcode
        self._kill()
        log = error_tail(_read_log(self.log_path))
        if code is not None and code < 0:
            # SIGKILL without our doing it is almost always the kernel's OOM killer.
            status = "oom" if code == -signal.SIGKILL else "error"
            what = f"worker killed by {_signal_name(code)}"
        else:
            status, what = "error", f"worker exited with code {code} before reporting a result"
        return RunRecord(cfg, status, error=what + (f"\n{log}" if log else ""))
