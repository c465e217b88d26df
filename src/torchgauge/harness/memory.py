"""Memory probes: process resident set (current, peak, resettable peak) and CUDA allocator peaks.

On Linux the kernel keeps the resident-set high-water mark (``VmHWM`` in
``/proc/self/status``) and lets a process reset it by writing ``5`` to
``/proc/self/clear_refs``; that gives a true peak over a chosen window without a sampling
thread. Elsewhere the lifetime peak from ``getrusage`` is used and the record says so.
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["BASELINE_RSS_MB", "MemoryProbe", "current_rss_mb", "peak_rss_mb", "pid_rss_mb", "reset_peak_rss"]

_MB = 1024.0 * 1024.0


def _status_field_kb(name: str) -> float | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(name + ":"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def current_rss_mb() -> float:
    """Current resident set size of this process in MiB."""
    kb = _status_field_kb("VmRSS")
    if kb is not None:
        return kb / 1024.0
    import psutil

    return psutil.Process().memory_info().rss / _MB


def peak_rss_mb() -> float:
    """Peak resident set size since the last reset (or process start) in MiB."""
    kb = _status_field_kb("VmHWM")
    if kb is not None:
        return kb / 1024.0
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru / _MB if sys.platform == "darwin" else ru / 1024.0  # bytes on macOS, KiB on Linux


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark; False where the platform cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


# RSS once torch and the harness are imported: the "process baseline after imports".
BASELINE_RSS_MB = current_rss_mb()


@dataclass
class MemoryProbe:
    """Peak memory over a window: ``start()`` resets the peaks, ``read()`` returns them.

    ``read()`` returns ``cpu_peak_mb`` (absolute peak RSS in the window),
    ``cpu_delta_mb`` (peak minus ``baseline_mb``), and on CUDA ``gpu_peak_mb`` and
    ``gpu_reserved_mb`` (allocator peaks in the window).
    """

    device_type: str = "cpu"
    baseline_mb: float = BASELINE_RSS_MB
    _peak_resettable: bool = False

    def start(self) -> None:
        self._peak_resettable = reset_peak_rss()
        if self.device_type == "cuda":
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def read(self) -> dict[str, Any]:
        peak = max(peak_rss_mb(), current_rss_mb())
        out: dict[str, Any] = {
            "cpu_peak_mb": round(peak, 2),
            "cpu_delta_mb": round(peak - self.baseline_mb, 2),
            "cpu_baseline_mb": round(self.baseline_mb, 2),
            "cpu_peak_windowed": self._peak_resettable,  # False: peak is the process lifetime peak
        }
        if self.device_type == "cuda":
            import torch

            torch.cuda.synchronize()
            out["gpu_peak_mb"] = round(torch.cuda.max_memory_allocated() / _MB, 2)
            out["gpu_reserved_mb"] = round(torch.cuda.max_memory_reserved() / _MB, 2)
        return out


def pid_rss_mb(pid: int) -> float | None:
    """Resident set of another process in MiB (None if it has exited)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss / _MB
    except Exception:
        return None
