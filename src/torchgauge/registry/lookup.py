"""Finding models in the registry: patterns (``list_models``), one name (``resolve_name``,
``get_spec``), the builder behind it (``get_builder``), names read from files (``validate_model_names``).
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .entries import load_builtin_index, specs
from .model_spec import DOMAINS, AmbiguousModelError, ModelSpec, UnknownModelError

if TYPE_CHECKING:  # pragma: no cover
    from ..workload import Workload

__all__ = [
    "get_builder",
    "get_spec",
    "list_models",
    "model_domain",
    "natural_key",
    "resolve_name",
    "validate_model_names",
]


def natural_key(name: str) -> list[Any]:
    # resnet18 < resnet50 < resnet101
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def list_models(
    include: str | Iterable[str] | None = None,
    exclude: str | Iterable[str] | None = None,
    *,
    domain: str | Iterable[str] | None = None,
    tags: str | Iterable[str] | None = None,
    module: str | None = None,
) -> list[str]:
    """Names of registered models, naturally sorted.

    Args:
        include: fnmatch pattern(s); a name matching any is kept (default: all).
        exclude: fnmatch pattern(s) removed after ``include``.
        domain: keep models of these domains.
        tags: keep models carrying *all* of these tags.
        module: keep models registered by this module: its last component (``"resnet"``) or
            an fnmatch pattern of the full module path.

    Example:
        >>> list_models("resnet*", domain="vision")  # doctest: +SKIP
        ['resnet18', 'resnet50', 'resnet152']
    """
    load_builtin_index()
    names = list(specs)
    if include:
        pats = [include] if isinstance(include, str) else list(include)
        names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]
    if exclude:
        pats = [exclude] if isinstance(exclude, str) else list(exclude)
        names = [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in pats)]
    if domain:
        doms = {domain} if isinstance(domain, str) else set(domain)
        unknown = doms - set(DOMAINS)
        if unknown:
            raise ValueError(f"unknown domain {sorted(unknown)[0]!r}; accepted: {', '.join(DOMAINS)}")
        names = [n for n in names if specs[n].domain in doms]
    if tags:
        want = {tags} if isinstance(tags, str) else set(tags)
        names = [n for n in names if want <= specs[n].tags]
    if module:
        names = [
            n
            for n in names
            if specs[n].module.rsplit(".", 1)[-1] == module or fnmatch.fnmatchcase(specs[n].module, module)
        ]
    return sorted(names, key=natural_key)


def resolve_name(name: str) -> str:
    """The registered name that ``name`` means.

    An exact match wins; otherwise a case-insensitive match is taken when it is the only one
    (``hf_bert`` -> ``hf_Bert``). A zoo name (``timm:NAME``, ``torchvision:NAME``,
    ``hf:MODEL_TYPE``) is registered on first use by :mod:`torchgauge.zoo`.

    Raises:
        UnknownModelError: no model of that name (close matches listed), several models
            differing only in case (all listed), or a zoo whose package is missing.
    """
    load_builtin_index()
    if name in specs:
        return name
    if ":" in name:
        from ..zoo import register_zoo_model

        return register_zoo_model(name).name
    folded = [n for n in specs if n.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    if folded:
        raise AmbiguousModelError(
            f"model name {name!r} is ambiguous: it matches {', '.join(sorted(folded, key=natural_key))} "
            "case-insensitively; give the exact name"
        )
    by_lower = {n.lower(): n for n in specs}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=5, cutoff=0.5)
    hint = f"; did you mean: {', '.join(by_lower[c] for c in close)}?" if close else "; see `torchgauge list`"
    raise UnknownModelError(f"unknown model {name!r}{hint}")


def get_spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``name`` (resolved by :func:`resolve_name`); unknown names raise."""
    return specs[resolve_name(name)]


def model_domain(name: str) -> str:
    """The domain of a registered model; "" for a name that is not registered."""
    try:
        return get_spec(name).domain
    except UnknownModelError:
        return ""


def get_builder(name: str) -> Callable[..., Workload]:
    """The builder of ``name``, importing its module if the model was listed from the index.

    Raises:
        UnknownModelError: ``name`` is not registered.
        RuntimeError: the index names a module that no longer registers ``name``.
    """
    spec = get_spec(name)
    if spec.builder is None:
        importlib.import_module(spec.module)
        spec = specs[name]
        if spec.builder is None:
            raise RuntimeError(
                f"the model index says {spec.module} registers {name!r} but it does not; "
                "regenerate it with `python -m torchgauge.model_index`"
            )
    return spec.builder


def validate_model_names(names: Iterable[str]) -> list[str]:
    """``names`` read from a file or a database, checked to be registered models.

    Such names are data: one that is not registered (say ``--model-file=/tmp/x.py`` in a
    crafted results file) must never reach a command line, where it would be parsed as
    an option or a wildcard pattern. Load the user's own ``--model-file`` files first.

    Raises:
        UnknownModelError: a name is not registered.
    """
    load_builtin_index()
    out = []
    for name in names:
        if not isinstance(name, str) or name not in specs or name.startswith("-") or any(ch in name for ch in "*?[]"):
            raise UnknownModelError(f"{name!r} is not a registered model name; refusing to pass it to a command")
        out.append(name)
    return out
