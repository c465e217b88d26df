"""The nightly procedure of ``benchmarks/detection_power.py``: trials of two nights and a compare.

One trial is what the nightly workflow does on two consecutive nights, with the commands read
from ``.github/workflows/nightly.yml`` (so the benchmark follows the workflow when it changes):

1. base night: ``torchgauge run MODELS --device cpu --mode both --rounds R --repeat REPEAT
   --warmup WARMUP`` with the stock interpreter (and the workflow's ``OMP_NUM_THREADS``);
2. candidate night: the same command with the planted interpreter (no plant: an A/A trial);
3. both nights imported into a fresh history database in night order (``import --merge
   --allow-mixed-hardware``), then ``compare previous latest`` with the workflow's options.

Which night is measured first alternates from trial to trial (the import order keeps the base
``previous``), so load that drifts within a trial favours neither side on average. Every
exit code, the wall and CPU time of each command (workers included: the caller is a child
subreaper), the load average at every night's start and end, and each configuration's
verdict with the per-process step times behind it are kept in the trial's record.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rounds_cost import _children_cpu, _reap_orphans

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
TIME = "time_ms"


@dataclass(frozen=True)
class NightlyProcedure:
    """The nightly's CPU procedure: a night's ``run`` settings and ``compare``'s options."""

    rounds: int
    repeat: int
    warmup: int
    env: dict[str, str] = field(default_factory=dict)  # the workflow's environment for the run step
    compare_args: tuple[str, ...] = ()  # e.g. --threshold 7% --alpha 0.01 --correction holm --time-signal auto

    def run_args(self) -> list[str]:
        return ["--device", "cpu", "--mode", "both", "--rounds", str(self.rounds)] + [
            "--repeat",
            str(self.repeat),
            "--warmup",
            str(self.warmup),
        ]

    def option(self, name: str) -> str:
        args = list(self.compare_args)
        return args[args.index(name) + 1]


def read_workflow(path: Path = WORKFLOW) -> NightlyProcedure:
    """The procedure the workflow runs; SystemExit naming what is missing if its shape changed."""
    text = path.read_text()
    env = dict(re.findall(r'^  ([A-Z_]+): "?([^"\n$]+)"?\s*$', text, flags=re.M))
    missing = [k for k in ("ROUNDS", "REPEAT", "WARMUP", "OMP_NUM_THREADS") if k not in env]
    run_step = re.search(r"torchgauge run .*?--device cpu --mode both.*?\n.*?--rounds \"\$ROUNDS\"", text, re.S)
    compare = re.search(r"torchgauge compare previous latest (.*?)\\?\n(.*?)--output", text, re.S)
    if missing or run_step is None or compare is None:
        what = f"variables {missing}" if missing else "the CPU run step" if run_step is None else "the compare step"
        raise SystemExit(f"{path}: cannot find {what}; update benchmarks/power_nightly.py to the workflow's shape")
    args = tuple(shlex.split((compare.group(1) + " " + compare.group(2)).replace("\\", " ")))
    return NightlyProcedure(
        rounds=int(env["ROUNDS"]),
        repeat=int(env["REPEAT"]),
        warmup=int(env["WARMUP"]),
        env={"OMP_NUM_THREADS": env["OMP_NUM_THREADS"]},
        compare_args=args,
    )


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def trial_start() -> tuple[str, list[float], float]:
    """When a trial starts: (UTC time, load averages, the children's CPU seconds so far)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), _load(), _children_cpu()


def trial_header(started: tuple[str, list[float], float], plant: float, base_first: bool) -> dict[str, Any]:
    """The fields every trial record starts with (power_rates reads them): the plant, which side
    ran first, the start time, the load at start and end, and the CPU time the trial cost."""
    utc, load0, cpu0 = started
    return {
        "plant": plant,
        "first": "base" if base_first else "candidate",
        "started_utc": utc,
        "load_start": load0,
        "load_end": _load(),
        "cpu_s": round(_children_cpu() - cpu0, 1),
    }


def cli(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``python -m torchgauge.cli ARGS``: exit code, wall and CPU seconds (workers too), stderr tail."""
    load0, cpu0, t0 = _load(), _children_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torchgauge.cli", *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    _reap_orphans()
    return {
        "exit": proc.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(_children_cpu() - cpu0, 1),
        "load_start": load0,
        "load_end": _load(),
        **({"stderr_tail": proc.stderr[-1500:]} if proc.returncode not in (0, 1) else {}),
    }


def night(bench: Any, out: Path, plant: float, proc: NightlyProcedure) -> dict[str, Any]:
    """One night's ``torchgauge run`` (exit 1 only means a model failed, as in the workflow)."""
    env = {**bench.env(plant), **proc.env}
    args = ["run", *bench.models, *proc.run_args(), "--size", "smoke", "--output", str(out), "--quiet", "--no-db"]
    return {"plant": plant, **cli(args, env)}


def run_trial(bench: Any, proc: NightlyProcedure, tdir: Path, plant: float, base_first: bool) -> dict[str, Any]:
    """Two nights and the nightly's compare; the trial's record (see the module docstring)."""
    tdir.mkdir(parents=True, exist_ok=True)
    files = {"base": tdir / "base.json", "candidate": tdir / "candidate.json"}
    nights: dict[str, dict[str, Any]] = {}
    started = trial_start()
    for side in ("base", "candidate") if base_first else ("candidate", "base"):
        nights[side] = night(bench, files[side], plant if side == "candidate" else 0.0, proc)
    db = tdir / "history.sqlite"
    db.unlink(missing_ok=True)
    env = {**bench.env(0.0), **proc.env}
    imports = [cli(["import", str(files[s]), "--merge", "--allow-mixed-hardware", "--db", str(db)], env) for s in files]
    out, report = tdir / "compare.json", tdir / "report.md"
    out.unlink(missing_ok=True)
    compare = cli(
        ["compare", "previous", "latest", "--db", str(db), *proc.compare_args, "--output", str(out)]
        + ["--markdown", str(report), "--quiet"],
        env,
    )
    record = {
        **trial_header(started, plant, base_first),
        "nights": nights,
        "imports": [i["exit"] for i in imports],
        "compare": compare,
        "configs": {},
    }
    if out.exists():
        record["configs"], record["cli_agrees"] = verdicts(files["base"], files["candidate"], out, proc)
    return record


def _processes(records: list[dict[str, Any]], metric: str = TIME) -> dict[str, list]:
    """Per process (one record each at the nightly's REPEAT 1): CPU and wall step, undisturbed fraction;
    for a deterministic count (``metric`` not time), its value per step in each process."""
    if metric != TIME:
        return {metric: [(r["metrics"].get(metric) or {}).get("per_step") for r in records]}
    out: dict[str, list] = {"cpu_ms": [], "wall_ms": [], "undisturbed": [], "oversubscribed": 0}
    for r in records:
        t = r["metrics"].get(TIME) or {}
        out["cpu_ms"].append(round(statistics.median(t["cpu_samples"]), 4) if t.get("cpu_samples") else None)
        out["wall_ms"].append(round(t["median"], 4) if "median" in t else None)
        out["undisturbed"].append(t.get("undisturbed_fraction"))
        out["oversubscribed"] += bool((r.get("threads") or {}).get("oversubscribed"))
    return out


def verdicts(
    base: Path, new: Path, compare_json: Path, proc: NightlyProcedure, metric: str = TIME
) -> tuple[dict[str, Any], bool]:
    """Each configuration's verdict on ``metric`` (default time) as the CLI gave it, with its change,
    p-value and per-process data (CPU and wall step times; for a count, the count).

    The CLI's JSON lists only what it flagged (and counts the unchanged), so the same comparison
    is recomputed in-process on the night files for every configuration's change and p-value;
    ``cli_agrees`` says whether both flagged the same configurations (they should: same rule).
    ``memory_flag``: a regression on another quantity than ``metric`` and time.
    """
    from torchgauge.compare.regression import compare_results, parse_threshold
    from torchgauge.results.schema import load_results

    cli_doc = json.loads(compare_json.read_text())
    flagged = {
        kind: {(f["model"], f["mode"]) for f in cli_doc[kind] if f["metric"] == metric}
        for kind in ("regressions", "improvements", "inconclusive")
    }
    memory = {(f["model"], f["mode"]) for f in cli_doc["regressions"] if f["metric"] not in (TIME, metric)}
    b, n = load_results(base), load_results(new)
    cmp = compare_results(
        b,
        n,
        threshold=parse_threshold(proc.option("--threshold")),
        alpha=float(proc.option("--alpha")),
        correction=proc.option("--correction"),
        time_signal=proc.option("--time-signal"),
    )
    every = (*cmp.regressions, *cmp.improvements, *cmp.unchanged, *cmp.inconclusive)
    findings = [f for f in every if f.metric == metric]
    mine = {(f.config.model, f.config.mode) for f in cmp.regressions if f.metric == metric}
    by_key: dict[tuple[str, str], dict[str, list]] = {}
    for side, doc in (("base", json.loads(base.read_text())), ("new", json.loads(new.read_text()))):
        for r in doc["runs"]:
            if r["status"] == "ok":
                by_key.setdefault((r["model"], r["mode"]), {}).setdefault(side, []).append(r)
    configs = {}
    for f in findings:
        key = (f.config.model, f.config.mode)
        verdict = next((k for k, keys in flagged.items() if key in keys), "unchanged")
        sides = by_key.get(key, {})
        configs[f"{key[0]}/{key[1]}"] = {
            "verdict": {"regressions": "regression", "improvements": "improvement"}.get(verdict, verdict),
            "change": None if f.change is None else round(f.change, 4),
            "p_value": None if f.p_value is None else float(f"{f.p_value:.3g}"),
            "signal": f.detail.get("signal"),
            "memory_flag": key in memory,
            "base": _processes(sides.get("base", []), metric),
            "new": _processes(sides.get("new", []), metric),
        }
    return configs, mine == flagged["regressions"]


def confirm_trial(bench: Any, proc: NightlyProcedure, tdir: Path, plant: float) -> dict[str, Any]:
    """The trial's comparison again with ``compare --confirm``: flagged configurations re-measured in the
    same session with both builds (ABBA order, fresh processes, each side's interpreter), kept only if
    flagged again. The nightly cannot do this as it stands: last night's build is gone by morning."""
    out = tdir / "confirm.json"
    out.unlink(missing_ok=True)
    args = ["compare", "previous", "latest", "--db", str(tdir / "history.sqlite"), *proc.compare_args, "--confirm"]
    args += ["--baseline-python", sys.executable, "--candidate-python", bench.interpreter(plant)]
    result = cli([*args, "--output", str(out), "--quiet"], {**bench.env(0.0), **proc.env})
    if not out.exists():
        return result
    doc = json.loads(out.read_text())
    keys = lambda kind, time: sorted(  # noqa: E731
        f"{f['model']}/{f['mode']}" for f in doc[kind] if (f["metric"] == TIME) == time
    )
    return {
        **result,
        "rounds": doc["confirm_rounds"],
        "kept": keys("regressions", True),
        "dismissed": keys("dismissed", True),
        "memory_kept": keys("regressions", False),
    }


def schedule(plants: list[float], trials: list[int]) -> list[tuple[float, int]]:
    """(plant, trial number within the plant) in round-robin order, so every scenario sees the day's loads."""
    counts = dict(zip(plants, trials))
    return [(p, i) for i in range(max(trials)) for p in plants if i < counts[p]]


def run_trials(
    bench: Any,
    work: Path,
    plants: list[float],
    trials: list[int],
    proc: Any,
    confirm: bool = False,
    *,
    measure: Callable[..., dict[str, Any]] = run_trial,
    report_name: str = "nightly-report.json",
) -> Path:
    """Every scheduled trial not yet in ``work/REPORT_NAME``; the report is rewritten after each, so a stop
    loses at most the trial in progress and a rerun resumes.

    ``measure(bench, proc, tdir, plant, base_first)`` measures one trial (default: the nightly's two
    nights, :func:`run_trial`; ``power_ab.run_ab_trial``: same-session interleaved rounds). With
    ``confirm``, every trial of the report without a confirmation (new or already measured) also
    gets one (:func:`confirm_trial`), recorded under ``"confirm"``.
    """
    path = work / report_name
    report = json.loads(path.read_text()) if path.exists() else {}
    report.setdefault("procedure", {**proc.__dict__, "compare_args": list(proc.compare_args), "size": "smoke"})
    report.setdefault("models", bench.models)
    report.setdefault("affected", sorted(bench.affected))
    report.setdefault("trials", [])
    done = {(t["plant"], t["index"]) for t in report["trials"]}

    def save() -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.replace(path)

    for record in report["trials"]:
        if confirm and "confirm" not in record:
            tdir = work / f"trial-{record['plant']}-{record['index']:02d}"
            record["confirm"] = confirm_trial(bench, proc, tdir, record["plant"])
            save()
    for plant, index in schedule(plants, trials):
        if (plant, index) in done:
            continue
        tdir = work / f"trial-{plant}-{index:02d}"
        record = measure(bench, proc, tdir, plant, base_first=index % 2 == 0)
        record["index"] = index
        if confirm:
            record["confirm"] = confirm_trial(bench, proc, tdir, plant)
        report["trials"].append(record)
        save()
        flags = sum(c["verdict"] == "regression" for c in record["configs"].values())
        print(
            f"trial plant={plant:.0%} #{index}: compare exit {record['compare']['exit']}, {flags} flagged of "
            f"{len(record['configs'])}, cpu {record['cpu_s']} s, "
            f"load {record['load_start'][0]}->{record['load_end'][0]}",
            flush=True,
        )
    return path
