"""Will a full-size model fit this machine? Declared memory needs against the device's capacity.

TorchBench's largest models (a 7B-parameter LLM, LLaVA) do not fit a small CPU machine at
full size. Their registrations declare what a full-size run needs (``full_memory_gib``,
per mode, in GiB: weights, gradients and optimizer state at fp32 plus activations), and
:func:`check_memory_need` turns a run that cannot fit into ``unsupported`` with the reason
before a byte is allocated, instead of swapping the machine to a halt. Smoke size always runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import psutil
import torch

__all__ = ["GIB", "device_memory_gib", "check_memory_need", "memory_need_gib"]

GIB = 1024**3


def memory_need_gib(extra: Mapping[str, object], mode: str) -> float | None:
    """The declared full-size need for ``mode`` from a spec's extra metadata, or None."""
    need = extra.get("full_memory_gib")
    if need is None:
        return None
    if isinstance(need, (int, float)):
        return float(need)
    train, eval_ = need  # (train, eval)
    return float(train if mode == "train" else eval_)


def device_memory_gib(device: torch.device) -> float:
    """Total memory of ``device`` in GiB: physical RAM for the CPU, the card's memory for CUDA."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / GIB
    return psutil.virtual_memory().total / GIB


def check_memory_need(name: str, mode: str, need_gib: float | None, capacity_gib: float) -> str | None:
    """The reason a full-size run cannot fit, or None when it fits (or declares no need).

    Example:
        >>> check_memory_need("llava", "eval", 30.0, 23.5)
        'llava eval needs about 30 GiB at full size; this device has 23.5 GiB (run --size smoke)'
    """
    if need_gib is None or need_gib <= capacity_gib:
        return None
    return (
        f"{name} {mode} needs about {need_gib:g} GiB at full size; "
        f"this device has {capacity_gib:.1f} GiB (run --size smoke)"
    )
