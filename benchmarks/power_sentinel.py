"""Re-judge the nightly trials with per-step CPU time divided by a concurrent speed sentinel.

``benchmarks/speed_monitor.py``, run beside ``detection_power.py``, times a torch-free Python
loop every few seconds in one warm process: how much CPU time a fixed piece of work took at
that moment on this machine. Between two nights the sentinel moved with the nights' common
shift (docs/regression-detection.md), so dividing each process's step CPU time by the sentinel's
reading at the time that process ran is a candidate correction for the machine's speed. The
sentinel runs no torch code, so a slowdown of the build under test stays in the ratio.

Two variants, both without fitted parameters: ``process`` divides each process's value by the
median sentinel reading within ``WINDOW_S`` seconds of its start; ``night`` divides every value
of a night by the median reading over the whole night. Each trial is then judged like the
nightly's compare (threshold, one-sided Mann-Whitney on the per-process values, Holm over the
trial's configurations) on the corrected values. Offline: this measures nothing new.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path
from typing import Any

from torchgauge.stats.compare import compare_samples
from torchgauge.stats.corrections import holm

# Sentinel readings within this many seconds of a process's start describe its moment.
WINDOW_S = 15.0
SENTINEL = "python_loop"  # the torch-free workload of speed_monitor.py


def _seconds(utc: str) -> float:
    return dt.datetime.fromisoformat(utc.replace("Z", "+00:00")).timestamp()


def load_sentinel(path: Path) -> list[tuple[float, float]]:
    """(UTC seconds, sentinel CPU ms) per monitor burst, in time order."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    return sorted((_seconds(r["utc"]), r[SENTINEL]) for r in rows)


def _reading(sentinel: list[tuple[float, float]], start: float, end: float) -> float | None:
    values = [v for t, v in sentinel if start <= t <= end]
    return statistics.median(values) if len(values) >= 3 else None


def _processes(night: Path) -> dict[str, list[tuple[float, float]]]:
    """model/mode -> [(start UTC seconds, step CPU ms)] of the night's usable records."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in json.loads(night.read_text())["runs"]:
        cpu = (r["metrics"].get("time_ms") or {}).get("cpu_samples") if r["status"] == "ok" else None
        if cpu:
            out.setdefault(f"{r['model']}/{r['mode']}", []).append((_seconds(r["started_at"]), statistics.median(cpu)))
    return out


def corrected(night: Path, sentinel: list[tuple[float, float]], variant: str) -> dict[str, list[float]] | None:
    """The night's per-process values divided by the sentinel (None: the sentinel did not cover it)."""
    procs = _processes(night)
    times = [t for values in procs.values() for t, _ in values]
    if not times:
        return None
    whole = _reading(sentinel, min(times), max(times))
    if whole is None or not (sentinel[0][0] <= min(times) and max(times) <= sentinel[-1][0]):
        return None
    out = {}
    for key, values in procs.items():
        scaled = []
        for t, cpu in values:
            speed = whole if variant == "night" else _reading(sentinel, t - WINDOW_S, t + WINDOW_S) or whole
            scaled.append(cpu / speed)
        out[key] = scaled
    return out


def rejudge_with_sentinel(
    report: dict[str, Any], work: Path, sentinel: list[tuple[float, float]], variant: str
) -> dict[tuple[int, float, str], bool]:
    """(trial, plant, configuration) -> flagged on sentinel-corrected CPU time, for the covered trials."""
    proc = report["procedure"]
    args = dict(zip(proc["compare_args"][::2], proc["compare_args"][1::2]))
    threshold, alpha = float(args["--threshold"].rstrip("%")) / 100, float(args["--alpha"])
    out = {}
    for t in report["trials"]:
        tdir = work / f"trial-{t['plant']}-{t['index']:02d}"
        base = corrected(tdir / "base.json", sentinel, variant)
        new = corrected(tdir / "candidate.json", sentinel, variant)
        if base is None or new is None:
            continue
        keys = sorted(k for k in t["configs"] if k in base and k in new)
        changes = [compare_samples(base[k], new[k], threshold=threshold, alpha=alpha) for k in keys]
        for key, change, p in zip(keys, changes, holm([c.p_greater for c in changes])):
            out[t["index"], t["plant"], key] = change.change >= threshold and p <= alpha
    return out
