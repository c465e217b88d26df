"""The instruction-count gate of ``benchmarks/detection_power.py`` as rates (issue 17, item 6).

Time signals fail the targets on a shared CPU runner (docs/regression-detection.md); the issue
names deterministic counts as the gate there. This procedure measures what the ``instructions``
metric (valgrind callgrind, counted steps only, judged by ``compare``'s exact rule at its own 2%
threshold) detects, with a plant of a known number of instructions (``power_plant.HOOK`` with
``TORCHGAUGE_PLANT_KIND=work``: a pure-Python loop after every outermost forward of a module
containing a ``Conv2d``, no torch operation, sized per configuration).

Calibration (``--calibrate``; every step resumes from its file in ``WORKDIR/icount-calibration``):

1. a survey in one stock process (no valgrind): each configuration's planted module keys and
   planted calls per step (``power_plant.survey_work_plant``); keys shared by two configurations
   are named (they would get one size);
2. ``stock``: one ``torchgauge run --metrics instructions`` of every configuration, stock;
3. ``zero``: the same with the hook and loops of 0 iterations: what the hook alone adds (the
   planting subclass's call of every nested module with a Conv2d: 1% of resnet18's eval step),
   and for the unaffected models nothing beyond the counts' process-to-process wobble;
4. ``unit``: loops of U iterations per planted call, U sized to add about ``UNIT_CHANGE`` of the
   stock step: the slope (instructions per step per iteration) is ``(unit - zero) / U``, measured;
5. ``plant-P`` for each plant: the loop sized to ``((1 + P) * stock - zero) / slope``; the change
   callgrind then measures (not the nominal P) is each configuration's ``change[P]``, the
   effective change ``power_rates`` scores against; its difference from the prediction of the
   line through ``zero`` and ``unit`` checks linearity.

A trial: a base ``torchgauge run MODELS --mode both --metrics instructions`` (stock), a
candidate run (planted with the calibrated sizes, or stock again for A/A), one ``compare BASE
CANDIDATE`` with the nightly's options (read from the workflow). Every configuration's verdict
and each side's instruction count are kept in ``WORKDIR/icount-report.json`` in the nightly
report's shape (``power_nightly.run_trials`` schedules and resumes it).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from power_nightly import NightlyProcedure, cli, read_workflow, run_trials, trial_header, trial_start, verdicts
from power_plant import PLANTED_LAYERS, survey_work_plant
from power_rates import print_tables
from rounds_cost import _become_subreaper

REPORT = "icount-report.json"
CALIBRATION = "icount-calibration.json"
METRIC = "instructions"
# Models whose smoke build and step are quick under callgrind (step CPU ms from the time plant's
# calibration: 0.2-35 ms eval, <= 115 ms train), with a Conv2d (affected) and without (controls).
AFFECTED = ["resnet18", "squeezenet1_1", "alexnet", "dcgan", "dqn_nature", "stn_classifier", "vq_vae"]
UNAFFECTED = [
    "dlrm", "lennard_jones", "basic_gnn_gcn", "pyhpc_equation_of_state", "word_language_model_lstm", "prodlda",
    "patchtst42_weather",
]  # fmt: skip
# The unit loop adds about this fraction of the stock step: far above the counts' process-to-process
# wobble (0.1-0.35% measured with and without the hook), so the slope is measured to ~1-2% of itself.
UNIT_CHANGE = 0.25
# Instructions per loop iteration assumed only to size the unit loop (measured 196-212 on CPython
# 3.11 under callgrind, 2026-11-28); the slope is then measured per configuration.
ITERATION_GUESS = 200


@dataclass(frozen=True)
class IcountProcedure:
    """One ``run --metrics instructions`` a side (``repeat``/``warmup`` as the nightly's night) and
    ``compare`` with the nightly's options; the instructions quantity is judged by its exact rule."""

    repeat: int
    warmup: int
    rounds: int = 1  # deterministic metrics are collected once per configuration (the first round)
    mode: str = "both"
    jobs: int = 1  # counts do not depend on load: configurations may be counted side by side
    env: dict[str, str] = field(default_factory=lambda: {"OMP_NUM_THREADS": "1"})
    compare_args: tuple[str, ...] = ()
    metric: str = METRIC
    name: str = "instruction-count gate (one run --metrics instructions a side)"

    def option(self, name: str) -> str:
        args = list(self.compare_args)
        return args[args.index(name) + 1]

    def run_args(self) -> list[str]:
        return ["--device", "cpu", "--mode", self.mode, "--rounds", str(self.rounds), "--repeat", str(self.repeat)] + [
            "--warmup",
            str(self.warmup),
            "--jobs",
            str(self.jobs),
            "--threads",
            "1",
            "--metrics",
            METRIC,
            "--size",
            "smoke",
        ]


def from_nightly(nightly: NightlyProcedure) -> IcountProcedure:
    """The nightly's night settings (repeat, warmup, environment) and compare options, one round."""
    return IcountProcedure(
        repeat=nightly.repeat, warmup=nightly.warmup, env=dict(nightly.env), compare_args=nightly.compare_args
    )


# -- sizing: pure arithmetic ------------------------------------------------------------------------


def unit_iterations(
    stock: float, calls: float, change: float = UNIT_CHANGE, per_iteration: int = ITERATION_GUESS
) -> int:
    """Loop iterations per planted call that add about ``change`` of a ``stock`` step with ``calls``
    planted calls per step, at a guessed ``per_iteration`` cost (at least 1000)."""
    if calls <= 0:
        raise ValueError(f"a configuration without planted calls has no unit loop (calls {calls})")
    return max(1000, round(change * stock / (per_iteration * calls)))


def slope(stock: float, unit_count: float, unit: int) -> float:
    """Instructions per step that one more loop iteration per planted call adds, from two counts."""
    if unit <= 0 or unit_count <= stock:
        raise ValueError(f"the unit loop ({unit} iterations) did not add instructions: {stock} -> {unit_count}")
    return (unit_count - stock) / unit


def plant_iterations(stock: float, per_iteration: float, plant: float, zero: float | None = None) -> int:
    """Loop iterations per planted call for a step of ``1 + plant`` times ``stock`` instructions, from
    the step's count with the hook and no loop (``zero``; default ``stock``: a hook that costs nothing)."""
    zero = stock if zero is None else zero
    return max(0, round(((1 + plant) * stock - zero) / per_iteration))


def relative_change(base: float, new: float) -> float:
    return (new - base) / base


def key_collisions(survey: dict[str, dict]) -> dict[str, list[str]]:
    """Planted module keys that two or more configurations share (they would get one loop size)."""
    owners: dict[str, list[str]] = {}
    for config, row in survey.items():
        for key in row.get("keys", {}):
            owners.setdefault(key, []).append(config)
    return {k: v for k, v in owners.items() if len(v) > 1}


def work_map(rows: dict[str, dict], sizes: dict[str, int]) -> dict[str, int]:
    """``TORCHGAUGE_PLANT_WORK``: each planted key of a configuration in ``sizes`` -> its iterations
    (a key two configurations share keeps the first one's size: :func:`key_collisions` names them)."""
    out: dict[str, int] = {}
    for config, n in sizes.items():
        for key in rows[config].get("keys", {}):
            out.setdefault(key, n)
    return out


def counts(path: Path) -> dict[str, int]:
    """``model/mode`` -> instructions per step of each ok record of a run file."""
    doc = json.loads(path.read_text())
    return {
        f"{r['model']}/{r['mode']}": r["metrics"][METRIC]["per_step"]
        for r in doc["runs"]
        if r["status"] == "ok" and (r["metrics"].get(METRIC) or {}).get("per_step")
    }


# -- measuring --------------------------------------------------------------------------------------


def plant_env(bench: Any, work: dict[str, int] | None) -> dict[str, str]:
    """The environment of a side: stock (``work`` None) or the work plant with these loop sizes."""
    env = bench.env(0.0)
    if work is not None:
        env["PYTHONPATH"] = ":".join([str(bench.hook_dir), env.get("PYTHONPATH", "")])
        env.update(TORCHGAUGE_PLANT_KIND="work", TORCHGAUGE_PLANT_WORK=json.dumps(work))
        env["TORCHGAUGE_PLANT_LAYERS"] = ",".join(PLANTED_LAYERS)
    return env


def run_side(bench: Any, proc: IcountProcedure, out: Path, work: dict[str, int] | None) -> dict[str, Any]:
    """One ``torchgauge run MODELS ... --metrics instructions`` (exit 1 only means a model failed)."""
    out.unlink(missing_ok=True)
    args = ["run", *bench.models, *proc.run_args(), "--output", str(out), "--quiet", "--no-db"]
    return {"planted": work is not None, **cli(args, {**plant_env(bench, work), **proc.env})}


def calibrate(bench: Any, proc: IcountProcedure, work: Path, plants: list[float]) -> dict[str, dict]:
    """Each configuration's loop sizes and the change callgrind measured with them (module docstring)."""
    cdir = work / "icount-calibration"
    cdir.mkdir(parents=True, exist_ok=True)
    survey_file = cdir / "survey.json"
    if not survey_file.exists():
        survey = survey_work_plant(bench.hook_dir / "sitecustomize.py", bench.models, bench.env(0.0))
        survey_file.write_text(json.dumps(survey, indent=1))
    rows = json.loads(survey_file.read_text())
    for key, configs in key_collisions(rows).items():
        print(f"warning: planted module key {key} is shared by {', '.join(configs)}: they get one loop size")
    previous = work / CALIBRATION
    costs: dict[str, Any] = json.loads(previous.read_text()).get("_runs", {}) if previous.exists() else {}

    def measured(name: str, sizes: dict[str, int] | None) -> dict[str, int]:
        """Counts of one run with these loop iterations per configuration (None: stock, no hook); its
        file is reused only if it was measured with the same sizes."""
        path, used = cdir / f"{name}.json", cdir / f"{name}.sizes.json"
        if not path.exists() or not used.exists() or json.loads(used.read_text()) != sizes:
            costs[name] = run_side(bench, proc, path, None if sizes is None else work_map(rows, sizes))
            used.write_text(json.dumps(sizes))
        return counts(path)

    stock = measured("stock", None)
    planted = [c for c, r in rows.items() if r.get("keys") and c in stock]
    zero = measured("zero", {c: 0 for c in planted})  # the hook without a loop: the intercept
    units = {c: unit_iterations(stock[c], sum(rows[c]["keys"].values())) for c in planted}
    unit = measured("unit", units)
    for c, row in rows.items():
        row.update(stock=stock.get(c), zero=zero.get(c), unit_iterations=units.get(c), unit_count=unit.get(c))
        row["planted_calls_per_step"] = sum(row.get("keys", {}).values())
        if c in zero and stock.get(c):  # what the hook alone does: its wrapper (affected) or nothing
            row["hook_change"] = round(relative_change(stock[c], zero[c]), 5)
        if c in units and c in unit and c in zero:
            row["slope"] = round(slope(zero[c], unit[c], units[c]), 2)
        row.update(iterations={}, count={}, change={}, predicted={})
    for plant in plants:
        sized = [c for c in planted if "slope" in rows[c]]
        sizes = {c: plant_iterations(stock[c], rows[c]["slope"], plant, zero=zero[c]) for c in sized}
        got = measured(f"plant-{plant}", sizes)
        for c, row in rows.items():
            if c in got and stock.get(c):
                row["count"][str(plant)] = got[c]
                row["change"][str(plant)] = round(relative_change(stock[c], got[c]), 5)
            if c in sizes:
                row["iterations"][str(plant)] = sizes[c]
                predicted = relative_change(stock[c], zero[c] + sizes[c] * row["slope"])
                row["predicted"][str(plant)] = round(predicted, 5)
    doc = {**rows, "_runs": costs}
    previous.write_text(json.dumps(doc, indent=1))
    return doc


def plant_sizes(cal: dict[str, dict], plant: float) -> dict[str, int]:
    """The candidate's ``TORCHGAUGE_PLANT_WORK`` for ``plant``, from the calibration."""
    sizes = {c: r["iterations"][str(plant)] for c, r in cal.items() if str(plant) in (r.get("iterations") or {})}
    if not sizes:
        raise SystemExit(f"no calibrated loop size for plant {plant}: run with --calibrate --plants ... {plant}")
    return work_map(cal, sizes)


def _calibrated_sizes(cal: dict[str, dict], plant: float) -> dict[str, int] | None:
    try:
        return plant_sizes(cal, plant)
    except SystemExit:
        return None


def run_icount_trial(
    bench: Any, proc: IcountProcedure, tdir: Path, plant: float, base_first: bool, *, cal: dict[str, dict]
) -> dict[str, Any]:
    """A stock base run, a candidate run (planted, or stock for A/A) and one compare; the trial's record."""
    tdir.mkdir(parents=True, exist_ok=True)
    files = {"base": tdir / "base.json", "candidate": tdir / "candidate.json"}
    sizes = plant_sizes(cal, plant) if plant else None
    started = trial_start()
    runs = {}
    for side in ("base", "candidate") if base_first else ("candidate", "base"):
        runs[side] = run_side(bench, proc, files[side], sizes if side == "candidate" else None)
    out = tdir / "compare.json"
    out.unlink(missing_ok=True)
    compare = cli(
        ["compare", str(files["base"]), str(files["candidate"]), *proc.compare_args, "--output", str(out), "--quiet"],
        {**bench.env(0.0), **proc.env},
    )
    record = {**trial_header(started, plant, base_first), "nights": runs, "work": sizes, "compare": compare}
    record["configs"] = {}
    if out.exists() and all(f.exists() for f in files.values()):
        record["configs"], record["cli_agrees"] = verdicts(files["base"], files["candidate"], out, proc, metric=METRIC)
    return record


def main(
    bench: Any,
    work: Path,
    plants: list[float],
    trials: list[int],
    calibrate_first: bool,
    night: tuple | None,
    *,
    mode: str = "both",
    jobs: int = 1,
) -> None:
    """``detection_power.py --procedures instructions``: calibrate (``--calibrate``), the trials, the tables.
    ``night`` (ROUNDS:REPEAT:WARMUP, rounds ignored) replaces the workflow's repeat and warm-up."""
    _become_subreaper()  # the workers and their valgrind children count towards each command's CPU time
    proc = dataclasses.replace(from_nightly(read_workflow()), mode=mode, jobs=jobs)
    if night:
        proc = dataclasses.replace(proc, repeat=night[1], warmup=night[2])
    if calibrate_first:
        print_calibration(calibrate(bench, proc, work, [p for p in plants if p > 0]))
    cal_path = work / CALIBRATION
    cal = json.loads(cal_path.read_text()) if cal_path.exists() else {}
    run_trials(
        bench, work, plants, trials, proc, measure=functools.partial(run_icount_trial, cal=cal), report_name=REPORT
    )
    print_icount_tables(json.loads((work / REPORT).read_text()), cal)


# -- reporting --------------------------------------------------------------------------------------


def aa_margins(report: dict[str, Any]) -> dict[str, list[float]]:
    """Per configuration, |relative difference| of the two sides' instruction counts in every A/A trial."""
    out: dict[str, list[float]] = {}
    for t in report["trials"]:
        if t["plant"] != 0:
            continue
        for key, c in t["configs"].items():
            base, new = c["base"].get(METRIC) or [], c["new"].get(METRIC) or []
            if base and new and None not in base + new:
                out.setdefault(key, []).append(abs(relative_change(statistics.median(base), statistics.median(new))))
    return out


def print_icount_tables(report: dict[str, Any], cal: dict[str, dict]) -> None:
    """power_rates' tables, then the A/A margin against the threshold and the calibration."""
    threshold = _threshold()
    for t in report["trials"]:  # scored against the calibration: only if the trial used its sizes
        if t["plant"] and t.get("work") != _calibrated_sizes(cal, t["plant"]):
            print(f"warning: trial plant={t['plant']} #{t['index']} ran other loop sizes than the calibration's")
    print_tables(report, {k: r for k, r in cal.items() if not k.startswith("_")})
    margins = aa_margins(report)
    if margins:
        every = [v for vs in margins.values() for v in vs]
        margin = f"max is {threshold / max(every):.0f}x below it" if max(every) else "every pair of counts equal"
        print(
            f"\nA/A |relative difference| of instruction counts: {len(every)} comparisons, max {max(every):.4%}, "
            f"median {statistics.median(every):.4%} (threshold {threshold:.0%}: {margin})"
        )
        print("\n| configuration | A/A trials | max |rel. diff| | median |")
        print("|---|---:|---:|---:|")
        for key in sorted(margins):
            vs = margins[key]
            print(f"| {key} | {len(vs)} | {max(vs):.4%} | {statistics.median(vs):.4%} |")
    print_calibration(cal)


def print_calibration(cal: dict[str, dict]) -> None:
    rows = {k: r for k, r in cal.items() if not k.startswith("_")}
    if not rows:
        return
    print(
        "\n| configuration | planted module (calls/step) | stock instr/step | hook, no loop | "
        "instr/step per loop iteration | per plant: loop iterations per call, change measured (predicted) |"
    )
    print("|---|---|---:|---:|---:|---|")
    for key, r in rows.items():
        if "error" in r:
            print(f"| {key} | {r['error'][:80]} | | | | |")
            continue
        keys = ", ".join(f"{k} ({n})" for k, n in r.get("keys", {}).items()) or "none"
        plants = ", ".join(
            f"{float(p):.0%}: {r.get('iterations', {}).get(p, 0)} it, measured {c:+.2%}"
            + (f" (predicted {r['predicted'][p]:+.2%})" if p in r.get("predicted", {}) else "")
            for p, c in r.get("change", {}).items()
        )
        stock = f"{r['stock']:,}" if r.get("stock") else "-"
        hook = f"{r['hook_change']:+.2%}" if "hook_change" in r else "-"
        print(f"| {key} | {keys} | {stock} | {hook} | {r.get('slope', '-')} | {plants} |")


def _threshold() -> float:
    from torchgauge.stats.deterministic import INSTRUCTIONS_THRESHOLD

    return INSTRUCTIONS_THRESHOLD
