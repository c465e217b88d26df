"""Other model zoos as optional adapters: ``timm:NAME``, ``torchvision:NAME``, ``hf:MODEL_TYPE``.

A zoo name is registered on first use (:func:`torchgauge.registry.resolve_name` calls
:func:`register_zoo_model`), in the parent and again in each worker, and then runs through
the same harness as the built-in models: same workload contract, precisions, backends,
metrics and results. Nothing is downloaded: timm and torchvision models are built with
``pretrained=False`` / ``weights=None``, Hugging Face models are random-initialised from the
model type's default config.

The packages are optional. A missing one, or one that does not import with the installed
torch, makes the name an :class:`~torchgauge.registry.UnknownModelError` that says so.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..registry import ModelSpec, UnknownModelError, add_spec

__all__ = ["ZOOS", "import_zoo_package", "register_zoo_model"]

# prefix -> (adapter module in this package, the package it needs, what follows the colon)
ZOOS = {
    "timm": ("timm_models", "timm", "NAME"),
    "torchvision": ("torchvision_models", "torchvision", "NAME"),
    "hf": ("hf_models", "transformers", "MODEL_TYPE"),
}


def import_zoo_package(package: str, name: str) -> ModuleType:
    """Import ``package`` for zoo model ``name``; a clear UnknownModelError when it is missing or broken."""
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if exc.name != package and not (exc.name or "").startswith(package + "."):
            raise UnknownModelError(f"{name}: {package} is installed but does not import: {exc}") from None
        raise UnknownModelError(
            f"{name} needs the {package} package, which is not installed "
            f"(pip install {package}, a build for your torch)"
        ) from None
    except Exception as exc:  # e.g. torchvision built for another torch: operator registration fails
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UnknownModelError(
            f"{name}: {package} is installed but does not import with this torch ({type(exc).__name__}: {first})"
        ) from None


def register_zoo_model(name: str) -> ModelSpec:
    """Register zoo model ``name`` (``zoo:model``) and return its spec.

    Raises:
        UnknownModelError: an unknown zoo, an empty model part, a missing package, or a
            model the zoo does not have (the message says which).
    """
    zoo, _, model = name.partition(":")
    if zoo not in ZOOS:
        accepted = ", ".join(f"{z}:{what}" for z, (_, _, what) in ZOOS.items())
        raise UnknownModelError(f"unknown model zoo {zoo!r} in {name!r}; accepted: {accepted}")
    module, package, what = ZOOS[zoo]
    if not model:
        raise UnknownModelError(f"{name!r} names no model; accepted: {zoo}:{what}")
    adapter = importlib.import_module(f"{__name__}.{module}")
    return add_spec(adapter.zoo_spec(model, import_zoo_package(package, name)))
