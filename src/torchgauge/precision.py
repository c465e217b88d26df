"""Numeric precisions a run can use: a small registry keyed by name (``--precision``).

The TorchBench paper (sec. 2.2) runs every model in its default precision and lets the
user pick others; each entry here turns a freshly built fp32 workload into that
precision in place:

- ``fp32``: true fp32, TF32 off for matmul and cuDNN convolutions (the default).
- ``tf32``: TF32 tensor cores on for matmul and cuDNN (CUDA Ampere+; on CPU the same as fp32).
- ``fp16`` / ``bf16``: module parameters and floating buffers, floating inputs and
  targets, and floating state tensors the workload holds (replay buffers, environments)
  cast to the dtype; integer tensors (token ids, labels, indices) are left alone.
- ``amp``: ``torch.autocast`` around forward and loss only (``Workload.autocast``), fp16 on
  CUDA and bf16 elsewhere; weights stay fp32 and backward and the optimizer step run
  outside autocast. fp16 AMP training uses a ``torch.amp.GradScaler``.

New precisions register with ``@register_precision("name", "description")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .workload import UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    from .workload import Workload

__all__ = [
    "PrecisionSpec",
    "register_precision",
    "get_precision",
    "list_precisions",
    "apply_precision",
    "apply_channels_last",
    "amp_dtype",
    "cast_workload",
]

# How deep cast_workload looks into plain objects the workload holds (env -> state -> tensor).
_STATE_DEPTH = 3
# Workload attributes that are not state tensors: handled explicitly or never cast.
_NOT_STATE = frozenset({"ctx", "module", "inputs", "targets", "optimizer", "loss_fn", "autocast", "grad_scaler"})

PrecisionFn = Callable[["Workload"], None]  # configures a workload in place


@dataclass(frozen=True)
class PrecisionSpec:
    """Registry record of one precision."""

    name: str
    description: str  # one line, shown in --help and errors
    apply: PrecisionFn  # configures a freshly built fp32 workload in place


_PRECISIONS: dict[str, PrecisionSpec] = {}


def register_precision(name: str, description: str) -> Callable[[PrecisionFn], PrecisionFn]:
    """Register ``fn(workload) -> None`` as precision ``name`` (duplicates raise)."""

    def decorator(fn: PrecisionFn) -> PrecisionFn:
        if name in _PRECISIONS:
            raise ValueError(f"precision {name!r} is already registered")
        _PRECISIONS[name] = PrecisionSpec(name, description, fn)
        return fn

    return decorator


def list_precisions() -> list[str]:
    """Registered precision names, in registration order (fp32 first)."""
    return list(_PRECISIONS)


def get_precision(name: str) -> PrecisionSpec:
    """The :class:`PrecisionSpec` of ``name``; unknown names raise ValueError listing the accepted ones."""
    try:
        return _PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision {name!r}; accepted: {', '.join(_PRECISIONS)}") from None


def apply_precision(workload: Workload, name: str) -> None:
    """Put ``workload`` in precision ``name``.

    Raises:
        ValueError: ``name`` is not registered.
        UnsupportedError: the model's registry entry lists ``name`` in ``unsupported_precisions``.
    """
    spec = get_precision(name)
    _check_model_supports(workload.name, name)
    spec.apply(workload)


def _check_model_supports(model: str, precision: str) -> None:
    from .registry import UnknownModelError, get_spec

    try:
        model_spec = get_spec(model)
    except UnknownModelError:  # a workload built by hand, outside the registry
        return
    if precision in model_spec.unsupported_precisions:
        why = f": {model_spec.notes}" if model_spec.notes else ""
        raise UnsupportedError(f"{model} does not support precision {precision!r}{why}")


def _set_tf32(enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def amp_dtype(device: torch.device) -> torch.dtype:
    """Autocast dtype for ``device``: fp16 on CUDA (tensor cores, GradScaler), bf16 elsewhere."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


# Complex tensors follow a real cast to the complex dtype of the same precision. Casting a
# complex tensor to a real dtype (what ``module.to(dtype)`` does) silently drops the
# imaginary part. bfloat16 has no complex counterpart.
_COMPLEX_OF = {torch.float64: torch.complex128, torch.float32: torch.complex64, torch.float16: torch.complex32}


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # Only floating and complex tensors change: ids, labels, masks and indices keep their dtype.
    if t.is_floating_point():
        return t.to(dtype)
    if t.is_complex():
        if dtype not in _COMPLEX_OF:
            raise UnsupportedError(
                f"complex tensors have no {dtype} counterpart; accepted: " + ", ".join(str(d) for d in _COMPLEX_OF)
            )
        return t.to(_COMPLEX_OF[dtype])
    return t


def _cast_state(obj: Any, dtype: torch.dtype, depth: int, seen: set[int]) -> Any:
    """``obj`` with its floating tensors cast, recursing into containers and plain objects."""
    if isinstance(obj, torch.Tensor):
        if isinstance(obj, nn.Parameter):  # parameters belong to a module; module.to handles them
            return obj
        return _cast(obj, dtype)
    if depth <= 0 or id(obj) in seen:
        return obj
    opaque = (nn.Module, torch.optim.Optimizer, torch.Generator, type)
    if isinstance(obj, opaque) or callable(obj) and not hasattr(obj, "__dict__"):
        return obj
    seen.add(id(obj))
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            obj[k] = _cast_state(v, dtype, depth - 1, seen)
        return obj
    if isinstance(obj, list):
        obj[:] = [_cast_state(v, dtype, depth - 1, seen) for v in obj]
        return obj
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_cast_state(v, dtype, depth - 1, seen) for v in obj)
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and type(obj).__module__ not in ("builtins", "torch"):
        for k, v in list(attrs.items()):
            new = _cast_state(v, dtype, depth - 1, seen)
            if new is not v:
                attrs[k] = new
    return obj


def cast_workload(workload: Workload, dtype: torch.dtype) -> None:
    """Cast module weights, floating inputs/targets and floating workload state to ``dtype``.

    ``module.to`` keeps parameter identity, so an optimizer built before the cast still
    steps the cast parameters (its state is created lazily, in the new dtype).
    """
    workload.module._apply(lambda t: _cast(t, dtype))  # module.to(dtype) would make complex params real
    workload.map_inputs(lambda t: _cast(t, dtype))
    seen: set[int] = {id(workload)}
    for key, value in list(vars(workload).items()):
        if key not in _NOT_STATE:
            new = _cast_state(value, dtype, _STATE_DEPTH, seen)
            if new is not value:
                setattr(workload, key, new)


def apply_channels_last(workload: Workload) -> None:
    """channels_last memory format for a convolutional model: module and every 4-D input.

    Raises:
        UnsupportedError: the module has no 2-D convolution, so the format changes nothing.
    """
    if not any(isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)) for m in workload.module.modules()):
        raise UnsupportedError(f"{workload.name}: --channels-last needs a model with 2-D convolutions")
    workload.module.to(memory_format=torch.channels_last)
    workload.map_inputs(lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t)


# -- the built-in precisions ------------------------------------------------------------------
@register_precision("fp32", "fp32 weights and math; TF32 off (the default)")
def _fp32(workload: Workload) -> None:
    _set_tf32(False)


@register_precision("tf32", "fp32 weights; TF32 tensor cores on for matmul and cuDNN (same as fp32 on CPU)")
def _tf32(workload: Workload) -> None:
    _set_tf32(True)


@register_precision("fp16", "module, floating inputs and state cast to float16")
def _fp16(workload: Workload) -> None:
    _set_tf32(False)
    cast_workload(workload, torch.float16)


@register_precision("bf16", "module, floating inputs and state cast to bfloat16")
def _bf16(workload: Workload) -> None:
    _set_tf32(False)
    cast_workload(workload, torch.bfloat16)


@register_precision("amp", "autocast around forward and loss: fp16 on CUDA (with GradScaler), bf16 elsewhere")
def _amp(workload: Workload) -> None:
    _set_tf32(False)
    device = workload.device
    dtype = amp_dtype(device)
    workload.autocast = functools.partial(torch.autocast, device_type=device.type, dtype=dtype)
    if workload.mode == "train" and dtype == torch.float16:
        # fp16 gradients underflow without loss scaling; Workload.train_step uses it.
        workload.grad_scaler = torch.amp.GradScaler(device.type)
