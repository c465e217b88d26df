"""Scale-out: the same smoke suite on the local runner and on a two-node local Ray cluster.

Runs N smoke configurations (default 100: the first 50 registered models in train and eval)
twice with two runs at a time: the local runner (``jobs=2``, one thread per worker) and the
Ray executor on a cluster of two one-CPU nodes started here (each run pinned to its core).
Both executors stream every record into one PostgreSQL history started for the benchmark.
Prints a markdown table: wall time, throughput, per-task overhead, statuses, runs per node,
and the history rows per node and the time each store took.

Per-task overhead is the time per run not spent inside the run's own worker (its
``wall_s``): ``(wall * concurrency - sum(wall_s)) / N`` -- scheduling, worker start-up, result
transfer, the results file and the history write. Usage::

    python benchmarks/scale_out.py                     # 100 configurations
    python benchmarks/scale_out.py --models 'resnet*' --count 20
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = 2  # runs at a time in both executors: two one-CPU nodes, two local jobs


def _fixture(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "fixtures" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _configs(patterns: list[str], count: int, repeat: int, warmup: int) -> list:
    from torchgauge.config import plan
    from torchgauge.suite import select_models

    models = select_models(patterns)[: (count + 1) // 2]
    return plan(models, size="smoke", repeat=repeat, warmup=warmup)[:count]


def _run(name: str, executor, configs, options, store, out: Path) -> dict:
    from torchgauge.suite import run_and_save

    env = executor.environment()
    suite = store.begin_suite(env, source=f"scale_out:{name}")
    store_s: list[float] = []

    def save(record) -> None:
        t0 = time.perf_counter()
        store.add_run(suite, record)
        store_s.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    results = run_and_save(configs, options, out, env=env, executor=executor, on_result=save)
    wall = time.perf_counter() - t0
    busy = sum(r.wall_s for r in results.runs)
    return {
        "name": name,
        "wall": wall,
        "n": len(results.runs),
        "busy": busy,
        "suite": suite,
        "overhead": (wall * CONCURRENCY - busy) / len(results.runs),
        "store_ms": 1e3 * sum(store_s) / len(store_s),
        "statuses": Counter(r.status for r in results.runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=["*"], help="model patterns (default: all, first N/2 taken)")
    parser.add_argument("--count", type=int, default=100, help="configurations (default 100)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--ray-first", action="store_true", help="run the Ray executor first (the order drift favours)")
    args = parser.parse_args()

    from torchgauge.executors import LocalExecutor
    from torchgauge.executors.ray_cluster import RayExecutor, RayOptions
    from torchgauge.results.stores import open_store
    from torchgauge.runner import RunnerOptions

    configs = _configs(args.models, args.count, args.repeat, args.warmup)
    local_postgres, local_ray = _fixture("local_postgres"), _fixture("local_ray_cluster")
    tmp = Path(tempfile.mkdtemp(prefix="tg-scale-"))
    load_before = os.getloadavg()
    rows = []
    with local_postgres.local_postgres() as server:
        url = local_postgres.create_database(server)
        cluster = local_ray.LocalRayCluster(
            env={
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
                "TORCHGAUGE_CORE_LOCK_DIR": str(tmp / "core-locks"),
                "OMP_NUM_THREADS": "1",
            }
        )
        with open_store(url) as store:
            try:
                t0 = time.perf_counter()
                cluster.start()
                cluster.add_node("a", cpus=1)
                cluster.add_node("b", cpus=1)
                cluster_s = time.perf_counter() - t0
                executor = RayExecutor(RayOptions(address=cluster.address))
                t0 = time.perf_counter()
                executor.environment()  # connect and probe both nodes (once per suite)
                probe_s = time.perf_counter() - t0
                runs = {
                    "local": lambda: _run(
                        "local runner (jobs=2)",
                        LocalExecutor(),
                        configs,
                        RunnerOptions(timeout_s=args.timeout, jobs=CONCURRENCY, threads_per_worker=1),
                        store,
                        tmp / "local.json",
                    ),
                    "ray": lambda: _run(
                        "ray, 2 nodes x 1 CPU",
                        executor,
                        configs,
                        RunnerOptions(timeout_s=args.timeout),
                        store,
                        tmp / "ray.json",
                    ),
                }
                for name in ("ray", "local") if args.ray_first else ("local", "ray"):
                    rows.append(runs[name]())
                executor.close()
            finally:
                cluster.stop()
            stored = {
                row["name"]: Counter(
                    str((r.env or {}).get("ray_node_id", "local"))[:8] for r in store.load(row["suite"]).runs
                )
                for row in rows
            }
    load_after = os.getloadavg()

    print(
        f"{len(configs)} smoke configurations, repeat {args.repeat}, warm-up {args.warmup}; "
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} ({os.cpu_count()} CPUs)\n"
    )
    print(
        "| executor | wall s | configs/min | sum of run wall_s | per-task overhead s | history write ms/run | statuses "
        "| runs per node (history) |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for row in rows:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(row["statuses"].items()))
        nodes = ", ".join(f"{k}: {v}" for k, v in sorted(stored[row["name"]].items()))
        print(
            f"| {row['name']} | {row['wall']:.1f} | {60 * row['n'] / row['wall']:.1f} | {row['busy']:.1f} | "
            f"{row['overhead']:.2f} | {row['store_ms']:.1f} | {statuses} | {nodes} |"
        )
    print(
        f"\nresults files in {tmp}; starting the cluster (head + 2 nodes): {cluster_s:.1f} s; "
        f"connecting and probing the nodes: {probe_s:.1f} s "
        "(neither counted in the ray row)"
    )


if __name__ == "__main__":
    main()
