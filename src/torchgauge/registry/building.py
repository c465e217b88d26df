"""``create``: one workload built from its registry entry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lookup import get_builder, get_spec
from .model_spec import MODES, SIZES

if TYPE_CHECKING:  # pragma: no cover
    from ..workload import Workload

__all__ = ["create"]


def create(
    name: str,
    mode: str = "train",
    device: str = "cpu",
    batch_size: int | None = None,
    size: str = "full",
    *,
    seed: int = 0,
    **model_kwargs: Any,
) -> Workload:
    """Build a workload: module, optimizer (train), inputs already on ``device``.

    Args:
        name: a registered model name.
        mode: ``"train"`` or ``"eval"``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
        batch_size: overrides the model's default for ``mode`` on ``device``'s type.
        size: ``"full"`` (the real benchmark) or ``"smoke"`` (tiny, same code path).
        seed: seeds weights and synthetic inputs.
        model_kwargs: architecture overrides passed to the builder (e.g. ``embedding_dim=64``).

    Returns:
        A :class:`~torchgauge.workload.Workload` whose ``step()`` runs one iteration.

    Raises:
        UnsupportedError: the model does not support ``mode`` or ``device``.

    Example:
        >>> w = create("resnet18", mode="eval", size="smoke")  # doctest: +SKIP
        >>> out = w.step()  # doctest: +SKIP
    """
    from ..workload import BuildContext, UnsupportedError, seed_everything

    spec = get_spec(name)
    name = spec.name
    if mode not in MODES:
        raise ValueError(f"invalid mode {mode!r}; accepted: {', '.join(MODES)}")
    if size not in SIZES:
        raise ValueError(f"invalid size {size!r}; accepted: {', '.join(SIZES)}")
    if mode not in spec.modes:
        raise UnsupportedError(f"{name} does not support mode {mode!r} (supports {', '.join(spec.modes)})")
    import torch

    dev = torch.device(device)
    if dev.type not in spec.devices:
        raise UnsupportedError(f"{name} does not support device {dev.type!r} (supports {', '.join(spec.devices)})")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"invalid batch size {batch_size}; accepted: a positive integer")
    if size == "full":
        from ..capacity import check_memory_need, device_memory_gib, memory_need_gib

        need = memory_need_gib(spec.extra, mode)
        reason = need and check_memory_need(name, mode, need, device_memory_gib(dev))
        if reason:
            raise UnsupportedError(reason)
    ctx = BuildContext(
        name=name,
        mode=mode,
        device=dev,
        batch_size=batch_size or spec.batch_size(mode, dev.type),
        size=size,
        seed=seed,
        batch_size_given=batch_size is not None,
        domain=spec.domain,
    )
    seed_everything(seed)
    workload = ctx.finish(get_builder(name)(ctx, **model_kwargs))
    return workload
