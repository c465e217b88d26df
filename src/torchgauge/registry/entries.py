"""The registry's table: ``@register_model`` and ``add_spec`` fill it, the generated index and
the entry-point plugins list the rest without importing model code.

Every lookup (:mod:`.lookup`) reads :data:`specs` after :func:`load_builtin_index` ran once.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .model_spec import DOMAINS, MODES, ModelSpec, check_torchbench_precision

if TYPE_CHECKING:  # pragma: no cover
    from ..workload import Workload

__all__ = [
    "ENTRY_POINT_GROUP",
    "add_spec",
    "load_builtin_index",
    "load_plugins",
    "names_by_module",
    "register_model",
    "specs",
]

ENTRY_POINT_GROUP = "torchgauge.models"

# name -> spec of every registered model (indexed built-ins have builder None until imported)
specs: dict[str, ModelSpec] = {}
# module -> names it registered (a family: list_models(module=...))
names_by_module: dict[str, set[str]] = {}
_builtins_loaded = False


def register_model(
    *,
    domain: str,
    task: str,
    source: str,
    batch_size: int | tuple[int, int],
    cpu_batch_size: int | tuple[int, int] | None = None,
    samples_per_step: tuple[int | None, int | None] | None = None,
    modes: Iterable[str] = MODES,
    devices: Iterable[str] = ("cpu", "cuda"),
    tags: Iterable[str] = (),
    param_count: int | None = None,
    unsupported_precisions: Iterable[str] = (),
    torchbench_precision: Mapping[str, Mapping[str, str]] | None = None,
    notes: str = "",
    preload: Iterable[str] = (),
    **extra: Any,
) -> Callable[[Callable[..., Workload]], Callable[..., Workload]]:
    """Register the decorated builder under its function name.

    Args:
        domain: one of :data:`DOMAINS`.
        task: the model's task, free text in snake_case.
        source: the paper or implementation the architecture follows.
        batch_size: one int for both modes, or ``(train, eval)``.
        cpu_batch_size: the defaults on CPU where they differ, same form; None: as ``batch_size``.
        samples_per_step: ``(train, eval)`` samples one step processes where that is fixed whatever
            the batch size (None in a mode: the batch); throughput counts these (``ModelSpec.step_samples``).
        modes: subset of ``("train", "eval")``.
        devices: device types supported (``"cpu"``, ``"cuda"``, ...).
        tags: labels as data (``"mlperf"``, ``"hf"``, ...).
        param_count: reference parameter count, checked by tests where given.
        unsupported_precisions: precisions the model cannot run in.
        torchbench_precision: TorchBench run.py's default precision where it is not fp32, as
            device type -> mode -> precision (``{"cuda": {"eval": "fp16"}}``); ``--precision
            torchbench`` runs it. Cite TorchBench's declaration next to it.
        notes: free text shown by ``torchgauge list``.
        preload: modules the builder imports lazily and slowly; the runner imports them
            once in its forkserver when the model is selected, so workers start warm.
        extra: further metadata kept in ``ModelSpec.extra``.

    Raises:
        ValueError: on a duplicate name, an unknown domain or mode, a bad ``torchbench_precision``.
    """
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; accepted: {', '.join(DOMAINS)}")
    modes = tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"invalid modes {modes!r}; accepted: {', '.join(MODES)}")
    train_bs, eval_bs = (batch_size, batch_size) if isinstance(batch_size, int) else batch_size
    cpu_bs = (cpu_batch_size, cpu_batch_size) if isinstance(cpu_batch_size, int) else cpu_batch_size
    devices = tuple(devices)
    tb_precision = check_torchbench_precision(torchbench_precision or {}, modes, devices)

    def decorator(fn: Callable[..., Workload]) -> Callable[..., Workload]:
        name = fn.__name__
        spec = ModelSpec(
            name=name,
            builder=fn,
            domain=domain,
            task=task,
            source=source,
            train_batch_size=int(train_bs),
            eval_batch_size=int(eval_bs),
            cpu_batch_size=None if cpu_bs is None else (int(cpu_bs[0]), int(cpu_bs[1])),
            samples_per_step=None if samples_per_step is None else tuple(samples_per_step),
            modes=modes,
            devices=devices,
            tags=frozenset(tags),
            param_count=param_count,
            unsupported_precisions=tuple(unsupported_precisions),
            torchbench_precision=tb_precision,
            notes=notes,
            module=fn.__module__,
            preload=tuple(preload),
            extra=dict(extra),
        )
        add_spec(spec)
        mod = sys.modules.get(fn.__module__)
        if mod is not None and hasattr(mod, "__all__") and name not in mod.__all__:
            mod.__all__.append(name)
        return fn

    return decorator


def add_spec(spec: ModelSpec) -> ModelSpec:
    """Register a ready :class:`ModelSpec` (``register_model`` and the zoo adapters); duplicates raise."""
    indexed = specs.get(spec.name)  # an entry of the generated index is replaced by its real spec
    if indexed is not None and not (indexed.builder is None and indexed.module == spec.module):
        raise ValueError(f"model {spec.name!r} is already registered by {indexed.module}; names must be unique")
    specs[spec.name] = spec
    names_by_module.setdefault(spec.module, set()).add(spec.name)
    return spec


def load_builtin_index() -> None:
    """List the built-in models from the generated index (no model import) and load plugins; once."""
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        from ..model_index import read_index, spec_from_entry

        for entry in read_index():
            if entry["name"] in specs:  # its module was imported first: the real spec stands
                continue
            specs[entry["name"]] = spec_from_entry(entry)
            names_by_module.setdefault(entry["module"], set()).add(entry["name"])
        load_plugins()


def load_plugins() -> list[str]:
    """Import every package registered under the ``torchgauge.models`` entry-point group."""
    loaded = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        ep.load()
        loaded.append(ep.name)
    return loaded
