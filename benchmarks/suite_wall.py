"""Wall time of a whole smoke suite and where it goes, per configuration, in one run.

Runs the selected models (default: all) through the same path as ``torchgauge run``
(``suite.run_and_save``: isolated workers, the results file rewritten after every run) and
reports, per configuration and summed: worker start (fork, imports, result transfer, exit),
build, warm-up, timed steps, extra metric passes, and writing the results file, with the
load average before and after and the thread settings. The per-run phases come from the
records' ``phases_s``; the results-file writes are timed here around ``ResultsFile.write``.

    PYTHONPATH=src python benchmarks/suite_wall.py                    # every model, smoke
    PYTHONPATH=src python benchmarks/suite_wall.py 'resnet*' --json out.json --markdown

A busy machine stretches every phase: compare only runs whose load columns are alike.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

PHASES = ("worker_start", "build", "warmup", "timed", "extra", "write")
# A smoke step above this is listed (issue 20: every smoke step at most 100 ms).
SLOW_STEP_MS = 100.0


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _thread_settings(jobs: int) -> dict[str, object]:
    import torch

    from torchgauge.runner import RunnerOptions, worker_threads

    return {
        "torch_num_threads_parent": torch.get_num_threads(),
        "worker_threads": worker_threads(RunnerOptions(jobs=jobs)) or torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "jobs": jobs,
    }


def run(patterns: list[str], *, jobs: int, repeat: int, warmup: int, output: Path) -> dict[str, object]:
    """Run the suite once; returns the measurement document (per-run rows and totals)."""
    from torchgauge.config import plan
    from torchgauge.results.schema import ResultsFile, load_results
    from torchgauge.runner import RunnerOptions
    from torchgauge.suite import Selection, run_and_save

    configs = plan(Selection(tuple(patterns)), size="smoke", repeat=repeat, warmup=warmup)
    writes: list[float] = []
    original_write = ResultsFile.write

    def timed_write(self, path):  # the real write, timed (run_and_save writes after every run)
        t = time.perf_counter()
        original_write(self, path)
        writes.append(time.perf_counter() - t)

    ResultsFile.write = timed_write
    load_before = _load()
    t0 = time.perf_counter()
    interrupted = False
    try:
        results = run_and_save(
            configs,
            RunnerOptions(jobs=jobs),
            output,
            on_result=lambda r: print(
                f"{len(writes) - 1:>4}/{len(configs)} {r.config.model} {r.config.mode} {r.status} {r.wall_s:.2f}s",
                file=sys.stderr,
            ),
        )
    except KeyboardInterrupt:  # e.g. `timeout -s INT`: report the finished runs, say what is missing
        interrupted = True
        results = load_results(output)
    finally:
        ResultsFile.write = original_write
    wall = time.perf_counter() - t0
    rows = []
    for record, write_s in zip(results.runs, writes[1:]):  # writes[0]: the file before any run
        phases = dict(record.phases_s)
        phases["write"] = round(write_s, 4)
        median = (record.metrics.get("time_ms") or {}).get("median")
        rows.append(
            {
                "model": record.config.model,
                "mode": record.config.mode,
                "status": record.status,
                "wall_s": record.wall_s,
                "median_step_ms": median,
                "phases_s": phases,
            }
        )
    totals = {p: round(sum(r["phases_s"].get(p, 0.0) for r in rows), 2) for p in PHASES}
    overheads = [r["wall_s"] - r["phases_s"].get("timed", 0.0) for r in rows]
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count()},
        "threads": _thread_settings(jobs),
        "load_before": load_before,
        "load_after": _load(),
        "planned": len(configs),
        "interrupted": interrupted,
        "missing": [c.label() for c in results.missing()],
        "configurations": len(rows),
        "statuses": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})},
        "wall_s": round(wall, 1),
        "phase_totals_s": totals,
        "first_run_worker_start_s": rows[0]["phases_s"].get("worker_start") if rows else None,
        "overhead_median_s": round(statistics.median(overheads), 3) if overheads else None,
        "slow_steps": sorted(
            (
                {"model": r["model"], "mode": r["mode"], "median_step_ms": round(r["median_step_ms"], 1)}
                for r in rows
                if (r["median_step_ms"] or 0) > SLOW_STEP_MS
            ),
            key=lambda r: -r["median_step_ms"],
        ),
        "runs": rows,
    }


def markdown(doc: dict[str, object]) -> str:
    """The tables docs/performance.md keeps: totals per phase and the slow smoke steps."""
    lines = [
        f"Run {doc['date']}, {doc['machine']['cpu_count']} CPUs, load average (1/5/15 min) before "
        f"{doc['load_before']}, after {doc['load_after']}; threads {doc['threads']}.",
        "",
        f"{doc['configurations']} of {doc['planned']} planned configurations"
        f"{' (interrupted)' if doc['interrupted'] else ''} ({doc['statuses']}) in {doc['wall_s']} s; "
        "median per-configuration "
        f"overhead (wall minus timed steps) {doc['overhead_median_s']} s; the first run's worker start (forkserver "
        f"import of torch and every model) {doc['first_run_worker_start_s']} s.",
        "",
        "| phase | total s | share |",
        "|---|---:|---:|",
    ]
    total = sum(doc["phase_totals_s"].values()) or 1.0
    for phase, seconds in doc["phase_totals_s"].items():
        lines.append(f"| {phase} | {seconds:.1f} | {100 * seconds / total:.0f}% |")
    lines += [
        "",
        f"Smoke steps above {SLOW_STEP_MS:.0f} ms (median):",
        "",
        "| model | mode | median ms |",
        "|---|---|---:|",
    ]
    lines += [f"| {r['model']} | {r['mode']} | {r['median_step_ms']} |" for r in doc["slow_steps"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="*", default=["*"], help="model names or wildcards (default: all)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("/tmp/suite_wall_results.json"),
        help="the suite's results file (written as torchgauge run writes it)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the measurement document here")
    parser.add_argument("--markdown", action="store_true", help="print the docs/performance.md tables")
    args = parser.parse_args(argv)
    doc = run(args.patterns, jobs=args.jobs, repeat=args.repeat, warmup=args.warmup, output=args.results)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(markdown(doc) if args.markdown else json.dumps({k: v for k, v in doc.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
