"""Confirmation reruns (``compare --confirm``): re-measure only what was flagged, in fresh processes.

Why: wall-clock time on a busy machine moves 11-15% between fresh processes, and the
samples of one process share that offset. Comparing one base process with one new process
therefore tests within-process noise only, and a 7% threshold false-alarms whenever the
two processes happen to land far apart (docs/regression-detection.md measures how often).
Rerunning each flagged configuration in ``k`` fresh processes per side, alternating base
and candidate (ABBA order, so a drift in machine load hits both sides alike), turns each
process into one independent observation: the rank test then runs on ``k`` process
medians per side (:func:`~torchgauge.stats.compare.pooled_or_group_medians`) and its
false-alarm rate holds against between-process noise too.

Each side runs ``python -m torchgauge.cli run ...`` in its own interpreter (a virtual
environment per build), once per round for all flagged configurations together; as in
``run --rounds``, deterministic metrics (operator counts, FLOPs, the tensor peak) are
re-measured in the first round only (:func:`torchgauge.config.later_round`), and a confirmation
of such counts alone takes one round. The
model names come from results files, possibly made elsewhere: they are checked against
the registry first (:func:`~torchgauge.registry.validate_model_names`) and passed after
``--``, and every other value is bound to its option as ``--opt=value``, so nothing in a
file can become an option (``--model-file=/some/file.py`` would run that file).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..compare.regression import Comparison, Finding, compare_results
from ..config import later_round
from ..results.schema import ResultsFile, RunConfig, RunRecord, load_results
from ..stats.compare import rounds_needed

__all__ = [
    "ConfirmError",
    "ConfirmRequest",
    "confirm_comparison",
    "recorded_intra_op_threads",
    "rerun_command",
    "rerun_configs",
]


class ConfirmError(RuntimeError):
    """A confirmation rerun could not run (the message names the interpreter and its error)."""


@dataclass(frozen=True)
class ConfirmRequest:
    """How to confirm: which interpreters, how many rounds, per-run limits."""

    baseline_python: str = sys.executable  # interpreter with the base build installed
    candidate_python: str = sys.executable  # interpreter with the new build installed
    rounds: int | None = None  # processes per side; None: rounds_needed(flagged configs, alpha)
    timeout_s: float = 900.0  # per run, passed to `torchgauge run --timeout`
    model_files: tuple[str, ...] = ()  # files registering extra models, passed to both sides
    # intra-op threads of the reruns (`--threads`): those the compared runs recorded, so that
    # the confirmation measures what was flagged; None: the rerun's own default
    threads: int | None = None


def recorded_intra_op_threads(records: Sequence[RunRecord]) -> int | None:
    """The intra-op thread count the records ran with, when they all agree (else None)."""
    counts = {(r.threads or {}).get("intra_op") for r in records if r.threads}
    return counts.pop() if len(counts) == 1 else None


def _group_key(c: RunConfig) -> tuple:
    """Configurations with the same key can be re-measured by one ``torchgauge run`` invocation:
    everything but the model (the one place confirm builds a configuration key of its own)."""
    return (c.mode, c.device, c.precision, c.backend, c.batch_size, c.size, c.repeat, c.warmup, c.seed, c.metrics)


def rerun_command(python: str, configs: Sequence[RunConfig], output: Path, request: ConfirmRequest) -> list[str]:
    """The ``torchgauge run`` command line re-measuring ``configs`` (all of one group)."""
    c = configs[0]
    cmd = [
        python,
        "-m",
        "torchgauge.cli",
        "run",
        f"--mode={c.mode}",
        f"--device={c.device}",
        f"--precision={c.precision}",
        f"--backend={c.backend}",
        f"--size={c.size}",
        f"--repeat={c.repeat}",
        f"--warmup={c.warmup}",
        f"--seed={c.seed}",
        f"--metrics={','.join(c.metrics)}",
        f"--timeout={request.timeout_s}",
        f"--output={output}",
        "--quiet",
        "--no-db",
    ]
    if c.batch_size is not None:
        cmd.append(f"--batch-size={c.batch_size}")
    cmd += [f"--model-file={path}" for path in request.model_files]
    if request.threads is not None:
        cmd.append(f"--threads={request.threads}")
    return [*cmd, "--", *sorted({x.model for x in configs})]


def rerun_configs(
    python: str, configs: Sequence[RunConfig], workdir: Path, request: ConfirmRequest, tag: str
) -> ResultsFile:
    """Run ``configs`` once each with ``python`` (fresh worker processes); their records, merged."""
    groups: dict[tuple, list[RunConfig]] = {}
    for c in configs:
        groups.setdefault(_group_key(c), []).append(c)
    merged: ResultsFile | None = None
    wanted = {c.key() for c in configs}
    for i, group in enumerate(groups.values()):
        out = workdir / f"{tag}-{i}.json"
        cmd = rerun_command(python, group, out, request)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not out.exists():  # the interpreter could not even start the suite
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            raise ConfirmError(f"confirmation run with {python} failed: {tail[0]}")
        part = load_results(out)
        part.runs = [r for r in part.runs if r.config.key() in wanted]  # a model's other mode, if any
        if merged is None:
            merged = part
        else:
            merged.runs.extend(part.runs)
    assert merged is not None
    return merged


def _check_names(configs: Sequence[RunConfig], request: ConfirmRequest) -> None:
    """Every model name must be registered (after the user's model files) before it reaches a command."""
    from ..registry import ModelFileError, UnknownModelError, load_model_file, validate_model_names

    try:
        for path in request.model_files:
            load_model_file(path)
        validate_model_names(c.model for c in configs)
    except (UnknownModelError, ModelFileError) as exc:
        raise ConfirmError(f"cannot confirm: {exc}") from None


def confirm_comparison(
    cmp: Comparison,
    request: ConfirmRequest,
    *,
    on_round: Callable[[int, int], None] | None = None,
) -> Comparison:
    """Re-measure the configurations behind ``cmp.regressions``; keep only confirmed ones.

    Args:
        cmp: a comparison whose regressions are to be confirmed.
        request: interpreters and rounds (see :class:`ConfirmRequest`).
        on_round: called with (round, rounds) before each round, for progress.

    Returns:
        A copy of ``cmp`` whose ``regressions`` are those flagged again (same metric) by
        :func:`compare_results` on the reruns, the others moved to ``dismissed``.
    """
    flagged = {f.config.key(): f.config for f in cmp.regressions}
    if not flagged:
        return cmp
    configs = list(flagged.values())
    _check_names(configs, request)
    # after the first round, what is the same in every process (deterministic metrics) is not re-measured:
    # flagged counts alone need one round
    later = [c for c in map(later_round, configs) if c is not None]
    rounds = (request.rounds or rounds_needed(len(configs), cmp.alpha)) if later else 1
    base_runs: list = []
    new_runs: list = []
    envs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="torchgauge-confirm-") as tmp:
        for r in range(rounds):
            if on_round:
                on_round(r + 1, rounds)
            # ABBA: base first in even rounds, candidate first in odd ones
            order = [("base", request.baseline_python), ("new", request.candidate_python)]
            for side, python in order if r % 2 == 0 else order[::-1]:
                part = rerun_configs(python, configs if r == 0 else later, Path(tmp), request, f"{side}-{r}")
                (base_runs if side == "base" else new_runs).extend(part.runs)
                envs.setdefault(side, part.env)
    again = compare_results(
        ResultsFile(env=envs["base"], runs=base_runs),
        ResultsFile(env=envs["new"], runs=new_runs),
        threshold=cmp.threshold,
        alpha=cmp.alpha,
        correction=cmp.correction,
        time_signal=cmp.time_signal,
    )
    confirmed = {(f.config.key(), f.metric): f for f in again.regressions}
    remeasured = {(f.config.key(), f.metric) for f in (*again.regressions, *again.improvements, *again.unchanged)}
    kept: list[Finding] = []
    dismissed: list[Finding] = list(cmp.dismissed)
    for f in cmp.regressions:
        hit = confirmed.get((f.config.key(), f.metric))
        if hit is not None:  # report the confirmation's figures: they are the sounder ones
            detail = {**hit.detail, "first_change": f.change, "first_p_value": f.p_value}
            kept.append(dataclasses.replace(hit, detail=detail))
        elif (f.config.key(), f.metric) not in remeasured:  # a rerun failed: no evidence either way, keep the flag
            kept.append(dataclasses.replace(f, detail={**f.detail, "confirmation": "not re-measured (a rerun failed)"}))
        else:
            dismissed.append(f)
    return dataclasses.replace(cmp, regressions=kept, dismissed=dismissed, confirm_rounds=rounds)
