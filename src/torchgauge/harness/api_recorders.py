"""API-surface recorders: which PyTorch APIs and ATen operators one step reaches.

Two recorders run together around one ``step()``:

- :class:`APIRecorder`, a ``TorchFunctionMode``, sees every overridable Python-level call the
  model makes (``torch.*``, ``torch.nn.functional.*``, Tensor methods and properties). Calls
  made *inside* an API's own implementation are not seen (the mode is paused while it
  handles a call), so the set is the API the model code uses directly: the notion of
  coverage of the TorchBench paper's sec. 2.3 and of TorchBench's api-coverage tool.
- :class:`OpRecorder`, a ``TorchDispatchMode``, sees every ATen operator that reaches the
  dispatcher in forward *and* backward (overloads folded to the base op: ``aten::add.Tensor``
  and ``aten::add.Scalar`` both count as ``aten::add``).

The universe for the API fraction is ``torch.overrides.get_overridable_functions()`` less
``get_ignored_functions()``, named by ``torch.overrides.resolve_name`` (1,381 names on
torch 2.13).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = ["APIRecorder", "OpRecorder", "api_universe", "api_name", "op_name", "module_classes", "record_coverage"]


@lru_cache(maxsize=1)
def api_universe() -> frozenset[str]:
    """Qualified names of the overridable PyTorch API (less the ignored functions)."""
    ignored = {id(f) for f in torch.overrides.get_ignored_functions()}
    names = set()
    for funcs in torch.overrides.get_overridable_functions().values():
        for f in funcs:
            if id(f) not in ignored:
                name = resolve_name(f)
                if name:
                    names.add(name)
    return frozenset(names)


def api_name(func: Callable) -> str:
    """Canonical name of an API function (``torch.Tensor.add``, ``torch.nn.functional.relu``)."""
    name = resolve_name(func)
    if name:
        return name
    module = getattr(func, "__module__", None) or "?"
    return f"{module}.{getattr(func, '__qualname__', getattr(func, '__name__', repr(func)))}"


def op_name(func: Any) -> str:
    """ATen operator name with the overload folded: ``aten::convolution_backward``."""
    packet = getattr(func, "overloadpacket", None)
    namespace = getattr(func, "namespace", "aten")
    base = getattr(packet, "__name__", None) or str(func).split(".")[0]
    return f"{namespace}::{base}"


class APIRecorder(TorchFunctionMode):
    """Collects the names of the Python-level API functions called while active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = api_name(func)
        self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


class OpRecorder(TorchDispatchMode):
    """Collects the ATen operators dispatched while active (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = op_name(func)
        self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def module_classes(module: torch.nn.Module) -> list[str]:
    """``torch.nn`` module classes instantiated in ``module`` (user-defined classes left out)."""
    names = set()
    for m in module.modules():
        cls = type(m)
        if cls.__module__.startswith("torch."):
            names.add(f"{cls.__module__}.{cls.__qualname__}")
    return sorted(names)


def record_coverage(fn: Callable[[], Any]) -> tuple[dict[str, int], dict[str, int]]:
    """Run ``fn`` once under both recorders; returns (API call counts, op call counts)."""
    apis, ops = APIRecorder(), OpRecorder()
    with apis, ops:
        fn()
    return apis.calls, ops.calls
