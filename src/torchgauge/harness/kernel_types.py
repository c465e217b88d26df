"""What kind of work a device event is: compute, memory or communication (HTA's kernel types).

Pure name and category rules, torch-free. They follow HolisticTraceAnalysis's
``get_kernel_type`` so that shares computed here and there agree (docs/gpu-traces.md):

- **communication**: collective/point-to-point kernels, ``nccl...Kernel`` (RCCL on ROCm
  keeps the ``nccl`` names);
- **memory**: device copies and fills: ``memcpy``/``memset`` events, and kernels named
  ``Memcpy...``, ``Memset...`` or ``dma...``;
- **compute**: every other kernel, except names containing ``Sync`` (HTA counts those as
  neither: they are waits, reported as ``other``).

Device-side synchronisation records (``sync`` events on a device) are ``other``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .events import TraceEvent

__all__ = ["KERNEL_TYPES", "kernel_type"]

KERNEL_TYPES = ("compute", "memory", "communication", "other")

_COMMUNICATION_RE = re.compile(r"^nccl.*Kernel")
_MEMORY_RE = re.compile(r"^(Memcpy|Memset|dma)")
# HTA's "not compute" pattern: names containing Memcpy or Sync are never compute kernels.
_NOT_COMPUTE_RE = re.compile(r"^(.*Memcpy|Memset|.*Sync)")


def kernel_type(event: TraceEvent) -> str:
    """One of :data:`KERNEL_TYPES` for a device event.

    Example:
        >>> kernel_type(TraceEvent("ncclKernel_AllReduce_RING_LL_Sum_float", "kernel", 0, 1, device="cuda:0"))
        'communication'
    """
    return _kernel_type(event.category, event.name)


@lru_cache(maxsize=1 << 16)  # a trace repeats a few thousand names millions of times
def _kernel_type(category: str, name: str) -> str:
    if category in ("memcpy", "memset"):
        return "memory"
    if category != "kernel":
        return "other"
    if _COMMUNICATION_RE.match(name):
        return "communication"
    if _MEMORY_RE.match(name):
        return "memory"
    if _NOT_COMPUTE_RE.match(name):
        return "other"
    return "compute"
