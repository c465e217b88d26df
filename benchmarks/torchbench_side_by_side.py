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
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TB_MEDIAN = re.compile(r"CPU Wall Time per batch:\s+([0-9.]+) milliseconds")


def _torchbench(checkout: Path, model: str, mode: str, timeout_s: float) -> dict[str, object]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "run.py", model, "-d", "cpu", "-t", mode],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=timeout_s,
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
                "all",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--torchbench", type=Path, required=True, help="checkout of pytorch/benchmark")
    parser.add_argument("--modes", default="eval", help="comma-separated: train,eval")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for round_ in range(args.rounds):
        for model in args.models:
            for mode in args.modes.split(","):
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
                        result = {
                            "wall_s": args.timeout,
                            "median_ms": None,
                            "error": f"timed out after {args.timeout:g} s",
                        }
                    rows.append(
                        {
                            "round": round_,
                            "model": model,
                            "mode": mode,
                            "tool": tool,
                            "load": round(os.getloadavg()[0], 2),
                            **result,
                        }
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr)
    summary = {}
    for model in args.models:
        for mode in args.modes.split(","):
            pick = lambda tool, key, model=model, mode=mode: [
                r[key]
                for r in rows
                if (r["model"], r["mode"], r["tool"]) == (model, mode, tool) and r["median_ms"] is not None
            ]
            tg_wall, tb_wall = pick("torchgauge", "wall_s"), pick("torchbench", "wall_s")
            tg_med, tb_med = pick("torchgauge", "median_ms"), pick("torchbench", "median_ms")
            summary[f"{model}/{mode}"] = {
                "wall_ratio_torchgauge_over_torchbench": round(
                    statistics.median(tg_wall) / statistics.median(tb_wall), 3
                )
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
