"""The hash of a model's code, which every run record carries (as asv versions a benchmark by its source).

The hash covers the source of the module that registered the model (a family file, a
``--model-file``, a zoo adapter) and of every module under ``torchgauge.models`` that it
imports, directly or through those modules (``models/common`` helpers, a family's shared
blocks). Editing any of them changes the hash; editing the harness, torch or anything else
does not. ``compare`` lists the configurations whose hash differs between its two sides
(:mod:`torchgauge.compare.code_changes`): a difference there may be the model edit, not the stack.

Packages that merely contain a module (``torchgauge.models.vision``) are not part of its
code, so registering a new family does not change the hash of the others.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from pathlib import Path

__all__ = ["HASH_HEX_DIGITS", "MODELS_PACKAGE", "model_code_hash", "model_sources"]

# Modules whose source counts as model code when a model's module imports them.
MODELS_PACKAGE = "torchgauge.models"
# Hex digits of the SHA-256 kept in a record: 64 bits, no collision among a suite's models.
HASH_HEX_DIGITS = 16
# The torchgauge package folder: built-in modules are read from here, without importing them.
_PACKAGE_DIR = Path(__file__).resolve().parent


def model_code_hash(module: str) -> str | None:
    """The hash of the code of the models that ``module`` registers; None when its source is unreadable.

    Args:
        module: the registering module, ``ModelSpec.module`` (e.g. ``torchgauge.models.vision.resnet``).

    Returns:
        ``HASH_HEX_DIGITS`` hex digits, the same in every process for the same files; None for a
        module without a source file (defined in ``__main__`` or a notebook).

    Example:
        >>> model_code_hash(get_spec("resnet18").module)  # doctest: +SKIP
        '3f1c0e5a9b27d4c1'
    """
    sources = model_sources(module)
    if not sources:
        return None
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(name.encode() + b"\0" + sources[name] + b"\0")
    return digest.hexdigest()[:HASH_HEX_DIGITS]


def model_sources(module: str) -> dict[str, bytes]:
    """The source bytes that make up a model's code: ``""`` -> ``module``'s own file, then each
    ``torchgauge.models`` module it imports (transitively) by dotted name. Empty: no source."""
    root = _source_path(module)
    if root is None:
        return {}
    sources: dict[str, bytes] = {}
    pending = [(module, root)]
    while pending:
        name, path = pending.pop()
        key = "" if name == module else name  # the root by role: a user file's module name holds its path
        if key in sources:
            continue
        try:
            text = path.read_bytes()
        except OSError:
            if key == "":
                return {}
            continue  # an imported module gone while running: the rest still counts
        sources[key] = text
        for imported in _imported_model_modules(name, path, text):
            found = _source_path(imported)
            if found is not None and imported not in sources:
                pending.append((imported, found))
    return sources


def _source_path(module: str) -> Path | None:
    """The file of ``module``: read from the package folder for torchgauge's own modules (no import),
    else from the loaded module or the import system."""
    if module == "torchgauge" or module.startswith("torchgauge."):
        base = _PACKAGE_DIR.joinpath(*module.split(".")[1:])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None
    loaded = sys.modules.get(module)
    origin = getattr(loaded, "__file__", None) if loaded is not None else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    path = Path(origin) if origin else None
    return path if path is not None and path.suffix == ".py" and path.is_file() else None


def _imported_model_modules(module: str, path: Path, text: bytes) -> list[str]:
    """Dotted names of the ``torchgauge.models`` modules that the source of ``module`` imports."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError:
        return []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.module, node.level)
            if base is None:
                continue
            for alias in node.names:
                # ``from . import blocks`` imports a module; ``from .blocks import Head`` a name of one
                submodule = f"{base}.{alias.name}"
                found.append(submodule if _source_path(submodule) is not None else base)
    return [name for name in dict.fromkeys(found) if name.startswith(MODELS_PACKAGE + ".")]


def _absolute(package: str, name: str | None, level: int) -> str | None:
    """The absolute module of ``from <level dots><name> import ...`` inside ``package``."""
    if level == 0:
        return name
    parts = package.split(".") if package else []
    if level - 1 > len(parts) or not parts:
        return None  # a relative import outside any package (a --model-file has none)
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([name] if name else []))
