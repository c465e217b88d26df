"""Apply a run configuration's precision, memory format and backend to a fresh workload.

The names come from the registries in :mod:`torchgauge.precision` and
:mod:`torchgauge.backends`; ``RunConfig.options`` (a :class:`torchgauge.config.RunOptions`)
carries the extras:

- ``channels_last`` (bool): channels-last memory format for convolutional models.
- ``compile_mode`` (``default`` | ``reduce-overhead`` | ``max-autotune``) and ``dynamic``
  (bool or unset): passed to ``torch.compile`` by the dynamo backends.
- ``compile_scope`` (``forward`` | ``step``): what the dynamo backends compile, the forward or
  the whole iteration (:data:`torchgauge.config.COMPILE_SCOPES`).
- ``accuracy`` (bool): read by the runner, which checks the run against an eager fp64
  reference after measuring (:mod:`torchgauge.accuracy`).

Order matters: precision first (the cast), then the memory format, then the backend, so
that the compiler sees the final dtypes and layouts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .backends import apply_backend, list_backends
from .config import COMPILE_MODES
from .precision import apply_channels_last, apply_precision, list_precisions

if TYPE_CHECKING:  # pragma: no cover
    from .config import RunConfig
    from .workload import Workload

__all__ = ["apply_config", "build_workload", "PRECISIONS", "BACKENDS", "COMPILE_MODES"]

PRECISIONS = tuple(list_precisions())
BACKENDS = tuple(list_backends())


def apply_config(workload: Workload, config: RunConfig) -> Workload:
    """Configure precision, channels-last and backend in place.

    Raises:
        ValueError: an unknown precision, backend or option value (names what is accepted).
        UnsupportedError: the model or device cannot run this configuration.
    """
    apply_precision(workload, config.precision)
    if config.options.channels_last:
        apply_channels_last(workload)
    apply_backend(workload, config.backend, config.options, warmup=config.warmup)
    return workload


def build_workload(config: RunConfig) -> Workload:
    """A fresh workload for ``config``'s model, mode, device, size, batch size, seed and model
    arguments, not yet configured (see :func:`apply_config`)."""
    from .registry import create

    return create(
        config.model,
        mode=config.mode,
        device=config.device,
        batch_size=config.batch_size,
        size=config.size,
        seed=config.seed,
        **config.model_kwargs,
    )
