"""A/A comparison of ``--isolation per-run`` against ``per-model`` before either becomes a default.

Runs the same smoke configurations in rounds, interleaved ``per-run, per-model, per-run,
per-model, ...`` so that a machine getting busier hits both alike, and reports per
configuration the ratio of medians per-model / per-run next to the A/A ratio per-run /
per-run (the noise floor: how far two identical settings land apart), plus the suite wall
time and the median per-configuration overhead of each setting.

    PYTHONPATH=src python benchmarks/isolation_aa.py alexnet 'resnet1*' dlrm --rounds 2
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import statistics
import sys
import time


def _suite(configs, isolation: str) -> tuple[float, list]:
    from torchgauge.runner import RunnerOptions, run_suite

    t0 = time.perf_counter()
    records = run_suite(configs, RunnerOptions(isolation=isolation))
    return time.perf_counter() - t0, records


def _medians(records) -> dict[str, float]:
    return {r.config.label(): r.metrics["time_ms"]["median"] for r in records if r.status == "ok"}


def _geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="+")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (per-run, per-model)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from torchgauge.config import plan
    from torchgauge.suite import Selection

    configs = plan(Selection(tuple(args.patterns)), size="smoke")
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs: dict[str, list] = {"per-run": [], "per-model": []}
    for _ in range(args.rounds):
        for isolation in ("per-run", "per-model"):
            wall, records = _suite(configs, isolation)
            overhead = statistics.median(r.wall_s - r.phases_s.get("timed", 0.0) for r in records)
            runs[isolation].append({"wall_s": wall, "overhead_median_s": overhead, "medians": _medians(records)})
            # one JSON line per suite: an interrupted comparison keeps what it measured
            print(
                json.dumps(
                    {
                        "isolation": isolation,
                        "wall_s": round(wall, 2),
                        "overhead_median_s": round(overhead, 3),
                        "load": round(os.getloadavg()[0], 2),
                        "medians": _medians(records),
                    }
                ),
                file=sys.stderr,
            )
    labels = sorted(set.intersection(*(set(r["medians"]) for rs in runs.values() for r in rs)))
    aa = (
        [runs["per-run"][1]["medians"][k] / runs["per-run"][0]["medians"][k] for k in labels] if args.rounds > 1 else []
    )
    ab = [
        statistics.median(r["medians"][k] for r in runs["per-model"])
        / statistics.median(r["medians"][k] for r in runs["per-run"])
        for k in labels
    ]
    doc = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "configurations": len(labels),
        "rounds": args.rounds,
        "wall_s": {k: [round(r["wall_s"], 1) for r in v] for k, v in runs.items()},
        "overhead_median_s": {k: [round(r["overhead_median_s"], 3) for r in v] for k, v in runs.items()},
        "geomean_ratio_per_model_over_per_run": _geomean(ab),
        "geomean_ratio_aa_per_run": _geomean(aa),
        "ratio_spread_per_model": [round(min(ab), 3), round(max(ab), 3)] if ab else None,
        "ratio_spread_aa": [round(min(aa), 3), round(max(aa), 3)] if aa else None,
        "per_config": {
            k: {"per_model_over_per_run": round(b, 3), **({"aa": round(a, 3)} if aa else {})}
            for k, a, b in zip(labels, aa or [None] * len(labels), ab)
        },
    }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
    print(json.dumps({k: v for k, v in doc.items() if k != "per_config"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
