"""The built-in models' metadata as a generated JSON index, so listing them imports no model.

``torchgauge list``, ``--help`` and planning need names, domains, batch sizes and tags,
not the model code: importing every model file (and torch) took 1.4-3.3 s on a quiet
2-core CPU and 35 s under load. The registry reads :data:`INDEX_PATH` instead and imports a
model's module only when its builder is needed (``create``).

The index is generated from the ``@register_model`` calls themselves, never edited by hand::

    python -m torchgauge.model_index          # rewrite src/torchgauge/models/_index.json
    python -m torchgauge.model_index --check  # exit 1 if it is out of date

``tests/test_model_index.py`` regenerates it and compares, so a model added without
regenerating fails the test suite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .registry import ModelSpec

__all__ = [
    "INDEX_PATH",
    "BUILTIN_PREFIX",
    "build_index",
    "read_index",
    "render_index",
    "spec_entry",
    "spec_from_entry",
    "main",
]

INDEX_PATH = Path(__file__).resolve().parent / "models" / "_index.json"
# Modules under this prefix are built in and indexed; user files and plugins are not.
BUILTIN_PREFIX = "torchgauge.models."
INDEX_VERSION = 1


def _json_value(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def spec_entry(spec: ModelSpec) -> dict[str, Any]:
    """Everything in a :class:`ModelSpec` but its builder, as JSON.

    ``extra`` keeps only JSON values (e.g. ``torchbench_name``); objects such as a
    Hugging Face config record stay with the builder's module, which is where they are used.
    """
    return {
        "name": spec.name,
        "domain": spec.domain,
        "task": spec.task,
        "source": spec.source,
        "train_batch_size": spec.train_batch_size,
        "eval_batch_size": spec.eval_batch_size,
        "cpu_batch_size": list(spec.cpu_batch_size) if spec.cpu_batch_size else None,
        "samples_per_step": list(spec.samples_per_step) if spec.samples_per_step else None,
        "modes": list(spec.modes),
        "devices": list(spec.devices),
        "tags": sorted(spec.tags),
        "param_count": spec.param_count,
        "unsupported_precisions": list(spec.unsupported_precisions),
        "torchbench_precision": {d: dict(m) for d, m in sorted(spec.torchbench_precision.items())},
        "notes": spec.notes,
        "module": spec.module,
        "preload": list(spec.preload),
        "extra": {k: v for k, v in sorted(spec.extra.items()) if _json_value(v)},
    }


def spec_from_entry(entry: dict[str, Any]) -> ModelSpec:
    """The :class:`ModelSpec` an index entry describes, with no builder (its module is not imported)."""
    from .registry import ModelSpec

    cpu_batch_size = entry.get("cpu_batch_size")  # absent from indexes written before it was kept
    return ModelSpec(
        name=entry["name"],
        builder=None,
        domain=entry["domain"],
        task=entry["task"],
        source=entry["source"],
        train_batch_size=entry["train_batch_size"],
        eval_batch_size=entry["eval_batch_size"],
        cpu_batch_size=tuple(cpu_batch_size) if cpu_batch_size else None,
        samples_per_step=tuple(samples) if (samples := entry.get("samples_per_step")) else None,
        modes=tuple(entry["modes"]),
        devices=tuple(entry["devices"]),
        tags=frozenset(entry["tags"]),
        param_count=entry["param_count"],
        unsupported_precisions=tuple(entry["unsupported_precisions"]),
        torchbench_precision=entry.get("torchbench_precision") or {},  # absent from older indexes
        notes=entry["notes"],
        module=entry["module"],
        preload=tuple(entry["preload"]),
        extra=dict(entry["extra"]),
    )


def build_index() -> list[dict[str, Any]]:
    """Import every built-in model module and return one entry per registered model, by name.

    Raises:
        ImportError: a model package failed to import (its models would silently vanish).
    """
    from .models import IMPORT_ERRORS, import_all
    from .registry import get_spec, list_models

    import_all()
    if IMPORT_ERRORS:
        failed = ", ".join(sorted(IMPORT_ERRORS))
        raise ImportError(
            f"model packages failed to import ({failed}); fix them before indexing:\n"
            + "\n".join(IMPORT_ERRORS.values())
        )
    specs = [get_spec(n) for n in list_models()]
    # builder None: listed by the current index but registered by no module any more
    return sorted(
        (spec_entry(s) for s in specs if s.module.startswith(BUILTIN_PREFIX) and s.builder is not None),
        key=lambda e: e["name"],
    )


def render_index(entries: list[dict[str, Any]]) -> str:
    """The index file's text: stable key order and one model per block, for readable diffs."""
    return json.dumps({"version": INDEX_VERSION, "models": entries}, indent=1, sort_keys=True) + "\n"


def read_index(path: Path = INDEX_PATH) -> list[dict[str, Any]]:
    """The indexed entries; an empty list when the file is missing (a source tree mid-edit)."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    if doc.get("version") != INDEX_VERSION:
        raise ValueError(
            f"{path}: index version {doc.get('version')!r}; accepted: {INDEX_VERSION} "
            "(regenerate with `python -m torchgauge.model_index`)"
        )
    return doc["models"]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the index, or with ``--check`` report whether it is current (exit 1 if not)."""
    args = sys.argv[1:] if argv is None else argv
    bad = [a for a in args if a != "--check"]
    if bad:
        print(f"unknown argument {bad[0]!r}; accepted: --check", file=sys.stderr)
        return 2
    entries = build_index()
    text = render_index(entries)
    current = INDEX_PATH.read_text() if INDEX_PATH.exists() else ""
    if "--check" in args:
        if text != current:
            print(f"{INDEX_PATH} is out of date; run `python -m torchgauge.model_index`", file=sys.stderr)
            return 1
        return 0
    if text != current:
        INDEX_PATH.write_text(text)
    print(f"{INDEX_PATH}: {len(entries)} models")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
