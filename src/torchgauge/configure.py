"""Apply a run configuration's precision and backend to a freshly built workload.

Precision and backend registries live in :mod:`torchgauge.backends` and
:mod:`torchgauge.precision` once those exist; the foundation knows fp32 + eager.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .workload import UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from .results.schema import RunConfig
    from .workload import Workload

__all__ = ["apply_config", "PRECISIONS", "BACKENDS"]

PRECISIONS = ("fp32",)
BACKENDS = ("eager",)


def apply_config(workload: "Workload", config: "RunConfig") -> "Workload":
    """Configure precision and backend in place; raise UnsupportedError for what cannot run."""
    import torch

    if config.precision != "fp32":
        raise UnsupportedError(f"precision {config.precision!r} is not available; accepted: {', '.join(PRECISIONS)}")
    if config.backend != "eager":
        raise UnsupportedError(f"backend {config.backend!r} is not available; accepted: {', '.join(BACKENDS)}")
    # fp32 means true fp32: TF32 off for matmul and cuDNN convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return workload
