"""Process-to-process spread of timing medians under each thread setting (issue 17, item 1).

Each setting is measured in ``--processes`` fresh interpreters per model (the order of
settings is interleaved round by round, so drifting machine load hits every setting alike);
each process builds the model, warms up and takes ``--repeat`` timed steps with
``torchgauge.measure``. Reported per (setting, model): the process medians, their spread
(max / min) and coefficient of variation, and the machine's load average.

    PYTHONPATH=src python benchmarks/thread_settings.py --models resnet18 dlrm --processes 3

``--competitor N`` starts N busy-looping processes for the duration, a stand-in for other
users' work on a shared machine (they are the benchmark's own children and stop with it).
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
print(json.dumps({"median": t["median"], "cpu_median": t.get("cpu_median"), "threads": torch.get_num_threads()}))
"""

_BUSY = "while True: pass"


def _one(setting: str, model: str, mode: str, repeat: int) -> dict[str, float]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "dlrm"])
    parser.add_argument("--mode", default="eval")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--competitor", type=int, default=0, help="busy-looping processes to run alongside")
    parser.add_argument("--output", default=None, help="write the raw medians as JSON")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(args.competitor)]
    medians: dict[str, dict[str, list[float]]] = {s: {m: [] for m in args.models} for s in args.settings}
    cpu_medians: dict[str, dict[str, list[float]]] = {s: {m: [] for m in args.models} for s in args.settings}
    loads = [os.getloadavg()[0]]
    t0 = time.time()
    try:
        for _ in range(args.processes):
            for model in args.models:
                for setting in args.settings:
                    result = _one(setting, model, args.mode, args.repeat)
                    medians[setting][model].append(result["median"])
                    cpu_medians[setting][model].append(result["cpu_median"])
            loads.append(os.getloadavg()[0])
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    print(
        f"# {args.processes} processes x {args.repeat} repeats, {args.mode}, smoke size, "
        f"{args.competitor} competitor(s); "
        f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs; {time.time() - t0:.0f} s"
    )
    print("| setting | model | wall-time process medians (ms) | max/min | CV | CPU-time medians (ms) | max/min | CV |")
    print("|---|---|---|---|---|---|---|---|")
    for setting in args.settings:
        for model in args.models:
            cells = []
            for series in (medians[setting][model], cpu_medians[setting][model]):
                cv = statistics.stdev(series) / statistics.mean(series) if len(series) > 1 else 0.0
                cells.append(f"{', '.join(f'{m:.1f}' for m in series)} | {max(series) / min(series):.2f}x | {cv:.0%}")
            print(f"| {setting} | {model} | {' | '.join(cells)} |")
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(
                {"medians": medians, "cpu_medians": cpu_medians, "loads": loads, "args": vars(args)}, fh, indent=1
            )


if __name__ == "__main__":
    main()
