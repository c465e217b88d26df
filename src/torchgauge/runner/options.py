"""How a suite runs, as opposed to what (that is RunConfig): timeouts, memory cap, jobs, threads, isolation."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["ISOLATIONS", "RunnerOptions", "apply_threads", "threads_in_this_process", "worker_threads"]

ISOLATIONS = ("per-run", "per-model")


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
    start_method: str = field(
        default_factory=lambda: "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    )
    # "per-run": a fresh worker per configuration. "per-model": one worker runs all of a
    # model's configurations in turn (each still built fresh, with its own timeout), saving
    # a worker start per configuration; a crash, OOM or timeout ends that worker and the
    # model's remaining configurations go on in a new one. See docs/performance.md (A/A).
    isolation: str = "per-run"


def worker_threads(options: RunnerOptions) -> int:
    """Intra-op threads each worker uses: the explicit setting (0: one per CPU), the CPUs
    split between jobs, or :data:`~torchgauge.harness.threads.DEFAULT_INTRA_OP_THREADS`."""
    from ..harness.threads import DEFAULT_INTRA_OP_THREADS

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if options.threads_per_worker == 0:
        return max(1, cpus // options.jobs)
    if options.threads_per_worker is not None:
        return options.threads_per_worker
    if options.jobs > 1:
        return max(1, cpus // options.jobs)
    return DEFAULT_INTRA_OP_THREADS


def apply_threads(options: RunnerOptions) -> None:
    """This process's torch threads (and pinning) as a worker of ``options`` uses them."""
    from ..harness.threads import ThreadSettings, apply_thread_settings

    apply_thread_settings(ThreadSettings(worker_threads(options), pin=options.pin_threads))


@contextlib.contextmanager
def threads_in_this_process(options: RunnerOptions) -> Iterator[None]:
    """--in-process runs: apply the worker's thread settings here, restore them afterwards."""
    import torch

    saved, saved_env, saved_affinity = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"), None
    if options.pin_threads and hasattr(os, "sched_getaffinity"):
        saved_affinity = os.sched_getaffinity(0)
    apply_threads(options)
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
