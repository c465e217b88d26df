"""Same-session interleaved A/B rounds of ``benchmarks/detection_power.py``, as trials (issue 17, item 6).

One trial measures both builds in one session, the way a CI job that has the previous build at
hand could: ``k`` rounds, each one ``torchgauge run MODELS --rounds 1 --repeat REPEAT`` with the
stock interpreter (base) and one with the planted interpreter (candidate), the order within a
round alternating (ABBA...), so load that drifts during the trial lands on both sides alike.
Each side's ``k`` run files are merged into one file and ``compare BASE CANDIDATE`` judges them
with the nightly's options (``--threshold 7% --alpha 0.01 --correction holm``) on CPU time: with
``k`` processes a side, compare tests the ``k`` process medians per configuration.

The trial's record has the shape of a nightly trial (``power_nightly.run_trial``): every ``run``
is kept under ``"nights"`` (exit, wall, CPU, load at start and end), and every configuration's
verdict with its per-process step times under ``"configs"``, so ``power_rates`` prints the same
tables for it. ``power_nightly.run_trials`` schedules the trials round-robin over the scenarios
and rewrites the report after each one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from power_nightly import cli, trial_header, trial_start, verdicts

REPORT = "ab-report.json"
# The nightly's compare options (.github/workflows/nightly.yml), judged on per-step CPU time.
COMPARE_ARGS = ("--threshold", "7%", "--alpha", "0.01", "--correction", "holm", "--time-signal", "cpu")


@dataclass(frozen=True)
class ABProcedure:
    """``rounds`` interleaved base/candidate runs of ``repeat`` timed steps after ``warmup``."""

    rounds: int
    repeat: int
    warmup: int
    mode: str = "eval"
    metrics: str = "time,memory"
    env: dict[str, str] = field(default_factory=lambda: {"OMP_NUM_THREADS": "1"})  # as the nightly's CPU shards
    compare_args: tuple[str, ...] = COMPARE_ARGS
    name: str = "same-session A/B rounds"

    def option(self, name: str) -> str:
        args = list(self.compare_args)
        return args[args.index(name) + 1]

    def run_args(self) -> list[str]:
        return ["--device", "cpu", "--mode", self.mode, "--rounds", "1", "--repeat", str(self.repeat)] + [
            "--warmup",
            str(self.warmup),
            "--threads",
            "1",
            "--metrics",
            self.metrics,
            "--size",
            "smoke",
        ]


def merge(paths: list[Path], out: Path) -> Path:
    """One results file holding every run of ``paths`` (the first file's environment)."""
    docs = [json.loads(p.read_text()) for p in paths if p.exists()]
    if not docs:
        raise RuntimeError(f"no run file among {[str(p) for p in paths]}: every run of this side failed to write")
    merged = {**docs[0], "runs": [r for d in docs for r in d["runs"]]}
    out.write_text(json.dumps(merged))
    return out


def run_ab_trial(bench: Any, proc: ABProcedure, tdir: Path, plant: float, base_first: bool) -> dict[str, Any]:
    """``proc.rounds`` interleaved rounds of both builds and one compare; the trial's record."""
    tdir.mkdir(parents=True, exist_ok=True)
    started = trial_start()
    runs: dict[str, dict[str, Any]] = {}
    files: dict[str, list[Path]] = {"base": [], "candidate": []}
    for k in range(proc.rounds):
        order = ("base", "candidate") if (k % 2 == 0) == base_first else ("candidate", "base")
        for side in order:
            out = tdir / f"{side}-{k}.json"
            out.unlink(missing_ok=True)
            env = {**bench.env(plant if side == "candidate" else 0.0), **proc.env}
            args = ["run", *bench.models, *proc.run_args(), "--output", str(out), "--quiet", "--no-db"]
            runs[f"{side}-{k}"] = {"plant": plant if side == "candidate" else 0.0, **cli(args, env)}
            files[side].append(out)
    base, new = merge(files["base"], tdir / "base.json"), merge(files["candidate"], tdir / "candidate.json")
    out = tdir / "compare.json"
    out.unlink(missing_ok=True)
    compare = cli(
        ["compare", str(base), str(new), *proc.compare_args, "--output", str(out), "--quiet", "--allow-inconclusive"],
        {**bench.env(0.0), **proc.env},
    )
    record = {
        **trial_header(started, plant, base_first),
        "wall_s": round(sum(r["wall_s"] for r in runs.values()) + compare["wall_s"], 1),
        "nights": runs,  # every run of the trial, under the nightly record's key (power_rates reads it)
        "compare": compare,
        "configs": {},
    }
    if out.exists():
        record["configs"], record["cli_agrees"] = verdicts(base, new, out, proc)
    return record
