"""Process-to-process spread of timing medians under each thread setting (issue 17, item 1).

Each setting is measured in ``--processes`` fresh interpreters per model (the order of
settings is interleaved round by round, so drifting machine load hits every setting alike);
each process builds the model, warms up and takes ``--repeat`` timed steps with
``torchgauge.measure``. Reported per (competitors, setting, model): the process medians of
three statistics, their spread (max / min) and coefficient of variation, and the machine's
load average: the wall-time median, the CPU-time median (``time_ms.cpu_samples``) and the
median of the undisturbed steps (``torchgauge.stats.undisturbed``: wall times of steps whose
CPU/wall ratio is at least 0.9; "-" when fewer than 3 steps of a process qualify).

    PYTHONPATH=src python benchmarks/thread_settings.py --models resnet18 dlrm --processes 5 \
        --settings default threads=1 --competitors 1 2

``--competitors N [N ...]`` runs the whole measurement once per N with N busy-looping
processes alongside (controlled load on top of whatever else runs on the machine; they are the
benchmark's own children and stop with it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# name -> (intra-op threads or None for torch's default, environment, pin to one CPU)
SETTINGS = {
    "default": (None, {}, False),
    "threads=2,passive": (2, {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}, False),
    "threads=1": (1, {"OMP_NUM_THREADS": "1"}, False),
    "threads=1,pinned": (1, {"OMP_NUM_THREADS": "1"}, True),
}

_CHILD = r"""
import json, os, sys
threads, pin, model, mode, repeat = json.loads(sys.argv[1])
if pin:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
import torch, torchgauge
if threads:
    torch.set_num_threads(threads)
w = torchgauge.create(model, mode=mode, size="smoke")
r = torchgauge.measure(w, repeat=repeat, warmup=3, metrics=("time",))
t = r.metrics["time_ms"]
print(json.dumps({"wall": t["samples"], "cpu": t.get("cpu_samples"), "threads": torch.get_num_threads()}))
"""

_BUSY = "while True: pass"


def _one(setting: str, model: str, mode: str, repeat: int) -> dict[str, list[float]]:
    threads, env_extra, pin = SETTINGS[setting]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([threads, pin, model, mode, repeat])],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


STATISTICS = ("wall median", "CPU median", "undisturbed median")


def _statistics(steps: dict[str, list[float]]) -> dict[str, float | None]:
    from torchgauge.stats.undisturbed import undisturbed_median, undisturbed_steps

    wall, cpu = steps["wall"], steps["cpu"]
    return {
        "wall median": statistics.median(wall),
        "CPU median": statistics.median(cpu),
        "undisturbed median": undisturbed_median(wall, cpu),
        "undisturbed fraction": len(undisturbed_steps(wall, cpu)) / len(wall),
    }


def _spread(series: list[float | None]) -> str:
    values = [v for v in series if v is not None]
    if len(values) < 2:
        return f"{', '.join('-' if v is None else f'{v:.1f}' for v in series)} | - | -"
    cv = statistics.stdev(values) / statistics.mean(values)
    shown = ", ".join("-" if v is None else f"{v:.1f}" for v in series)
    return f"{shown} | {max(values) / min(values):.2f}x | {cv:.0%}"


def measure(args: argparse.Namespace, competitors: int) -> dict:
    """All settings x models x processes with ``competitors`` busy loops alongside."""
    busy = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(competitors)]
    cells: dict[str, dict[str, list[dict]]] = {s: {m: [] for m in args.models} for s in args.settings}
    loads = [os.getloadavg()[0]]
    t0 = time.time()
    try:
        for _ in range(args.processes):
            for model in args.models:
                for setting in args.settings:
                    steps = _one(setting, model, args.mode, args.repeat)
                    cells[setting][model].append({**_statistics(steps), **steps, "load": os.getloadavg()[0]})
            loads.append(os.getloadavg()[0])
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    return {"competitors": competitors, "cells": cells, "loads": loads, "seconds": time.time() - t0}


def report(args: argparse.Namespace, run: dict) -> None:
    loads = run["loads"]
    print(
        f"\n# {args.processes} processes x {args.repeat} repeats, {args.mode}, smoke size, "
        f"{run['competitors']} competitor(s); load average {min(loads):.1f}-{max(loads):.1f} on "
        f"{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {run['seconds']:.0f} s"
    )
    header = " | ".join(f"{name}s (ms) | max/min | CV" for name in STATISTICS)
    print(f"| setting | model | {header} | undisturbed steps |")
    print("|---|---|" + "---|---|---|" * len(STATISTICS) + "---|")
    for setting, by_model in run["cells"].items():
        for model, procs in by_model.items():
            cells = " | ".join(_spread([p[name] for p in procs]) for name in STATISTICS)
            fractions = [p["undisturbed fraction"] for p in procs]
            print(f"| {setting} | {model} | {cells} | {min(fractions):.0%}-{max(fractions):.0%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "dlrm"])
    parser.add_argument("--mode", default="eval")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--competitors", nargs="+", type=int, default=[0], help="busy-looping processes alongside, one run per N"
    )
    parser.add_argument("--output", default=None, help="write every step and statistic as JSON")
    args = parser.parse_args()
    runs = []
    for n in args.competitors:
        runs.append(measure(args, n))
        report(args, runs[-1])
        if args.output:
            with open(args.output, "w") as fh:
                json.dump({"runs": runs, "args": vars(args)}, fh, indent=1)


if __name__ == "__main__":
    main()
