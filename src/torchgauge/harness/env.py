"""The environment a measurement was taken in: software versions, CPU, memory, GPU, host."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import sys
from functools import lru_cache
from typing import Any

__all__ = ["FINGERPRINT_KEYS", "collect_env", "cpu_model", "describe_hardware", "machine_fingerprint"]


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux) or platform as a fallback."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_info(torch: Any) -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"gpu_name": None, "gpu_count": 0, "gpu_driver": None, "cuda_version": torch.version.cuda}
    info = {
        "gpu_name": torch.cuda.get_device_name(0),
        "gpu_count": torch.cuda.device_count(),
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "gpu_driver": None,
    }
    try:  # the driver version needs NVML; optional
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        info["gpu_driver"] = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        drv = "/proc/driver/nvidia/version"
        if os.path.exists(drv):
            with open(drv) as fh:
                first = fh.readline()
            info["gpu_driver"] = next((tok for tok in first.split() if tok[:1].isdigit() and "." in tok), None)
    return info


# What changes performance, and so what the fingerprint hashes: the hardware (CPU model, CPUs,
# memory, GPU model, count and driver) and how torch was built for it (CUDA/HIP version, debug
# build, oneDNN). Not the hostname: hosted CI runners get a new one every night while the
# hardware stays, and two hosts of one hardware type measure alike. Not the torch version:
# comparing torch builds on one hardware is the point of a comparison.
FINGERPRINT_KEYS = (
    "cpu_model",
    "cpu_count",
    "memory_gib",
    "gpu_name",
    "gpu_count",
    "gpu_driver",
    "cuda_version",
    "hip_version",
    "torch_debug",
    "mkldnn",
)


def machine_fingerprint(env: dict[str, Any]) -> str:
    """Stable id of the hardware (and torch build type) a run used, from :data:`FINGERPRINT_KEYS`:
    results from different fingerprints are never compared as if from one machine."""
    parts = [f"{k}={env.get(k)}" for k in FINGERPRINT_KEYS]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def describe_hardware(env: dict[str, Any]) -> str:
    """One line naming the hardware of an environment, e.g. ``AMD EPYC 7763, 4 CPUs, 16 GiB, no GPU``."""
    if not env.get("cpu_model"):  # an environment recorded without hardware fields
        return f"machine {env.get('machine_fingerprint') or 'unknown'}"
    gpu = env.get("gpu_name")
    gpus = (
        f"{env.get('gpu_count') or 1}x {gpu}" + (f" (driver {env['gpu_driver']})" if env.get("gpu_driver") else "")
        if gpu
        else "no GPU"
    )
    memory = f"{env['memory_gib']:g} GiB" if isinstance(env.get("memory_gib"), (int, float)) else "memory unknown"
    return f"{env.get('cpu_model') or 'unknown CPU'}, {env.get('cpu_count')} CPUs, {memory}, {gpus}"


def _memory_gib() -> float | None:
    """Total memory, rounded to 1 GiB (the kernel's figure moves by a few MiB between boots)."""
    try:
        import psutil

        return float(round(psutil.virtual_memory().total / 2**30))
    except Exception:  # optional detail of the environment
        return None


def collect_env() -> dict[str, Any]:
    """Versions and hardware of this process's environment, JSON-ready."""
    import torch

    from .. import __version__

    env: dict[str, Any] = {
        "torchgauge_version": __version__,
        "torch_version": torch.__version__,
        "torch_git_version": getattr(torch.version, "git_version", None),
        "torch_debug": bool(getattr(torch.version, "debug", False)),
        "python_version": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "torch_num_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }
    env.update(_gpu_info(torch))
    env["machine_fingerprint"] = machine_fingerprint(env)
    return env
