"""The environment a measurement was taken in: software versions, CPU, GPU, host."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import sys
from functools import lru_cache
from typing import Any

__all__ = ["collect_env", "cpu_model", "machine_fingerprint"]


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


def machine_fingerprint(env: dict[str, Any]) -> str:
    """Stable id of the hardware a run used (host, CPU, core count, GPU): results from
    different fingerprints are never compared as if from one machine."""
    parts = [str(env.get(k)) for k in ("hostname", "cpu_model", "cpu_count", "gpu_name")]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


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
        "torch_num_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }
    env.update(_gpu_info(torch))
    env["machine_fingerprint"] = machine_fingerprint(env)
    return env
