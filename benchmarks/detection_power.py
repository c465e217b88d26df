"""Detection power of the regression guard on a real torch build (issue 17, items 6 and 7).

Plants slowdowns of known size into the stock torch of this interpreter with a startup hook
(``power_plant.HOOK``, a ``sitecustomize.py`` put first on ``PYTHONPATH`` of the candidate's
processes): every outermost forward of a module that contains a ``Conv2d`` costs ``1 + PLANT``
times its process CPU time, so convolutional models are slower and the others (the unaffected
controls) are not. ``--calibrate`` measures, per configuration, the change that makes to a
step (9.0-9.9% of an eval step for a 10% plant, 2-4% of a train step) and checks which models
it reaches. Then it runs procedures end to end with the CLI:

* ``nightly`` (the default; ``power_nightly``): what the nightly workflow runs, read from
  ``.github/workflows/nightly.yml``: a base night (one ``torchgauge run --mode both --rounds R
  --repeat 1 --warmup 1``) with the stock interpreter, a candidate night with the planted one,
  both imported into a history database, ``compare previous latest`` with the workflow's
  options; ``--trials`` independent pairs per plant, alternating which night runs first, every
  trial's per-configuration verdict kept in ``WORKDIR/nightly-report.json``, and the rates with
  exact 95% bounds printed (``power_rates``; ``--analyse-only`` prints them again);
* ``ab`` (``power_ab``): same-session interleaved A/B rounds as rates: ``--rounds`` k runs of
  each build, alternating, ``--repeat`` steps each, one ``compare`` on CPU time with the
  nightly's threshold, alpha and correction; ``--trials`` per plant, round-robin, every verdict
  kept in ``WORKDIR/ab-report.json``, the same tables printed;
* ``instructions`` (``power_icount``): the instruction-count gate, with a plant of a known number
  of instructions per configuration (``--calibrate`` sizes it under callgrind and records the
  change it makes); one ``run --metrics instructions`` a side, one ``compare``, as rates in
  ``WORKDIR/icount-report.json``, with the A/A margin of the counts against the 2% threshold;
* ``single+confirm`` and ``rounds``: the first, one-trial study (one ``run`` a side +
  ``compare --confirm``; ``k`` interleaved runs of ``--repeat`` steps).

    PYTHONPATH=src python benchmarks/detection_power.py --calibrate --workdir /tmp/power
    PYTHONPATH=src python benchmarks/detection_power.py --plants 0 0.10 0.25 --trials 6 5 5 --workdir /tmp/power
    PYTHONPATH=src python benchmarks/detection_power.py --procedures instructions --calibrate \
        --plants 0 0.10 0.25 --trials 10 5 5 --workdir /tmp/power-icount
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import power_icount
from power_ab import REPORT as AB_REPORT
from power_ab import ABProcedure, run_ab_trial
from power_nightly import read_workflow, run_trials
from power_plant import HOOK, PLANTED_LAYERS, calibrate
from power_rates import outcomes, print_calibration, print_rejudged, print_tables
from power_sentinel import load_sentinel, rejudge_with_sentinel
from rounds_cost import _become_subreaper, parse_procedure

# Models whose modules contain a Conv2d (affected by the plant) and models with none (controls),
# both checked by building them (``--calibrate``: planted calls per step, effective change).
AFFECTED = [
    "resnet18", "mobilenet_v2", "squeezenet1_1", "alexnet", "dcgan", "phlippe_resnet", "dqn_nature",
    "ppo_atari", "stn_classifier", "vq_vae", "pytorch_unet", "resnet50", "vgg16", "pix2pix",
]  # fmt: skip
UNAFFECTED = [
    "dlrm", "lennard_jones", "basic_gnn_gcn", "pyhpc_equation_of_state", "nvidia_deeprecommender", "basic_gnn_sage",
    "word_language_model_lstm", "word_language_model_transformer", "transe_fb15k237", "ntn_fb15k237", "prodlda",
    "nerf", "lfads_spikes", "tts_angular", "nsf_rq_coupling_power", "patchtst42_weather", "dagmm_kdd",
    "svgp_regression", "soft_actor_critic",  # an RL agent on state vectors: no Conv2d despite the name's domain
]  # fmt: skip


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Bench:
    def __init__(self, work: Path, models: list[str], repeat: int, mode: str, affected: list[str]) -> None:
        self.work, self.models, self.repeat, self.mode = work, models, repeat, mode
        self.affected = set(affected)
        self.hook_dir = work / "hook"
        self.hook_dir.mkdir(parents=True, exist_ok=True)
        (self.hook_dir / "sitecustomize.py").write_text(HOOK)

    def calibrate(self, plants: list[float], steps: int) -> dict:
        """Each configuration's effective step change under each plant (``power_plant.calibrate``)."""
        return calibrate(self.hook_dir / "sitecustomize.py", self.models, plants, steps, self.env(0))

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
        cmd = [sys.executable, "-m", "torchgauge.cli", "run", *self.models, "--size", "smoke", "--mode", self.mode]
        cmd += ["--repeat", str(self.repeat), "--output", str(out), "--quiet", "--no-db"]
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
        cmd = [sys.executable, "-m", "torchgauge.cli", "compare", *merged, "--output", str(out), "--quiet"]
        subprocess.run([*cmd, "--allow-inconclusive", *extra], capture_output=True, text=True, env=self.env(0))
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


def reanalyse(work: Path, plants: list[float], rounds: int, affected: set[str]) -> None:
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
                    f"| {plant:.0%} | {procedure} | {signal} | {len(hits & affected)} | "
                    f"{len(hits - affected)} | {sum(f.metric == 'time_ms' for f in cmp.inconclusive)} |"
                )

    # RUSAGE_CHILDREN misses the forkserver's workers (the forkserver is never reaped), so the
    # cost is given in configuration-processes: each one builds, warms up and times one
    # configuration, the same work whichever procedure runs it.
    print("\n| operator slowdown | procedure | configuration-processes measured |")
    print("|---|---|---|")
    for plant, procedure, processes in costs:
        print(f"| {plant:.0%} | {procedure} | {processes} |")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plants",
        nargs="+",
        type=float,
        default=[0.0, 0.10, 0.25],
        help="forward slowdowns to plant; 0 is the A/A scenario",
    )
    parser.add_argument(
        "--procedures",
        nargs="*",
        choices=["nightly", "ab", "instructions", "single+confirm", "rounds"],
        default=["nightly"],
        help="nightly: the workflow's two nights and compare, --trials times; ab: same-session interleaved "
        "rounds, --trials times; instructions: the instruction-count gate, --trials times (the others: the "
        "one-trial study); none with --calibrate: calibrate only",
    )
    parser.add_argument(
        "--trials",
        nargs="+",
        type=int,
        default=None,
        help="nightly trials per plant: one number for all plants, or one per --plants value "
        "(default: 10 A/A, 5 per planted slowdown)",
    )
    parser.add_argument("--models", nargs="+", default=None, help="default: the study's (instructions: quick ones)")
    parser.add_argument(
        "--affected", nargs="+", default=None, help="the --models whose modules contain a Conv2d (default: known ones)"
    )
    parser.add_argument(
        "--night",
        type=parse_procedure,
        default=None,
        help="ROUNDS:REPEAT:WARMUP of a night instead of the workflow's (to try a change to the nightly)",
    )
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="nightly: also re-judge every trial with compare --confirm (both builds, same session)",
    )
    parser.add_argument(
        "--calibrate", action="store_true", help="measure each configuration's effective change under each plant first"
    )
    parser.add_argument("--calibration-steps", type=int, default=25)
    parser.add_argument(
        "--sentinel",
        default=None,
        help="with --analyse-only: speed_monitor.py output recorded beside the trials; re-judge on CPU time / sentinel",
    )
    parser.add_argument("--rounds", type=int, default=3, help="k of the rounds and ab procedures")
    parser.add_argument("--warmup", type=int, default=3, help="--warmup of the ab procedure's runs")
    parser.add_argument(
        "--repeat", type=int, default=10, help="--repeat of the single+confirm, rounds and ab procedures"
    )
    parser.add_argument(
        "--mode", default="eval", help="--mode of the single+confirm, rounds, ab and instructions procedures"
    )
    parser.add_argument("--jobs", type=int, default=1, help="instructions: configurations counted at once (run --jobs)")
    parser.add_argument("--workdir", default="detection-power")
    parser.add_argument(
        "--analyse-only",
        action="store_true",
        help="only summarise what --workdir holds (nightly: the rates; the others: re-judge wall vs CPU time)",
    )
    args = parser.parse_args()
    if args.models is None:
        icount = args.procedures == ["instructions"]
        args.models = power_icount.AFFECTED + power_icount.UNAFFECTED if icount else AFFECTED + UNAFFECTED
    unknown = sorted(set(args.affected or []) - set(args.models))
    if unknown:
        parser.error(f"--affected {' '.join(unknown)}: not among --models; accepted: a subset of --models")
    if args.trials is None:
        args.trials = [10 if p == 0 else 5 for p in args.plants]
    if len(args.trials) not in (1, len(args.plants)) or min(args.trials) < 1:
        accepted = f"one count >= 1, or one per --plants value ({len(args.plants)})"
        parser.error(f"--trials {args.trials}: accepted: {accepted}")
    if args.affected is None:
        args.affected = [m for m in args.models if m in AFFECTED]
    if len(args.trials) == 1:
        args.trials = args.trials * len(args.plants)
    return args


def main() -> None:
    args = _parse_args()
    work = Path(args.workdir)
    cal_path, report_path = work / "calibration.json", work / "nightly-report.json"
    if args.analyse_only:
        if "nightly" in args.procedures and report_path.exists():
            cal = json.loads(cal_path.read_text()) if cal_path.exists() else {}
            report = json.loads(report_path.read_text())
            print_tables(report, cal)
            if args.sentinel:
                sentinel = load_sentinel(Path(args.sentinel))
                for variant in ("night", "process"):
                    flags = rejudge_with_sentinel(report, work, sentinel, variant)
                    title = f"re-judged on CPU time / the speed sentinel ({variant})"
                    print_rejudged(title, outcomes(report, cal), flags)
        if "ab" in args.procedures and (work / AB_REPORT).exists():
            cal = json.loads(cal_path.read_text()) if cal_path.exists() else {}
            print_tables(json.loads((work / AB_REPORT).read_text()), cal)
        if "instructions" in args.procedures and (work / power_icount.REPORT).exists():
            cal_file = work / power_icount.CALIBRATION
            cal = json.loads(cal_file.read_text()) if cal_file.exists() else {}
            power_icount.print_icount_tables(json.loads((work / power_icount.REPORT).read_text()), cal)
        if set(args.procedures) - {"nightly", "ab", "instructions"}:
            reanalyse(work, args.plants, args.rounds, set(args.affected))
        return
    bench = Bench(work, args.models, args.repeat, args.mode, args.affected)
    if args.calibrate and args.procedures != ["instructions"]:  # the time plant's; instructions: its own
        cal = bench.calibrate([p for p in args.plants if p > 0], args.calibration_steps)
        cal_path.write_text(json.dumps(cal, indent=1))
        print_calibration(cal, set(args.affected))
    if "nightly" in args.procedures:
        _become_subreaper()  # the forkserver's workers count towards each command's CPU time
        proc = read_workflow()
        if args.night:
            proc = dataclasses.replace(proc, rounds=args.night[0], repeat=args.night[1], warmup=args.night[2])
        run_trials(bench, work, args.plants, args.trials, proc, confirm=args.confirm)
        cal = json.loads(cal_path.read_text()) if cal_path.exists() else {}
        print_tables(json.loads(report_path.read_text()), cal)
    if "ab" in args.procedures:
        _become_subreaper()
        proc = ABProcedure(rounds=args.rounds, repeat=args.repeat, warmup=args.warmup, mode=args.mode)
        run_trials(bench, work, args.plants, args.trials, proc, measure=run_ab_trial, report_name=AB_REPORT)
        cal = json.loads(cal_path.read_text()) if cal_path.exists() else {}
        print_tables(json.loads((work / AB_REPORT).read_text()), cal)
    if "instructions" in args.procedures:
        power_icount.main(
            bench, work, args.plants, args.trials, args.calibrate, args.night, mode=args.mode, jobs=args.jobs
        )
    others = [p for p in args.procedures if p not in ("nightly", "ab", "instructions")]
    if others:
        one_trial_study(bench, args, others)


def one_trial_study(bench: Bench, args: argparse.Namespace, procedures: list[str]) -> None:
    """The first study's procedures, one trial each: single + confirm, and k rounds of --repeat steps."""
    work = bench.work
    affected = bench.affected
    report = []
    for plant in args.plants:
        for procedure in procedures:
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
    n_aff, n_unaff = len(affected), len(bench.models) - len(affected)
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
    reanalyse(work, args.plants, args.rounds, affected)


if __name__ == "__main__":
    main()
