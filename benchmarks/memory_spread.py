"""Run-to-run spread of peak memory across fresh processes, and the A/A memory false-alarm rate
(issue 17, item 5).

``--runs`` invocations of ``torchgauge run MODELS`` (each configuration in its own fresh worker
process, as the nightly runs them) of one build; every pair of consecutive runs is compared
with ``compare_results`` (``--all-pairs``: every ordered pair). Reported: per configuration the
peak-memory values and their spread, and how many A/A pairs the memory rule flags.

    PYTHONPATH=src python benchmarks/memory_spread.py --runs 6 --workdir /tmp/memspread
    PYTHONPATH=src python benchmarks/memory_spread.py --models resnet18 --size full --threads all --all-pairs
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from pathlib import Path

MODELS = ["resnet18", "dlrm", "mobilenet_v2", "squeezenet1_1", "lennard_jones", "basic_gnn_gcn"]


def main() -> None:
    from torchgauge.compare.regression import compare_results
    from torchgauge.harness.metrics import quantities
    from torchgauge.results.schema import load_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--size", default="smoke")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mode", default="both", choices=("train", "eval", "both"))
    parser.add_argument("--batch-size", help="override every model's batch size")
    parser.add_argument("--threads", default="1", help="run's --threads: N or 'all' (torch's default count)")
    parser.add_argument(
        "--all-pairs", action="store_true", help="compare every ordered pair, not only consecutive runs"
    )
    parser.add_argument("--workdir", default="memory-spread")
    parser.add_argument("--reuse", action="store_true", help="analyse the results already in --workdir")
    args = parser.parse_args()
    memory_metrics = tuple(q.record_key for q in quantities() if q.rule == "memory")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    paths = [work / f"run-{i}.json" for i in range(args.runs)]
    loads = []
    extra = ["--batch-size", args.batch_size] if args.batch_size else []
    for path in paths:
        if args.reuse and path.exists():
            continue
        loads.append(os.getloadavg()[0])
        subprocess.run(
            [
                sys.executable,
                "-m",
                "torchgauge.cli",
                "run",
                *args.models,
                "--size",
                args.size,
                "--repeat",
                str(args.repeat),
                "--mode",
                args.mode,
                "--threads",
                args.threads,
                *extra,
                "--output",
                str(path),
                "--quiet",
                "--no-db",
            ],
            capture_output=True,
        )
        loads[-1] = f"{loads[-1]:.1f}->{os.getloadavg()[0]:.1f}"
    results = [load_results(p) for p in paths]
    print(
        f"# {args.runs} runs of {len(args.models)} models ({args.size}, mode {args.mode}, threads {args.threads}, "
        f"batch {args.batch_size or 'default'}); load average before->after each run: " + ", ".join(loads)
    )
    print("| configuration | metric | values (MiB) | spread (max-min) | spread / median |")
    print("|---|---|---|---|---|")
    for rec in results[0].runs:
        key = rec.config.key()
        for metric in memory_metrics:
            values = [r.metrics.get(metric) for res in results for r in res.runs if r.config.key() == key]
            values = [v for v in values if isinstance(v, (int, float))]
            if len(values) > 1:
                mid = sorted(values)[len(values) // 2]
                print(
                    f"| {rec.config.model}/{rec.config.mode} | {metric} | {', '.join(f'{v:.1f}' for v in values)} | "
                    f"{max(values) - min(values):.1f} | {(max(values) - min(values)) / mid:.1%} |"
                )
    pairs = list(itertools.permutations(results, 2)) if args.all_pairs else list(zip(results, results[1:]))
    flagged = compared = beyond_floor = 0
    largest: dict[str, float] = {}
    for base, new in pairs:
        cmp = compare_results(base, new)
        memory = [
            f
            for f in (*cmp.regressions, *cmp.improvements, *cmp.unchanged, *cmp.inconclusive)
            if f.metric in memory_metrics
        ]
        compared += len(memory)
        hits = [f for f in memory if f.verdict != "unchanged"]
        flagged += len(hits)
        beyond_floor += sum(abs(f.new - f.base) >= f.detail["floor_mb"] for f in memory)
        for f in memory:
            name = f"{f.config.model}/{f.config.mode} {f.metric}"
            largest[name] = max(largest.get(name, 0.0), abs(f.change))
        for f in hits:
            print(f"flag: {f.config.model}/{f.config.mode} {f.metric} {f.base:.1f} -> {f.new:.1f} ({f.change:+.1%})")
    print(f"A/A memory flags: {flagged} of {compared} comparisons ({len(pairs)} pairs)")
    print(
        f"changes beyond the spread floor alone (flagged if the threshold, {cmp.threshold:.0%}, were lower): "
        f"{beyond_floor} of {compared}; largest A/A change: "
        + ", ".join(f"{name} {change:.1%}" for name, change in largest.items())
    )


if __name__ == "__main__":
    main()
