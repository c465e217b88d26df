"""How often ``torchgauge bisect`` names the planted commit, and what each bisection costs
(issue 17, item 9).

Each trial generates a fresh 32-commit git repository in a temporary directory holding a tiny
package ``slowpkg`` whose ``work()`` loops ``ITERATIONS`` times. ONE commit, placed at random
(seeded per trial), multiplies ``ITERATIONS`` by a random factor in [1.5, 2.5]. A plugin model
(``--model-file``) calls ``slowpkg.work()`` once per step, and

    torchgauge bisect slowpkg_work --model-file plugin.py --mode eval --size smoke \\
        --repo REPO --good FIRST --bad LAST --build "python -m py_compile ..." --pythonpath .

runs with the command's defaults otherwise (time, one intra-op thread, 15 repeats, 7%
threshold) and a fresh cache directory. Trials run one after another. Per trial it reports the
outcome (right / wrong / uncertain with or without the planted commit among the candidates /
not found), the measured points, builds, wall time, the CPU time of the bisect process and its
children, and the 1-minute load average before and after.

    PYTHONPATH=src python benchmarks/bisect_accuracy.py --trials 8 --instruction-trials 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The planted-slowdown repository generator, shared with tests/workflows/test_bisect.py.
_SPEC = importlib.util.spec_from_file_location(
    "slowpkg_repo", Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "slowpkg_repo.py"
)
slowpkg_repo = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(slowpkg_repo)
N_COMMITS, BASE_ITERATIONS, BUILD = slowpkg_repo.N_COMMITS, slowpkg_repo.BASE_ITERATIONS, slowpkg_repo.BUILD

# Outcomes of one trial, in the order the summary lists them.
OUTCOMES = ("right", "wrong", "uncertain, planted among candidates", "uncertain, planted missing", "not found")


def classify_trial(report: dict[str, Any], planted: str) -> str:
    """One of :data:`OUTCOMES` for a ``bisect --json`` report of one configuration.

    ``planted`` is the full sha of the planted commit. A culprit with reason ``found`` names one
    commit (right or wrong); any other reason lists candidates; no culprit at all (endpoints
    judged equal, or an error) is ``not found``.
    """
    outcomes = report.get("outcomes") or []
    culprits = outcomes[0].get("culprits") if outcomes else None
    if not culprits:
        return "not found"
    culprit = culprits[0]
    commits = [c.get("commit") for c in culprit.get("candidates", [])]
    if culprit.get("reason") == "found":
        return "right" if commits[:1] == [planted] else "wrong"
    if planted in commits:
        return "uncertain, planted among candidates"
    return "uncertain, planted missing"


def run_trial(work: Path, seed: int, metric: str, timeout: float, extra: list[str]) -> dict[str, Any]:
    """One bisection of a freshly generated repository; its outcome, cost and load."""
    rng = random.Random(seed)
    culprit = rng.randrange(1, N_COMMITS)  # 0 is the good endpoint
    factor = rng.uniform(1.5, 2.5)
    trial = work / f"{metric}-seed{seed}"
    shas = slowpkg_repo.make_repo(trial / "repo", {culprit: round(BASE_ITERATIONS * factor)})
    plugin = trial / "plugin.py"
    plugin.write_text(slowpkg_repo.PLUGIN)
    cmd = [sys.executable, "-m", "torchgauge.cli", "bisect", "slowpkg_work", "--model-file", str(plugin)]
    cmd += ["--mode", "eval", "--size", "smoke", "--repo", str(trial / "repo"), "--good", shas[0]]
    cmd += ["--bad", shas[-1], "--build", BUILD, "--pythonpath", ".", "--cache-dir", str(trial / "cache"), "--json"]
    if metric != "time":
        cmd += ["--metric", metric]
    cmd += extra
    load_before = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        stdout, stderr, code = out.stdout, out.stderr, out.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, stderr, code = "", str(exc), None
    wall = time.perf_counter() - start
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    row: dict[str, Any] = {
        "seed": seed,
        "options": " ".join(extra),
        "metric": metric,
        "planted": culprit,
        "factor": round(factor, 2),
        "exit": code,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime, 1),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        row.update(outcome="error", error=(stderr.strip().splitlines() or ["no output"])[-1])
        return row
    row.update(outcome=classify_trial(report, shas[culprit]), measured_points=report["measured_points"])
    row.update(builds=report["builds"], measurements=report["measurements"])
    outcome = report["outcomes"][0] if report["outcomes"] else {}
    culprits = outcome.get("culprits") or [{}]
    row["named"] = [shas.index(c["commit"]) for c in culprits[0].get("candidates", []) if c.get("commit") in shas]
    row["status"] = outcome.get("status")
    row["message"] = outcome.get("message", "")
    return row


def _markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| metric | seed | planted (factor) | outcome | named | points | builds | wall s | CPU s | load before/after |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['metric']} | {r['seed']} | {r['planted']} ({r['factor']}x) | {r['outcome']} | "
            f"{', '.join(map(str, r.get('named', []))) or '-'} | {r.get('measured_points', '-')} | "
            f"{r.get('builds', '-')} | {r['wall_s']} | {r['cpu_s']} | {r['load_before']} / {r['load_after']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8, help="time-based bisections (default 8)")
    parser.add_argument("--instruction-trials", type=int, default=2, help="--metric instructions bisections")
    parser.add_argument("--seed", type=int, default=17, help="first trial's seed; trial k uses seed+k")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per bisection")
    parser.add_argument("--workdir", help="keep the repositories and caches here (default: a temp dir)")
    parser.add_argument("--output", help="also write the rows as JSON here")
    parser.add_argument(
        "--bisect-arg", action="append", default=[], help="extra bisect option, e.g. --bisect-arg=--fastest=20%%"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bisect-accuracy-") as tmp:
        work = Path(args.workdir) if args.workdir else Path(tmp)
        rows = []
        plan = [("time", args.seed + k) for k in range(args.trials)]
        plan += [("instructions", args.seed + k) for k in range(args.instruction_trials)]
        for metric, seed in plan:
            row = run_trial(work, seed, metric, args.timeout, args.bisect_arg)
            print(json.dumps(row), flush=True)
            rows.append(row)
            if args.output:
                Path(args.output).write_text(json.dumps(rows, indent=1))
    print(_markdown(rows))
    for metric in ("time", "instructions"):
        done = [r for r in rows if r["metric"] == metric]
        if done:
            counts = ", ".join(f"{o}: {sum(r['outcome'] == o for r in done)}" for o in (*OUTCOMES, "error"))
            print(f"{metric}: {len(done)} trials; {counts}")


if __name__ == "__main__":
    main()
