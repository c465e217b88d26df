"""Side by side with TorchBench's ``run.py`` on the same models, interleaved, as ratios.

For each round and each (model, mode), runs TorchBench's ``python run.py MODEL -d cpu -t MODE``
(10 timed iterations after 3 warm-up, its defaults) and ``torchgauge run MODEL --mode MODE``
(``--repeat 10 --warmup 3``, the same batch sizes) one after the other, and records each
process's wall time and the median step each tool reports. TorchBench is not vendored: pass
a checkout of github.com/pytorch/benchmark (its ``run.py``, ``torchbenchmark/`` and
``utils/``). Models that need packages missing here (torchvision, cv2, onnx, ...) fail in
TorchBench's import and are reported with the error line.

    PYTHONPATH=src python benchmarks/torchbench_side_by_side.py --torchbench /tmp/tbench \\
        lennard_jones nvidia_deeprecommender --rounds 2

``--suite`` compares a full-size *pass* as each tool runs one: TorchBench's ``run.py`` once per
configuration (it has no multi-model runner), torchgauge one ``run`` over every configuration
with ``--torchgauge-args`` (e.g. ``"--adaptive 0.05 --repeat 5 --warmup 1"``). Per round it
records each tool's total wall time and every configuration's median; the summary gives the
ratio of total walls, each configuration's median ratio, and each tool's precision: how far
its medians of one configuration move between rounds (max/min over rounds), which is what a
user comparing two builds run in separate processes relies on.

    PYTHONPATH=src python benchmarks/torchbench_side_by_side.py --torchbench /tmp/tbench --suite \\
        --modes train,eval --rounds 3 --torchgauge-args "--adaptive 0.05 --repeat 5 --warmup 1" \\
        lennard_jones nanogpt phlippe_resnet
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TB_MEDIAN = re.compile(r"CPU Wall Time per batch:\s+([0-9.]+) milliseconds")


# Intra-op threads for both tools: "all" is torch's default (one per CPU), which TorchBench's
# run.py uses; a number N runs TorchBench with OMP_NUM_THREADS=N and torchgauge with --threads N.
THREADS = "all"


def _torchbench(checkout: Path, model: str, mode: str, timeout_s: float) -> dict[str, object]:
    env = dict(os.environ)
    if THREADS != "all":
        env["OMP_NUM_THREADS"] = THREADS
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "run.py", model, "-d", "cpu", "-t", mode],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    wall = time.perf_counter() - t0
    match = TB_MEDIAN.search(proc.stdout + proc.stderr)
    error = None if match else (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
    return {
        "wall_s": round(wall, 2),
        "median_ms": float(match.group(1)) if match else None,
        "error": error[0] if error else None,
    }


def _torchgauge(model: str, mode: str, timeout_s: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "torchgauge.cli",
                "run",
                model,
                "--mode",
                mode,
                "--repeat",
                "10",
                "--warmup",
                "3",
                "--metrics",
                "time",
                # torch's default thread count, as TorchBench's run.py uses (torchgauge defaults
                # to one intra-op thread for stability on shared machines)
                "--threads",
                THREADS,
                "-o",
                str(out),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        wall = time.perf_counter() - t0
        runs = json.loads(out.read_text())["runs"] if out.exists() else []
    median = runs[0]["metrics"].get("time_ms", {}).get("median") if runs else None
    error = None if median is not None else (runs[0]["error"] if runs else proc.stderr.strip()[-300:])
    return {"wall_s": round(wall, 2), "median_ms": median, "error": error}


def _split(spec: str, modes: list[str]) -> list[tuple[str, str]]:
    """``MODEL`` (every mode in ``modes``) or ``MODEL/MODE`` -> (model, mode) configurations."""
    model, _, mode = spec.partition("/")
    return [(model, mode)] if mode else [(model, m) for m in modes]


def _rel_width(time_ms: dict) -> float | None:
    low, high, median = time_ms.get("ci_low"), time_ms.get("ci_high"), time_ms.get("median")
    return round((high - low) / median, 4) if None not in (low, high, median) and median > 0 else None


def _cpu_rel_width(time_ms: dict) -> float | None:
    """The recorded CPU-time series' 95% median interval over its median (what compare tests on
    one-thread CPU runs, docs/regression-detection.md)."""
    from torchgauge.stats.summary import summarize

    cpu = time_ms.get("cpu_samples")
    if not cpu:
        return None
    s = summarize(cpu)
    return round((s.ci_high - s.ci_low) / s.median, 4) if s.median > 0 else None


def _torchgauge_pass(configs: list[tuple[str, str]], extra: list[str], timeout_s: float) -> dict[str, object]:
    """One ``torchgauge run`` per distinct mode set over ``configs``: wall in all, and per configuration
    its median, sample and warm-up counts, relative CI width and phases (``phases_s``)."""
    modes_of: dict[str, set[str]] = {}
    for model, mode in configs:
        modes_of.setdefault(model, set()).add(mode)
    groups: dict[str, list[str]] = {}
    for model, modes in modes_of.items():
        groups.setdefault("both" if modes == {"train", "eval"} else next(iter(modes)), []).append(model)
    runs_out: dict[str, dict] = {}
    errors: dict[str, str] = {}
    wall = runs_wall = 0.0
    for mode, models in groups.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "torchgauge.cli", "run", *models, "--mode", mode]
            cmd += ["--threads", THREADS, *extra, "-o", str(out), "--quiet"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            wall += time.perf_counter() - t0
            runs = json.loads(out.read_text())["runs"] if out.exists() else []
            if not runs:
                errors[f"{mode}:{','.join(models)}"] = proc.stderr.strip()[-300:]
        for run in runs:
            key = f"{run['model']}/{run['mode']}"
            time_ms = run["metrics"].get("time_ms", {})
            runs_wall += run.get("wall_s") or 0.0
            runs_out[key] = {
                "median_ms": time_ms.get("median"),
                "samples": len(time_ms.get("samples", ())),
                "warmup": len(time_ms.get("warmup_samples", ())),
                "ci_rel_width": _rel_width(time_ms),
                "cpu_median_ms": time_ms.get("cpu_median"),
                "cpu_ci_rel_width": _cpu_rel_width(time_ms),
                "wall_s": run.get("wall_s"),
                "phases_s": run.get("phases_s"),
                # the raw series, for the warm-up and stopping analysis (docs/performance.md)
                "series_ms": {
                    k: time_ms.get(k) for k in ("warmup_samples", "samples", "warmup_cpu_samples", "cpu_samples")
                },
                "stopping": {k: time_ms.get(k) for k in ("stopping", "warmup_stopping") if k in time_ms},
            }
            if run.get("error"):
                errors[key] = str(run["error"])[:300]
    return {
        "wall_s": round(wall, 2),
        # the pass's wall outside its runs: interpreter and CLI start, forkserver start, results writes
        "outside_runs_s": round(wall - runs_wall, 2),
        "runs": runs_out,
        "medians_ms": {k: r["median_ms"] for k, r in runs_out.items()},
        "errors": errors,
    }


def _torchbench_pass(args: argparse.Namespace, configs: list[tuple[str, str]], round_: int) -> dict[str, object]:
    per = {}
    for m, mode in configs:
        per[f"{m}/{mode}"] = _torchbench_or_timeout(args, m, mode)
        print(json.dumps({"round": round_, "torchbench": f"{m}/{mode}", **per[f"{m}/{mode}"]}), file=sys.stderr)
    return {
        "wall_s": round(sum(r["wall_s"] for r in per.values()), 2),
        "runs": per,
        "medians_ms": {k: r["median_ms"] for k, r in per.items()},
        "errors": {k: r["error"] for k, r in per.items() if r["error"]},
    }


def _suite(args: argparse.Namespace, configs: list[tuple[str, str]]) -> dict[str, object]:
    """Rounds of a full pass per tool, the order rotated each round so that each tool goes first as often."""
    variants = {
        f"torchgauge{i + 1}" if len(args.torchgauge_args) > 1 else "torchgauge": shlex.split(a)
        for i, a in enumerate(args.torchgauge_args)
    }
    tools = ["torchbench", *variants]
    rounds = []
    for round_ in range(args.rounds):
        order = tools[round_ % len(tools) :] + tools[: round_ % len(tools)]
        entry: dict[str, object] = {"round": round_, "order": order}
        for tool in order:
            load = round(os.getloadavg()[0], 2)
            if tool == "torchbench":
                result = _torchbench_pass(args, configs, round_)
            else:
                result = _torchgauge_pass(configs, variants[tool], args.timeout * len(configs))
            entry[tool] = {**result, "load_before": load, "load_after": round(os.getloadavg()[0], 2)}
            print(
                json.dumps({"round": round_, "tool": tool, "wall_s": result["wall_s"], "load": load}), file=sys.stderr
            )
        rounds.append(entry)
        if args.json:  # each round as it ends, so a pass cut short still leaves its finished rounds
            Path(args.json).with_suffix(".rounds.json").write_text(json.dumps(rounds, indent=1) + "\n")
    summary = summarize_suite(rounds, [f"{m}/{mode}" for m, mode in configs], list(variants))
    return {**summary, "torchgauge_args": {k: " ".join(v) for k, v in variants.items()}, "rounds": rounds}


def _geomean(values: list[float]) -> float | None:
    return round(math.exp(statistics.fmean(math.log(v) for v in values)), 4) if values else None


def summarize_suite(rounds: list[dict], keys: list[str], variants: list[str]) -> dict[str, object]:
    """Wall ratios and precision of finished rounds (pure: ``rounds`` as ``_suite`` records them).

    A variant's wall ratio is taken per round (its pass over TorchBench's in the same round,
    so a load that drifts between rounds cancels), then the median over rounds. Precision of
    a tool: per configuration the max/min of its medians over rounds (what a user comparing
    two processes sees), summarised as the geometric mean and the worst over configurations
    measured in every round by every tool; for torchgauge also the median relative width of
    the 95% interval it records, and its sample and warm-up counts.
    """
    tools = ["torchbench", *variants]
    walls = {t: [r[t]["wall_s"] for r in rounds] for t in tools}
    common = [k for k in keys if all(r[t]["medians_ms"].get(k) for r in rounds for t in tools)]
    per_config: dict[str, dict] = {}
    for key in keys:
        meds = {t: [r[t]["medians_ms"].get(key) for r in rounds] for t in tools}
        ok = {t: [m for m in v if m] for t, v in meds.items()}
        row: dict[str, object] = {"medians_ms": meds}
        row["round_spread"] = {t: round(max(v) / min(v), 3) if len(v) > 1 else None for t, v in ok.items()}
        for t in variants:
            runs = [r[t]["runs"].get(key, {}) for r in rounds]
            row[t] = {
                f: [run.get(f) for run in runs] for f in ("samples", "warmup", "ci_rel_width", "cpu_ci_rel_width")
            }
            cpu = [run["cpu_median_ms"] for run in runs if run.get("cpu_median_ms")]
            row[t]["cpu_round_spread"] = round(max(cpu) / min(cpu), 3) if len(cpu) > 1 else None
            if ok[t] and ok["torchbench"]:
                row[t]["median_ratio"] = round(statistics.median(ok[t]) / statistics.median(ok["torchbench"]), 3)
        per_config[key] = row
    precision = {}
    for t in tools:
        spreads = [per_config[k]["round_spread"][t] for k in common if per_config[k]["round_spread"][t]]
        precision[t] = {"spread_geomean": _geomean(spreads), "spread_max": max(spreads, default=None)}
        if t in variants:
            widths = [w for k in common for w in per_config[k][t]["ci_rel_width"] if w is not None]
            cpu_widths = [w for k in common for w in per_config[k][t]["cpu_ci_rel_width"] if w is not None]
            cpu_spreads = [per_config[k][t]["cpu_round_spread"] for k in common if per_config[k][t]["cpu_round_spread"]]
            samples = [n for k in common for n in per_config[k][t]["samples"] if n]
            warm = [n for k in common for n in per_config[k][t]["warmup"] if n is not None]
            precision[t].update(
                ci_rel_width_median=round(statistics.median(widths), 4) if widths else None,
                ci_rel_width_max=max(widths, default=None),
                cpu_spread_geomean=_geomean(cpu_spreads),
                cpu_spread_max=max(cpu_spreads, default=None),
                cpu_ci_rel_width_median=round(statistics.median(cpu_widths), 4) if cpu_widths else None,
                samples_total=sum(samples),
                warmup_total=sum(warm),
            )
    ratios = {}
    for t in variants:
        per_round = [round(r[t]["wall_s"] / r["torchbench"]["wall_s"], 3) for r in rounds if r["torchbench"]["wall_s"]]
        ratios[t] = {
            "per_round": per_round,
            "median": statistics.median(per_round) if per_round else None,
            "of_median_walls": round(statistics.median(walls[t]) / statistics.median(walls["torchbench"]), 3),
        }
    return {
        "walls_s": walls,
        "wall_ratio_over_torchbench": ratios,
        "configs_in_every_round": common,
        "precision": precision,
        "per_config": per_config,
    }


def _torchbench_or_timeout(args: argparse.Namespace, model: str, mode: str) -> dict[str, object]:
    try:
        return _torchbench(args.torchbench, model, mode, args.timeout)
    except subprocess.TimeoutExpired:
        return {"wall_s": args.timeout, "median_ms": None, "error": f"timed out after {args.timeout:g} s"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="MODEL (every --modes) or MODEL/MODE")
    parser.add_argument("--torchbench", type=Path, required=True, help="checkout of pytorch/benchmark")
    parser.add_argument("--modes", default="eval", help="comma-separated: train,eval")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    parser.add_argument("--json", default=None)
    parser.add_argument("--suite", action="store_true", help="a whole pass per tool (see the module docstring)")
    parser.add_argument(
        "--torchgauge-args",
        action="append",
        default=None,
        help="with --suite: run's options; repeat it to interleave several torchgauge settings in each round "
        "(torchgauge1, torchgauge2, ...) [default: --repeat 10 --warmup 3]",
    )
    parser.add_argument("--threads", default="all", help="intra-op threads for both tools: all or N")
    args = parser.parse_args(argv)
    global THREADS
    THREADS = args.threads
    load_before = [round(x, 2) for x in os.getloadavg()]
    configs = [c for spec in args.models for c in _split(spec, args.modes.split(","))]
    if args.suite:
        args.torchgauge_args = args.torchgauge_args or ["--repeat 10 --warmup 3"]
        doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "load_before": load_before}
        doc.update(_suite(args, configs), threads=THREADS)
        doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps({k: v for k, v in doc.items() if k != "rounds"}, indent=1))
        return 0
    rows = []
    for round_ in range(args.rounds):
        for model, mode in configs:
            # alternate which tool goes first, so a load trend does not favour one
            order = ("torchbench", "torchgauge") if round_ % 2 == 0 else ("torchgauge", "torchbench")
            for tool in order:
                try:
                    result = (
                        _torchbench(args.torchbench, model, mode, args.timeout)
                        if tool == "torchbench"
                        else _torchgauge(model, mode, args.timeout)
                    )
                except subprocess.TimeoutExpired:
                    result = {"wall_s": args.timeout, "median_ms": None, "error": f"timed out after {args.timeout:g} s"}
                load = round(os.getloadavg()[0], 2)
                rows.append({"round": round_, "model": model, "mode": mode, "tool": tool, "load": load, **result})
                print(json.dumps(rows[-1]), file=sys.stderr)
    summary = {}
    for model, mode in configs:
        pick = lambda tool, key, model=model, mode=mode: [
            r[key]
            for r in rows
            if (r["model"], r["mode"], r["tool"]) == (model, mode, tool) and r["median_ms"] is not None
        ]
        tg_wall, tb_wall = pick("torchgauge", "wall_s"), pick("torchbench", "wall_s")
        tg_med, tb_med = pick("torchgauge", "median_ms"), pick("torchbench", "median_ms")
        summary[f"{model}/{mode}"] = {
            "wall_ratio_torchgauge_over_torchbench": round(statistics.median(tg_wall) / statistics.median(tb_wall), 3)
            if tg_wall and tb_wall
            else None,
            "median_step_ratio": round(statistics.median(tg_med) / statistics.median(tb_med), 3)
            if tg_med and tb_med
            else None,
        }
    doc = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "summary": summary,
        "rows": rows,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
