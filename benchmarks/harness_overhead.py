"""Does the harness add anything measurable? torchgauge.measure vs a plain timing loop.

Alternates blocks of a plain ``perf_counter`` loop and ``torchgauge.measure`` on the same
workload in the same process (alternation cancels drift from other load on the machine)
and prints both medians and their ratio. Usage::

    python benchmarks/harness_overhead.py resnet50 --mode eval --repeat 10 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torchgauge


def plain_loop(step, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--mode", default="eval", choices=["train", "eval"])
    parser.add_argument("--size", default="full", choices=["full", "smoke"])
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    w = torchgauge.create(args.model, mode=args.mode, size=args.size, batch_size=args.batch_size)
    for _ in range(3):
        w.step()
    plain, harness = [], []
    for _ in range(args.rounds):
        plain += plain_loop(w.step, args.repeat)
        harness += torchgauge.measure(w, repeat=args.repeat, warmup=0).metrics["time_ms"]["samples"]
    p, h = statistics.median(plain), statistics.median(harness)
    print(
        f"{args.model} {args.mode} bs={w.batch_size}: plain loop median {p:.2f} ms, "
        f"torchgauge.measure median {h:.2f} ms, ratio {h / p:.3f} ({len(plain)} samples each)"
    )


if __name__ == "__main__":
    main()
