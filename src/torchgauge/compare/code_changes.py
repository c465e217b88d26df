"""Which configurations ran different model code on the two sides of a comparison.

Every record carries the hash of its model's code (:mod:`torchgauge.model_code`). When a
configuration's hash differs between base and new, a change in its numbers may come from the
model edit rather than from the PyTorch stack; ``compare`` says so in a note. Records without a
hash (written before it was kept, or from a source-less model) are never called changed.

Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from ..results.schema import RunConfig, RunRecord
from .matching import config_key

__all__ = ["CODE_CHANGE_MODELS_SHOWN", "code_change_note", "model_code_changes"]

# Models named in the note before "and N more".
CODE_CHANGE_MODELS_SHOWN = 10


def _hashes(records: Iterable[RunRecord]) -> dict[Hashable, tuple[RunConfig, set[str]]]:
    out: dict[Hashable, tuple[RunConfig, set[str]]] = {}
    for record in records:
        # keyed as compare pairs runs
        seen = out.setdefault(config_key(record), (record.config, set()))[1]
        if record.model_code_hash is not None:
            seen.add(record.model_code_hash)
    return out


def model_code_changes(base: Iterable[RunRecord], new: Iterable[RunRecord]) -> list[RunConfig]:
    """The configurations present on both sides whose model code hash differs, in base order.

    A side holding several runs of one configuration counts as changed when any of its hashes
    is absent from the other side's.

    Example:
        >>> [c.label() for c in model_code_changes(base.runs, new.runs)]  # doctest: +SKIP
        ['resnet18/eval/cpu/fp32/eager']
    """
    new_hashes = _hashes(new)
    changed = []
    for key, (config, base_seen) in _hashes(base).items():
        new_seen = new_hashes.get(key, (config, set()))[1]
        if base_seen and new_seen and base_seen != new_seen:
            changed.append(config)
    return changed


def code_change_note(changed: Iterable[RunConfig]) -> str | None:
    """The one-line note naming the models whose code changed; None when none did."""
    models = list(dict.fromkeys(config.model for config in changed))
    if not models:
        return None
    shown = ", ".join(models[:CODE_CHANGE_MODELS_SHOWN])
    if len(models) > CODE_CHANGE_MODELS_SHOWN:
        shown += f" and {len(models) - CODE_CHANGE_MODELS_SHOWN} more"
    return f"model code changed: {shown} — a difference there may be the model edit, not the stack"
