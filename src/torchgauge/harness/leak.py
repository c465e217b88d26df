"""``leak`` metric: run N more steps and sample memory after each; the verdict is pure stats.

After every step (and a device sync) the pass records the process resident set (CPU) and,
on CUDA, ``torch.cuda.memory_allocated`` (bytes held by live tensors, not the allocator's
cache, so a cache that grows and is reused is not mistaken for a leak). The series go to
:func:`torchgauge.stats.leak.detect_leak`: robust Theil-Sen growth above a tolerance AND
persistent growth across windows. The TorchBench paper's CI found a cuBLAS workspace that
was never freed this way (sec. 4.2).

``RunConfig.options.leak_iterations`` sets N (default :data:`DEFAULT_LEAK_ITERATIONS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..stats.leak import CPU_TOLERANCE_MB_PER_ITER, GPU_TOLERANCE_MB_PER_ITER, detect_leak
from .memory import current_rss_mb
from .metrics import Quantity, register_metric
from .timer import device_sync

if TYPE_CHECKING:  # pragma: no cover
    from ..config import RunConfig, RunOptions
    from ..workload import Workload

__all__ = ["DEFAULT_LEAK_ITERATIONS", "MemorySeries", "leak_iterations", "sample_memory"]

# Enough points for the trend tests at smoke size; a slow leak needs more (the option).
DEFAULT_LEAK_ITERATIONS = 50
_MB = 1024.0 * 1024.0


@dataclass(frozen=True)
class MemorySeries:
    """Memory after each of N steps, MiB."""

    cpu_mb: tuple[float, ...]  # process resident set
    gpu_mb: tuple[float, ...] | None  # CUDA allocated bytes / 2**20; None off CUDA


def leak_iterations(options: RunOptions) -> int:
    """N: ``options.leak_iterations`` (RunOptions checked its range) or the default."""
    return options.leak_iterations or DEFAULT_LEAK_ITERATIONS


def sample_memory(step: Callable[[], Any], iterations: int, device: Any) -> MemorySeries:
    """Run ``step`` ``iterations`` times, sampling memory after each (after a device sync)."""
    import torch

    dev = torch.device(device)
    sync = device_sync(dev)
    on_cuda = dev.type == "cuda"
    cpu: list[float] = []
    gpu: list[float] = []
    for _ in range(iterations):
        out = step()
        del out  # what the step returns is the caller's to drop, not a leak
        sync()
        cpu.append(current_rss_mb())
        if on_cuda:
            gpu.append(torch.cuda.memory_allocated(dev) / _MB)
    return MemorySeries(tuple(cpu), tuple(gpu) if on_cuda else None)


@register_metric(
    "leak",
    "CPU RSS / GPU allocated growth per iteration over N steps, and a leak flag",
    quantities=[
        # judged by its flag (metrics["leak"]["leaking"]); the growth is the value shown and followed
        Quantity("leak", ("leak", "cpu_growth_mb_per_iter"), "MiB/iter", rule="flag", title="CPU memory growth")
    ],
)
def collect_leak(workload: Workload, config: RunConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """N extra steps; leaking when CPU or GPU memory grows beyond tolerance, persistently."""
    n = leak_iterations(config.options)
    series = sample_memory(workload.step, n, workload.device)
    cpu = detect_leak(series.cpu_mb, tolerance=CPU_TOLERANCE_MB_PER_ITER)
    gpu = detect_leak(series.gpu_mb, tolerance=GPU_TOLERANCE_MB_PER_ITER) if series.gpu_mb is not None else None
    return {
        "leak": {
            "leaking": cpu.leaking or (gpu is not None and gpu.leaking),
            "iterations": n,
            "cpu_growth_mb_per_iter": round(cpu.slope, 6),
            "gpu_growth_mb_per_iter": round(gpu.slope, 6) if gpu is not None else None,
            "tolerance_mb_per_iter": CPU_TOLERANCE_MB_PER_ITER,
            "gpu_tolerance_mb_per_iter": GPU_TOLERANCE_MB_PER_ITER if gpu is not None else None,
            "cpu_leaking": cpu.leaking,
            "gpu_leaking": gpu.leaking if gpu is not None else None,
            "cpu_samples_mb": [round(v, 3) for v in series.cpu_mb],
            "gpu_samples_mb": [round(v, 6) for v in series.gpu_mb] if series.gpu_mb is not None else None,
        }
    }
