"""Peak memory and time of reading a large trace: a synthetic Kineto trace of a given size, analysed
the way ``breakdown --trace`` and ``diagnose --trace`` read it.

Writes a trace shaped like the real ones (ProfilerStep annotations, aten ops, runtime
launches, kernels on two streams, flow arrows; see tests/fixtures/kineto_traces.py) until it
reaches ``--mb`` megabytes, then reads it in a fresh subprocess per mode and reports that
process's peak RSS (``ru_maxrss``) and wall time. The target in issue 21: a 500 MB trace in at
most 2 GB of RSS. Usage::

    python benchmarks/trace_import_memory.py --mb 500 [--gzip] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Peak RSS allowed for a 500 MB trace (issue 21).
RSS_LIMIT_MB = 2048

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from torchgauge.workflows.trace_analysis import analyse_trace_file, diagnose_trace_file
mode, path = sys.argv[1], sys.argv[2]
if mode == "breakdown":
    out = [a.breakdown["fractions"] for a in analyse_trace_file(path)]
else:
    out = [len(d.findings) for d in diagnose_trace_file(path)]
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "result": out}))
"""


def _kineto():
    spec = importlib.util.spec_from_file_location("kineto_traces", ROOT / "tests" / "fixtures" / "kineto_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_synthetic(path: Path, megabytes: float, gz: bool) -> tuple[int, int]:
    """Write steps of 500 kernels until the uncompressed JSON reaches ``megabytes``; (events, bytes)."""
    kineto = _kineto()
    target = int(megabytes * 1e6)
    written = {"bytes": 0, "events": 0}

    def events():
        for s in itertools.count():
            for e in kineto.training_events(1, 500):
                if e.get("cat") == "user_annotation":
                    e = {**e, "name": f"ProfilerStep#{s}", "ts": e["ts"] + s * 2000.0}
                else:
                    e = {**e, "ts": e["ts"] + s * 2000.0}
                    if "correlation" in e.get("args", {}):
                        e["args"] = {**e["args"], "correlation": e["args"]["correlation"] + s * 1000}
                    if e.get("ph") == "s":
                        e["id"] += s * 1000
                written["bytes"] += len(json.dumps(e)) + 2
                written["events"] += 1
                yield e
            if written["bytes"] >= target:
                return

    kineto.write_trace(path, events(), gz=gz)
    return written["events"], written["bytes"]


def measure(mode: str, path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(path)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=500.0, help="uncompressed size of the synthetic trace")
    parser.add_argument("--gzip", action="store_true", help="write it gzipped")
    parser.add_argument("--keep", default=None, help="write the trace into this folder and keep it")
    parser.add_argument("--modes", default="breakdown,diagnose", help="comma-separated: breakdown, diagnose")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tg-trace-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("synthetic.json.gz" if args.gzip else "synthetic.json")
    t0 = time.perf_counter()
    n_events, n_bytes = write_synthetic(path, args.mb, args.gzip)
    print(
        f"wrote {path} ({n_bytes / 1e6:.0f} MB of JSON, {path.stat().st_size / 1e6:.0f} MB on disk, "
        f"{n_events} events) in {time.perf_counter() - t0:.0f} s"
    )
    print(f"load: {os.getloadavg()}")
    try:
        for mode in args.modes.split(","):
            r = measure(mode, path)
            verdict = "ok" if r["peak_rss_mb"] <= RSS_LIMIT_MB * args.mb / 500 else "OVER"
            print(
                f"{mode:9s}: peak RSS {r['peak_rss_mb']:.0f} MB ({verdict}: limit {RSS_LIMIT_MB} MB per 500 MB), "
                f"{r['seconds']:.1f} s"
            )
    finally:
        if not args.keep:
            path.unlink()
            folder.rmdir()


if __name__ == "__main__":
    main()
