"""Detection power of the regression guard on a real torch build (issue 17, items 6 and 7).

Plants slowdowns of known size into the stock torch of this interpreter with a startup hook
(a generated ``sitecustomize.py`` put first on ``PYTHONPATH`` of the candidate's processes):
the outermost forward call of every module that contains a planted layer type (default
``Conv2d``) is timed and followed by a busy loop of ``PLANT`` times its own duration, so the
eval step of a convolutional model is that much slower and the other models (the
unaffected controls) not at all. (A first version slowed ``F.conv2d`` calls alone: at smoke
size convolutions are about half of a step, so a planted 25% became a 5-12% model change.) Then it runs the documented
procedures end to end with the CLI:

* ``single+confirm``: one base ``torchgauge run``, one candidate run, ``torchgauge compare``,
  then ``compare --confirm`` (fresh processes per side, candidate interpreter = the hooked one);
* ``rounds``: ``k`` base and ``k`` candidate runs interleaved (each configuration in ``k``
  fresh processes spread over the suite, asv's rounds), one ``compare`` on process medians.

For each scenario (A/A: no plant; +10%; +25%) it reports false alarms on unaffected models,
detections on affected models, and the CPU time (children's user + system) each procedure
cost.

    PYTHONPATH=src python benchmarks/detection_power.py --rounds 3 --workdir /tmp/power
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# Convolutional models call conv2d (affected); the rest never do (controls).
AFFECTED = ["resnet18", "mobilenet_v2", "squeezenet1_1", "alexnet", "dcgan"]
UNAFFECTED = ["dlrm", "lennard_jones", "basic_gnn_gcn", "pyhpc_equation_of_state", "nvidia_deeprecommender"]
PLANTED_LAYERS = ["Conv2d"]

_HOOK = '''
"""Planted slowdown (benchmarks/detection_power.py): every outermost forward call of a module
that contains one of the planted layer types is followed by a busy loop of PLANT times its own
duration, so those models' eval steps are PLANT slower and the other models not at all."""
import os, threading, time
_plant = float(os.environ.get("TORCHGAUGE_PLANT", "0"))
if _plant > 0:
    import torch

    _types = tuple(getattr(torch.nn, n) for n in os.environ.get("TORCHGAUGE_PLANT_LAYERS", "Conv2d").split(","))
    _state = threading.local()
    _uses = {}
    _call = torch.nn.Module.__call__

    def _planted_call(self, *args, **kwargs):
        if getattr(_state, "depth", 0):
            return _call(self, *args, **kwargs)
        key = id(self)
        if key not in _uses:
            _uses[key] = any(isinstance(m, _types) for m in self.modules())
        _state.depth = 1
        try:
            t0 = time.perf_counter()
            out = _call(self, *args, **kwargs)
            if _uses[key]:
                end = time.perf_counter() + _plant * (time.perf_counter() - t0)
                while time.perf_counter() < end:
                    pass
            return out
        finally:
            _state.depth = 0

    torch.nn.Module.__call__ = _planted_call
'''


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Bench:
    def __init__(self, work: Path, models: list[str], repeat: int, mode: str) -> None:
        self.work, self.models, self.repeat, self.mode = work, models, repeat, mode
        self.hook_dir = work / "hook"
        self.hook_dir.mkdir(parents=True, exist_ok=True)
        (self.hook_dir / "sitecustomize.py").write_text(textwrap.dedent(_HOOK))

    def env(self, plant: float) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("TORCHGAUGE_DB", None)
        if plant:
            env["PYTHONPATH"] = os.pathsep.join([str(self.hook_dir), env.get("PYTHONPATH", "")])
            env["TORCHGAUGE_PLANT"] = str(plant)
            env["TORCHGAUGE_PLANT_LAYERS"] = ",".join(PLANTED_LAYERS)
        return env

    def interpreter(self, plant: float) -> str:
        """An executable that starts this Python with the plant (for compare --confirm)."""
        if not plant:
            return sys.executable
        path = self.work / f"python-plant-{plant}"
        env = self.env(plant)
        path.write_text(
            "#!/bin/sh\n" + f'export PYTHONPATH="{env["PYTHONPATH"]}" TORCHGAUGE_PLANT={plant} '
            f'TORCHGAUGE_PLANT_LAYERS={env["TORCHGAUGE_PLANT_LAYERS"]}\nexec "{sys.executable}" "$@"\n'
        )
        path.chmod(0o755)
        return str(path)

    def run(self, out: Path, plant: float) -> Path:
        cmd = [
            sys.executable,
            "-m",
            "torchgauge.cli",
            "run",
            *self.models,
            "--size",
            "smoke",
            "--mode",
            self.mode,
            "--repeat",
            str(self.repeat),
            "--output",
            str(out),
            "--quiet",
            "--no-db",
        ]
        subprocess.run(cmd, env=self.env(plant), capture_output=True, text=True)
        return out

    def compare(self, base: list[Path], new: list[Path], out: Path, *extra: str) -> dict:
        merged = []
        for side, paths in (("base", base), ("new", new)):
            target = out.with_name(f"{out.stem}-{side}.json")
            docs = [json.loads(p.read_text()) for p in paths]
            docs[0]["runs"] = [r for d in docs for r in d["runs"]]
            target.write_text(json.dumps(docs[0]))
            merged.append(str(target))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "torchgauge.cli",
                "compare",
                *merged,
                "--output",
                str(out),
                "--quiet",
                "--allow-inconclusive",
                *extra,
            ],
            capture_output=True,
            text=True,
            env=self.env(0),
        )
        return json.loads(out.read_text())


def _score(doc: dict, affected: set[str]) -> dict:
    flagged = {(f["model"], f["mode"]) for f in doc["regressions"] if f["metric"] == "time_ms"}
    return {
        "flagged_affected": sorted(m for m in flagged if m[0] in affected),
        "flagged_unaffected": sorted(m for m in flagged if m[0] not in affected),
        "changes": {f"{f['model']}/{f['mode']}": f["change"] for f in doc["regressions"] + doc["improvements"]},
    }


def _load(paths: list[Path], signal: str):
    """One ResultsFile of all ``paths``' runs; ``signal="cpu"`` tests per-step process CPU time."""
    from torchgauge.results.schema import ResultsFile, load_results

    parts = [load_results(p) for p in paths]
    runs = [r for part in parts for r in part.runs]
    if signal == "cpu":
        for r in runs:
            t = r.metrics.get("time_ms") or {}
            if t.get("cpu_samples"):
                r.metrics["time_ms"] = {**t, "samples": t["cpu_samples"]}
    return ResultsFile(env=parts[0].env, runs=runs)


def reanalyse(work: Path, plants: list[float], rounds: int) -> None:
    """Judge the stored runs again with wall time and with process CPU time (no new measurements)."""
    from torchgauge.compare.regression import compare_results

    print("\n| operator slowdown | procedure | signal | affected flagged | unaffected flagged | inconclusive |")
    print("|---|---|---|---|---|---|")
    costs = []
    for plant in plants:
        sides = {
            "single (first pass)": (
                [work / f"single-confirm-{plant}-base.json"],
                [work / f"single-confirm-{plant}-new.json"],
            ),
            f"rounds k={rounds}": (
                [work / f"rounds-{plant}-base-{k}.json" for k in range(rounds)],
                [work / f"rounds-{plant}-new-{k}.json" for k in range(rounds)],
            ),
        }
        for procedure, (base, new) in sides.items():
            if not all(p.exists() for p in base + new):
                continue
            processes = len(_load(base, "wall").runs) + len(_load(new, "wall").runs)
            confirmed = work / f"single-confirm-{plant}-compare.json"
            if procedure.startswith("single") and confirmed.exists():
                doc = json.loads(confirmed.read_text())
                flagged = len({(f["model"], f["mode"]) for f in doc["regressions"] + doc["dismissed"]})
                costs.append((plant, "single+confirm", processes + 2 * doc["confirm_rounds"] * flagged))
            else:
                costs.append((plant, procedure, processes))
            for signal in ("wall", "cpu"):
                # _load puts the signal's series in "samples": test exactly that (compare's default is auto)
                cmp = compare_results(_load(base, signal), _load(new, signal), time_signal="wall")
                hits = {f.config.model for f in cmp.regressions if f.metric == "time_ms"}
                print(
                    f"| {plant:.0%} | {procedure} | {signal} | {len(hits & set(AFFECTED))} | "
                    f"{len(hits - set(AFFECTED))} | {sum(f.metric == 'time_ms' for f in cmp.inconclusive)} |"
                )

    # RUSAGE_CHILDREN misses the forkserver's workers (the forkserver is never reaped), so the
    # cost is given in configuration-processes: each one builds, warms up and times one
    # configuration, the same work whichever procedure runs it.
    print("\n| operator slowdown | procedure | configuration-processes measured |")
    print("|---|---|---|")
    for plant, procedure, processes in costs:
        print(f"| {plant:.0%} | {procedure} | {processes} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plants",
        nargs="+",
        type=float,
        default=[0.0, 0.10, 0.25],
        help="operator slowdowns to plant; 0 is the A/A scenario",
    )
    parser.add_argument("--rounds", type=int, default=3, help="k of the rounds procedure")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--mode", default="eval")
    parser.add_argument("--workdir", default="detection-power")
    parser.add_argument("--procedures", nargs="+", default=["single+confirm", "rounds"])
    parser.add_argument(
        "--analyse-only",
        action="store_true",
        help="only re-judge the runs already in --workdir with wall time and with CPU time",
    )
    args = parser.parse_args()
    work = Path(args.workdir)
    if args.analyse_only:
        reanalyse(work, args.plants, args.rounds)
        return
    bench = Bench(work, AFFECTED + UNAFFECTED, args.repeat, args.mode)
    affected = set(AFFECTED)
    report = []
    for plant in args.plants:
        for procedure in args.procedures:
            load0, cpu0, t0 = os.getloadavg()[0], _children_cpu_s(), time.time()
            tag = f"{procedure.replace('+', '-')}-{plant}"
            if procedure == "rounds":
                base, new = [], []
                for k in range(args.rounds):  # interleaved, alternating which side goes first
                    order = [("base", 0.0), ("new", plant)] if k % 2 == 0 else [("new", plant), ("base", 0.0)]
                    for side, p in order:
                        (base if side == "base" else new).append(bench.run(work / f"{tag}-{side}-{k}.json", p))
                doc = bench.compare(base, new, work / f"{tag}-compare.json")
                first = None
            else:
                base = bench.run(work / f"{tag}-base.json", 0.0)
                new = bench.run(work / f"{tag}-new.json", plant)
                first = _score(bench.compare([base], [new], work / f"{tag}-first.json"), affected)
                doc = bench.compare(
                    [base],
                    [new],
                    work / f"{tag}-compare.json",
                    "--confirm",
                    "--candidate-python",
                    bench.interpreter(plant),
                )
            score = _score(doc, affected)
            row = {
                "plant": plant,
                "procedure": procedure,
                "first_pass": first,
                **score,
                "cpu_s": round(_children_cpu_s() - cpu0, 1),
                "wall_s": round(time.time() - t0, 1),
                "load_start": round(load0, 1),
                "load_end": round(os.getloadavg()[0], 1),
                "inconclusive": len(doc.get("inconclusive", [])),
            }
            report.append(row)
            print(json.dumps(row), flush=True)
    (work / "report.json").write_text(json.dumps(report, indent=1))
    n_aff, n_unaff = len(AFFECTED), len(UNAFFECTED)
    print(
        f"\n| operator slowdown | procedure | affected flagged (of {n_aff}) | unaffected flagged (of {n_unaff}) | "
        "CPU s | load |"
    )
    print("|---|---|---|---|---|---|")
    for r in report:
        print(
            f"| {r['plant']:.0%} | {r['procedure']} | {len(r['flagged_affected'])} | {len(r['flagged_unaffected'])} | "
            f"{r['cpu_s']:.0f} | {r['load_start']}-{r['load_end']} |"
        )
    reanalyse(work, args.plants, args.rounds)


if __name__ == "__main__":
    main()
