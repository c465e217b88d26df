"""Run-to-run spread of peak memory across fresh processes, and the A/A memory false-alarm rate
(issue 17, item 5).

``--runs`` rounds; in each round one ``torchgauge run MODELS`` invocation per ``--setting``
(each configuration in its own fresh worker process, as the nightly runs them), settings
interleaved round by round so that machine load hits them alike. A setting is a name and
environment variables for the whole invocation (``--setting default`` and e.g.
``--setting retain:MALLOC_MMAP_THRESHOLD_=33554432,MALLOC_TRIM_THRESHOLD_=4294967296``;
glibc reads ``MALLOC_*`` at process start and the forkserver's workers inherit them).

Reported per setting: for every quantity ``compare`` judges with the memory rule
(``cpu_peak_mb``, ``gpu_peak_mb``, ``cpu_tensor_peak_mb``) the per-process values of each
configuration, their spread (max - min) as a fraction of the median (the figure a quantity's
``spread`` fact is set from: :func:`torchgauge.compare.regression.measured_spread`), the A/A
memory flags of ``compare_results`` with the default rule over every ordered pair of runs
(or consecutive pairs), and each configuration's median step time relative to the first
setting's (does the setting change what is timed?). ``--reuse`` analyses results already
in ``--workdir`` (e.g. recorded GPU runs copied there as ``default/run-<i>.json``; with
``--runs 0`` nothing is run).

    PYTHONPATH=src python benchmarks/memory_spread.py --models resnet18 dlrm --size full --runs 5 \\
        --repeat 3 --metrics time,memory,tensor_memory --setting default \\
        --setting retain:MALLOC_MMAP_THRESHOLD_=33554432,MALLOC_TRIM_THRESHOLD_=4294967296
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
from pathlib import Path

MODELS = ["resnet18", "dlrm", "mobilenet_v2", "squeezenet1_1", "lennard_jones", "basic_gnn_gcn"]


def parse_setting(text: str) -> tuple[str, dict[str, str]]:
    """``name`` or ``name:VAR=VALUE,VAR=VALUE`` -> (name, environment)."""
    name, _, assignments = text.partition(":")
    env = {}
    for item in filter(None, assignments.split(",")):
        var, sep, value = item.partition("=")
        if not sep or not var:
            raise SystemExit(f"invalid --setting {text!r}; accepted: NAME or NAME:VAR=VALUE[,VAR=VALUE...]")
        env[var] = value
    return name, env


def main() -> None:
    from torchgauge.compare.regression import compare_results, measured_spread
    from torchgauge.harness.metrics import quantities
    from torchgauge.results.schema import load_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--runs", type=int, default=6, help="rounds (fresh `torchgauge run` invocations per setting)")
    parser.add_argument("--size", default="smoke")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--mode", default="both", choices=("train", "eval", "both"))
    parser.add_argument("--batch-size", help="override every model's batch size")
    parser.add_argument("--threads", default="1", help="run's --threads: N or 'all' (torch's default count)")
    parser.add_argument("--device", default="cpu", help="run's --device (cuda: the gpu_peak_mb spread)")
    parser.add_argument("--metrics", default="time,memory", help="run's --metrics (add tensor_memory)")
    parser.add_argument("--setting", action="append", help="NAME[:VAR=VALUE,...]; repeatable (default: default)")
    parser.add_argument(
        "--all-pairs", action="store_true", help="compare every ordered pair, not only consecutive runs"
    )
    parser.add_argument("--workdir", default="memory-spread")
    parser.add_argument("--reuse", action="store_true", help="analyse the results already in --workdir")
    args = parser.parse_args()
    settings = [parse_setting(s) for s in args.setting or ["default"]]
    memory_quantities = [q for q in quantities() if q.rule == "memory"]
    work = Path(args.workdir)
    loads: dict[str, list[str]] = {name: [] for name, _ in settings}
    extra = ["--batch-size", args.batch_size] if args.batch_size else []
    for i in range(args.runs):
        for name, env in settings:
            path = work / name / f"run-{i}.json"
            if args.reuse and path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            before = os.getloadavg()[0]
            subprocess.run(
                [
                    *(sys.executable, "-m", "torchgauge.cli", "run", *args.models),
                    *("--size", args.size, "--repeat", str(args.repeat), "--warmup", str(args.warmup)),
                    *("--mode", args.mode, "--device", args.device, "--threads", args.threads),
                    *("--metrics", args.metrics, *extra),
                    *("--output", str(path), "--quiet", "--no-db"),
                ],
                capture_output=True,
                env={**os.environ, **env},
            )
            loads[name].append(f"{before:.1f}->{os.getloadavg()[0]:.1f}")
    reference_times: dict[tuple, float] = {}
    for name, env in settings:
        paths = sorted((work / name).glob("run-*.json"), key=lambda p: int(p.stem.split("-")[1]))
        results = [load_results(p) for p in paths]
        print(
            f"\n## setting {name} {env or ''}: {len(results)} runs of {len(args.models)} models ({args.size}, "
            f"mode {args.mode}, threads {args.threads}, batch {args.batch_size or 'default'}); "
            "load average before->after each run: " + ", ".join(loads[name])
        )
        print("| configuration | quantity | values (MiB) | spread (max-min) | spread / median | time vs 1st setting |")
        print("|---|---|---|---|---|---|")
        keys = list(dict.fromkeys(r.config.key() for res in results for r in res.runs))
        spreads: dict[str, list[float]] = {}
        for key in keys:
            runs = [r for res in results for r in res.runs if r.config.key() == key and r.status == "ok"]
            if not runs:
                continue
            times = [r.metrics["time_ms"]["median"] for r in runs if "time_ms" in r.metrics]
            time_note = ""
            if times:
                mid_time = statistics.median(times)
                reference_times.setdefault(key, mid_time)
                time_note = f"{mid_time:.1f} ms ({mid_time / reference_times[key]:.3f}x)"
            for q in memory_quantities:
                values = [v for v in (q.value(r.metrics) for r in runs) if v is not None]
                if len(values) < 2:
                    continue
                spread = measured_spread(values)
                spreads.setdefault(q.name, []).append(spread)
                print(
                    f"| {runs[0].config.model}/{runs[0].config.mode} | {q.name} | "
                    f"{', '.join(f'{v:.1f}' for v in values)} | {max(values) - min(values):.1f} | {spread:.1%} | "
                    f"{time_note} |"
                )
        for q_name, values in spreads.items():
            print(f"largest spread of {q_name}: {max(values):.1%} of the median (over {len(values)} configurations)")
        pairs = list(itertools.permutations(results, 2)) if args.all_pairs else list(zip(results, results[1:]))
        flagged = compared = 0
        names = {q.record_key for q in memory_quantities}
        for base, new in pairs:
            cmp = compare_results(base, new)
            memory = [
                f for f in (*cmp.regressions, *cmp.improvements, *cmp.unchanged, *cmp.inconclusive) if f.metric in names
            ]
            compared += len(memory)
            hits = [f for f in memory if f.verdict != "unchanged"]
            flagged += len(hits)
            for f in hits:
                print(
                    f"flag: {f.config.model}/{f.config.mode} {f.metric} {f.base:.1f} -> {f.new:.1f} ({f.change:+.1%})"
                )
        print(f"A/A memory flags with the default rule: {flagged} of {compared} comparisons ({len(pairs)} pairs)")


if __name__ == "__main__":
    main()
