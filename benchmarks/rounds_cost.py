"""What interleaved rounds cost against one process per configuration (issue 17, item 7).

Runs ``torchgauge run MODELS --mode both`` once per procedure, each procedure given as
``ROUNDS:REPEAT:WARMUP`` (``1:10:3`` is the single-process default; ``10:1:1`` splits the same
ten timed steps over ten fresh processes with one warm-up step each), and reports per
procedure: the command's wall time and CPU time (its own and its workers'), the processes
started, and where the workers' time went (``phases_s`` of every record: worker start, build,
warm-up, timed steps, extra passes). From the single-process run it derives, per
configuration, the per-process overhead that rounds multiply (worker start + build + extra)
and the step time, which ``--estimate`` uses to predict any other procedure's cost.

    PYTHONPATH=src python benchmarks/rounds_cost.py dlrm squeezenet1_1 --size full \
        --procedures 1:10:3 10:1:1 5:2:1 --json /tmp/cost.json

``--metrics`` runs every procedure once per metric set (``time,memory`` is ``run``'s default), to
measure what the nightly's extra passes cost, e.g. ``--metrics time,memory
time,memory,tensor_memory,op_counts,flops --procedures 10:1:1``; run the same command with
``PYTHONPATH`` pointing at another checkout to compare two torchgauge versions.

The load average before and after each command is reported: on a shared machine compare only
procedures whose load columns are alike.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("worker_start", "build", "warmup", "timed", "extra")
# Phases paid once per process whatever the repeats: what rounds multiply.
PER_PROCESS = ("worker_start", "build", "extra")


def parse_procedure(text: str) -> tuple[int, int, int]:
    """``ROUNDS:REPEAT:WARMUP`` -> three integers (rounds and repeat >= 1, warmup >= 0)."""
    try:
        rounds, repeat, warmup = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid procedure {text!r}; accepted: ROUNDS:REPEAT:WARMUP, e.g. 10:1:1"
        ) from None
    if rounds < 1 or repeat < 1 or warmup < 0:
        raise argparse.ArgumentTypeError(f"invalid procedure {text!r}; accepted: rounds, repeat >= 1, warmup >= 0")
    return rounds, repeat, warmup


def _become_subreaper() -> None:
    """Adopt orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``): ``run``'s forkserver, which
    reaps the workers, outlives the command and would otherwise take their CPU time with it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # 36: PR_SET_CHILD_SUBREAPER
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: worker CPU time could not be counted")


def _reap_orphans(wait_s: float = 10.0) -> None:
    """Wait for adopted descendants (the forkserver exits once the command's pipe closes)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.1)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_procedure(
    models: list[str], size: str, procedure: tuple[int, int, int], output: Path, metrics: str | None = None
) -> dict:
    """One ``torchgauge run`` with this procedure (and ``--metrics``); its wall, CPU, load and per-record phases."""
    rounds, repeat, warmup = procedure
    argv = [sys.executable, "-m", "torchgauge.cli", "run", *models, "--size", size, "--mode", "both"]
    argv += ["--rounds", str(rounds), "--repeat", str(repeat), "--warmup", str(warmup)]
    if metrics:
        argv += ["--metrics", metrics]
    argv += ["--output", str(output), "--quiet"]
    load_before = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    _reap_orphans()
    cpu = _children_cpu() - cpu0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"torchgauge run exited {proc.returncode}: {proc.stderr[-2000:]}")
    every = json.loads(output.read_text())["runs"]
    runs = [r for r in every if r["status"] == "ok"]
    return {
        "procedure": f"{rounds}:{repeat}:{warmup}",
        "metrics": metrics or "default",
        "records": len(every),
        "not_ok": sorted({f"{r['model']}/{r['mode']}: {r['status']}" for r in every if r["status"] != "ok"}),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "processes": len(runs),
        "phases_s": {p: round(sum((r.get("phases_s") or {}).get(p, 0.0) for r in runs), 1) for p in PHASES},
        "per_config": _per_config(runs),
    }


def _per_config(runs: list[dict]) -> dict[str, dict[str, float]]:
    """model/mode -> mean per-process overhead (s), mean step (s), over that configuration's processes."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        cell = out.setdefault(f"{r['model']}/{r['mode']}", {"overhead_s": [], "step_s": []})
        phases = r.get("phases_s") or {}
        cell["overhead_s"].append(sum(phases.get(p, 0.0) for p in PER_PROCESS))
        cell["step_s"].append(phases.get("timed", 0.0) / max(1, r["repeat"]))
    return {k: {m: round(sum(v) / len(v), 3) for m, v in cell.items()} for k, cell in out.items()}


def estimate_s(per_config: dict[str, dict[str, float]], procedure: tuple[int, int, int]) -> float:
    """Worker seconds a procedure would take: rounds x (overhead + (warmup + repeat) x step), summed."""
    rounds, repeat, warmup = procedure
    return sum(rounds * (c["overhead_s"] + (warmup + repeat) * c["step_s"]) for c in per_config.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--size", default="full")
    parser.add_argument("--procedures", nargs="+", type=parse_procedure, default=[(1, 10, 3), (10, 1, 1)])
    parser.add_argument("--estimate", nargs="*", type=parse_procedure, default=[(10, 1, 1), (10, 2, 1), (10, 1, 3)])
    parser.add_argument(
        "--metrics", nargs="+", default=[None], help="metric sets (comma-separated each); each procedure runs with each"
    )
    parser.add_argument("--json", default=None, help="write every measurement as JSON (rewritten after each command)")
    args = parser.parse_args()
    _become_subreaper()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, procedure in enumerate(args.procedures):
            for j, metrics in enumerate(args.metrics):
                output = Path(tmp) / f"run-{i}-{j}.json"
                results.append(run_procedure(args.models, args.size, procedure, output, metrics))
                print(json.dumps({k: v for k, v in results[-1].items() if k != "per_config"}), file=sys.stderr)
                if args.json:  # a long benchmark keeps what it measured if it is stopped
                    Path(args.json).write_text(json.dumps({"results": results, "args": sys.argv[1:]}, indent=1))
    print(f"# {' '.join(args.models)}, {args.size} size, both modes; {os.cpu_count()} CPUs; {time.ctime()}")
    print(
        "| procedure (rounds:repeat:warmup) | metrics | processes | wall s | CPU s | "
        + " | ".join(PHASES)
        + " | load |"
    )
    print("|---|---|---:|---:|---:|" + "---:|" * len(PHASES) + "---|")
    for r in results:
        phases = " | ".join(f"{r['phases_s'][p]:.1f}" for p in PHASES)
        print(
            f"| {r['procedure']} | {r['metrics']} | {r['processes']} | {r['wall_s']} | {r['cpu_s']} | {phases} | "
            f"{r['load'][0]}->{r['load'][1]} |"
        )
    single = next((r for r in results if r["procedure"].startswith("1:")), results[0])
    print("\n| configuration | per-process overhead s | step s |\n|---|---:|---:|")
    for key, cell in single["per_config"].items():
        print(f"| {key} | {cell['overhead_s']:.3f} | {cell['step_s']:.3f} |")
    for procedure in args.estimate:
        name = ":".join(map(str, procedure))
        print(f"estimated worker seconds for {name}: {estimate_s(single['per_config'], procedure):.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "args": sys.argv[1:]}, indent=1))


if __name__ == "__main__":
    main()
