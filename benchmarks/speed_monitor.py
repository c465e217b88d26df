"""How fast this machine runs a fixed step, over time: is CPU time per step itself drifting?

A comparison of two nights on per-step CPU time assumes that a step costs the same CPU time
on both nights. On a shared VM other tenants (on this guest and on the host) change what a
CPU second buys: cache and memory-bandwidth contention, a sibling hyperthread's work. This
monitor keeps one warm process and, every ``--interval`` seconds, times ``--steps`` warm steps
of a few smoke workloads and of a torch-free pure-Python loop, printing one JSON line per
burst (UTC time, load average, median CPU ms per workload). Run beside a benchmark, it shows
whether the machine's speed moved between the benchmark's nights, and by how much; it costs
about 1% of a CPU at the defaults.

    PYTHONPATH=src python benchmarks/speed_monitor.py --minutes 60 > speed.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _python_loop() -> None:
    total = 0
    for i in range(20000):
        total += i * i


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "dlrm"], help="smoke eval workloads to time")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between bursts")
    parser.add_argument("--steps", type=int, default=9, help="warm steps timed per workload per burst")
    parser.add_argument("--minutes", type=float, default=60.0, help="how long to monitor")
    args = parser.parse_args()

    import torch

    import torchgauge

    torch.set_num_threads(1)
    steps = {"python_loop": _python_loop}
    for name in args.models:
        w = torchgauge.create(name, mode="eval", device="cpu", size="smoke")
        steps[name] = w.step
    for step in steps.values():
        for _ in range(10):  # warm: allocator, caches, lazy initialisation
            step()
    end = time.monotonic() + 60 * args.minutes
    while time.monotonic() < end:
        row = {"utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load": os.getloadavg()[0]}
        for name, step in steps.items():
            cpu = []
            for _ in range(args.steps):
                t0 = time.process_time_ns()
                step()
                cpu.append((time.process_time_ns() - t0) / 1e6)
            row[name] = round(statistics.median(cpu), 4)
        print(json.dumps(row), flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
