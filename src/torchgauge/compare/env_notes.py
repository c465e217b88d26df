"""Notes on two result sets that ``compare`` prints beside its verdicts: different hardware, different threads."""

from __future__ import annotations

from typing import Any

from ..results.schema import ResultsFile

__all__ = ["hardware_note", "threads_note"]


def _fingerprints(results: ResultsFile) -> dict[str, dict[str, Any]]:
    """Fingerprint -> environment of every hardware a result set's runs came from."""
    from ..harness.env import machine_fingerprint

    envs = [results.env] + [r.env for r in results.runs if r.env]
    # recomputed where the hardware fields are there: older files hashed the hostname too
    return {
        (machine_fingerprint(e) if e.get("cpu_model") else e["machine_fingerprint"]): e
        for e in envs
        if e.get("cpu_model") or e.get("machine_fingerprint")
    }


def _intra_op_threads(results: ResultsFile) -> set[str]:
    """The intra-op thread counts a result set's runs recorded ("unrecorded" for runs from before the field)."""
    return {str((r.threads or {}).get("intra_op", "unrecorded")) for r in results.runs if r.status == "ok"}


def threads_note(base: ResultsFile, new: ResultsFile) -> str | None:
    """A sentence when the two sides ran with different intra-op thread counts (their times then differ by design)."""
    b, n = _intra_op_threads(base), _intra_op_threads(new)
    if not b or not n or b == n:
        return None
    return (
        f"different intra-op threads: base {', '.join(sorted(b))}, new {', '.join(sorted(n))} "
        "(unrecorded: torch's default, before threads were recorded). Time changes may be the threads'; "
        "rerun one side with `run --threads`."
    )


def hardware_note(base: ResultsFile, new: ResultsFile) -> str | None:
    """A sentence when the two sides, or the shards of one side, ran on different hardware."""
    from ..harness.env import describe_hardware

    b, n = _fingerprints(base), _fingerprints(new)
    notes = []
    for side, prints in (("base", b), ("new", n)):
        if len(prints) > 1:
            notes.append(
                f"the {side} side mixes {len(prints)} hardware types ("
                + "; ".join(describe_hardware(e) for e in prints.values())
                + ")"
            )
    if b and n and not set(b) & set(n):
        notes.append(
            f"base ran on {'; '.join(describe_hardware(e) for e in b.values())}, new on "
            f"{'; '.join(describe_hardware(e) for e in n.values())}"
        )
    if not notes:
        return None
    return "different hardware: " + "; ".join(notes) + ". Time and memory changes may be the hardware's."
