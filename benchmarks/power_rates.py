"""Rates and their exact bounds from the nightly report of ``benchmarks/detection_power.py``.

Pure functions of the report (every trial's per-configuration verdicts) and the calibration
(each configuration's effective step change under each plant): which comparison counts as
what, and the tables docs/regression-detection.md shows. Nothing here measures.

A comparison is one configuration in one trial. In an A/A trial (no plant) every flag is a
false alarm; in a planted trial a flag on a model without a Conv2d is a false flag (its
candidate differs only by the hook's wrapper, at most 3% of a step: calibration), and an
affected configuration is scored against its calibrated effective change: a forward-only
plant of 10% is a 9.0-9.9% change of an eval step but 2-4% of a train step.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from torchgauge.stats.binomial import binomial_lower_bound, binomial_upper_bound
from torchgauge.stats.compare import compare_samples
from torchgauge.stats.corrections import holm

# Effective step change bins for scoring detections. "at least 9%" is the target's population
# ("planted 10% slowdowns"): the 10% plant on a whole eval step measures 9.0-9.9% (the step's
# own code outside the forward is not slowed), so 9% keeps them in and 7-9% out.
TARGET_CHANGE = 0.09
BINS = ((0.0, 0.07, "below the 7% threshold"), (0.07, TARGET_CHANGE, "7-9%"), (TARGET_CHANGE, 0.2, "9-20%"))
BINS += ((0.2, float("inf"), "20% or more"),)
# CPU configurations of the nightly's whole suite (both modes of ~196 models): its Holm family.
SUITE_FAMILY = 390
# What a side of a comparison keeps per process (power_nightly._processes), by procedure.
VALUE_KEYS = ("cpu_ms", "instructions")


def effective_change(cal: dict[str, Any], key: str, plant: float) -> float | None:
    """The calibrated step change of configuration ``key`` under ``plant`` (None: not calibrated)."""
    row = cal.get(key) or {}
    if plant == 0:
        return 0.0
    return (row.get("change") or {}).get(str(plant))


def outcomes(report: dict[str, Any], cal: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per comparison: its scenario, class, verdict and the per-process data behind it."""
    affected = set(report["affected"])
    rows = []
    for t in report["trials"]:
        for key, c in t["configs"].items():
            model = key.split("/")[0]
            eff = effective_change(cal, key, t["plant"])
            if t["plant"] == 0:
                cls = "A/A"
            elif model not in affected:
                cls = "unaffected"
            else:
                cls = next((name for lo, hi, name in BINS if eff is not None and lo <= eff < hi), "not calibrated")
            base = [v for v in _values(c["base"]) if v is not None]
            rows.append(
                {
                    "plant": t["plant"],
                    "trial": t["index"],
                    "key": key,
                    "class": cls,
                    "effective": eff,
                    "verdict": c["verdict"],
                    "flagged": c["verdict"] == "regression",
                    # kept by a same-session confirmation of the trial (None: not confirmed)
                    "confirmed": key in t["confirm"].get("kept", []) if "confirm" in t else None,
                    "memory_flag": c["memory_flag"],
                    "change": c["change"],
                    # the base side's median per-process value: CPU ms per step, or the count per step
                    "step_ms": statistics.median(base) if base else None,
                    "cv": statistics.stdev(base) / statistics.mean(base) if len(base) > 1 else None,
                    "undisturbed": _median(c["base"].get("undisturbed", []) + c["new"].get("undisturbed", [])),
                }
            )
    return rows


def _values(side: dict[str, Any]) -> list:
    """A side's per-process values: CPU ms per step (time procedures) or a count per step
    (the instruction-count procedure keeps ``instructions``)."""
    return next((side[k] for k in VALUE_KEYS if k in side), [])


def rejudge(report: dict[str, Any], family: int) -> dict[tuple[int, float, str], bool]:
    """Each comparison's time verdict again, as if its trial's Holm family had ``family`` tests.

    The benchmark's nights hold fewer configurations than the nightly's suite (about 390 CPU
    configurations), and Holm's first step tests the smallest p at alpha / tests: the same
    data against a larger family flags less. The other tests of the family are taken as null
    (p = 1), the most lenient assumption for the configurations judged here. Only comparisons
    tested on CPU time are re-judged (the per-process CPU values are what the report keeps).
    """
    proc = report["procedure"]
    args = dict(zip(proc["compare_args"][::2], proc["compare_args"][1::2]))
    threshold = float(args["--threshold"].rstrip("%")) / 100
    alpha = float(args["--alpha"])
    out = {}
    for t in report["trials"]:
        keys, changes = [], []
        for key, c in t["configs"].items():
            base = [v for v in c["base"].get("cpu_ms", []) if v is not None]
            new = [v for v in c["new"].get("cpu_ms", []) if v is not None]
            if c.get("signal") == "cpu" and base and new:
                keys.append(key)
                changes.append(compare_samples(base, new, threshold=threshold, alpha=alpha))
        if not keys:
            continue
        pvalues = [c.p_greater for c in changes] + [1.0] * max(0, family - len(changes))
        corrected = holm(pvalues)
        for key, change, p in zip(keys, changes, corrected):
            out[t["index"], t["plant"], key] = change.change >= threshold and p <= alpha
    return out


def _median(values: Iterable[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def rate_row(label: str, events: int, n: int, *, bound: str) -> str:
    """A Markdown row: events of n, the rate, and its one-sided 95% exact bound ("upper" or "lower")."""
    if n == 0:
        return f"| {label} | 0 | - | - | - |"
    value = binomial_upper_bound(events, n) if bound == "upper" else binomial_lower_bound(events, n)
    return f"| {label} | {n} | {events} | {events / n:.1%} | {bound} {value:.1%} |"


def print_calibration(cal: dict[str, Any], affected: set[str]) -> None:
    print(
        "\n| configuration | affected | Conv2d in module | planted calls/step | module calls/step | stock CPU ms | "
        "wrapper cost | effective change per plant (range) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    for key, r in cal.items():
        if "error" in r:
            print(f"| {key} | | | | | | | {r['error'][:80]} |")
            continue
        ch = ", ".join(
            f"{float(p):.0%}: {c:+.1%} ({r['change_range'][p][0]:+.1%}..{r['change_range'][p][1]:+.1%})"
            for p, c in r["change"].items()
        )
        print(
            f"| {key} | {r['model'] in affected} | {r['has_layers']} | {r['planted_calls_per_step']} | "
            f"{r['module_calls_per_step']} | {r['stock_cpu_ms']:.3f} | {r['wrapper_change']:+.2%} | {ch} |"
        )


def print_tables(report: dict[str, Any], cal: dict[str, Any]) -> None:
    """The scenario summary, the rates with their bounds, and the per-configuration diagnosis."""
    rows = outcomes(report, cal)
    plants = sorted({t["plant"] for t in report["trials"]})
    proc = report["procedure"]
    name = proc.get("name", "nightly procedure")  # power_ab's and power_icount's trials name theirs
    signal = {"time_ms": "time"}.get(proc.get("metric", "time_ms"), proc.get("metric"))
    print(
        f"\n{name}: rounds {proc['rounds']}, repeat {proc['repeat']}, warmup {proc['warmup']}, "
        f"{proc['size']} size, compare {' '.join(proc['compare_args'])}; {len(report['models'])} models"
    )
    print("\n| scenario | trials | trials flagged (compare exit 1 or 3) | CPU s per trial | wall s per trial | load |")
    print("|---|---:|---:|---|---|---|")
    for plant in plants:
        trials = [t for t in report["trials"] if t["plant"] == plant]
        loads = [v for t in trials for n in t["nights"].values() for v in (n["load_start"][0], n["load_end"][0])]
        cpu = [t["cpu_s"] for t in trials]
        wall = [sum(n["wall_s"] for n in t["nights"].values()) for t in trials]
        exits = sum(t["compare"]["exit"] != 0 for t in trials)
        print(
            f"| {_scenario(plant)} | {len(trials)} | {exits} | {min(cpu):.0f}-{max(cpu):.0f} (total {sum(cpu):.0f}) | "
            f"{min(wall):.0f}-{max(wall):.0f} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    print("\n| comparisons | n | flagged | rate | 95% bound |")
    print("|---|---:|---:|---:|---|")
    aa = [r for r in rows if r["class"] == "A/A"]
    label = f"A/A, all configurations: false regressions ({signal})"
    print(rate_row(label, sum(r["flagged"] for r in aa), len(aa), bound="upper"))
    improvements = sum(r["verdict"] == "improvement" for r in aa)
    print(rate_row(f"A/A: false improvements ({signal})", improvements, len(aa), bound="upper"))
    print(rate_row("A/A: memory flags", sum(r["memory_flag"] for r in aa), len(aa), bound="upper"))
    for plant in [p for p in plants if p > 0]:
        mine = [r for r in rows if r["plant"] == plant]
        ctl = [r for r in mine if r["class"] == "unaffected"]
        print(
            rate_row(
                f"{_scenario(plant)}, unaffected models: flags", sum(r["flagged"] for r in ctl), len(ctl), bound="upper"
            )
        )
        for _, _, name in BINS:
            hit = [r for r in mine if r["class"] == name]
            if hit:
                label = f"{_scenario(plant)}, affected, effective change {name}: detected"
                print(rate_row(label, sum(r["flagged"] for r in hit), len(hit), bound="lower"))
    target = [r for r in rows if r["plant"] > 0 and r["class"] in {n for lo, _, n in BINS if lo >= TARGET_CHANGE}]
    if target:
        label = f"target: planted, effective change >= {TARGET_CHANGE:.0%}: detected"
        print(rate_row(label, sum(r["flagged"] for r in target), len(target), bound="lower"))
    print_confirmed(report, rows)
    if signal == "time":  # a Holm family and per-process step times are a time test's
        print_family(report, rows, family=SUITE_FAMILY)
        print_configurations(rows, plants)


def print_confirmed(report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """The rates after ``compare --confirm`` re-measured each trial's flags with both builds, same session."""
    confirmed = [t for t in report["trials"] if "confirm" in t]
    if not confirmed:
        return
    cpu = [t["confirm"]["cpu_s"] for t in confirmed]
    exits = sum(t["confirm"]["exit"] != 0 for t in confirmed)
    print(
        f"\nafter same-session confirmation (compare --confirm, both builds, ABBA) of {len(confirmed)} trials: "
        f"{exits} would still open an issue; confirmation CPU {min(cpu):.0f}-{max(cpu):.0f} s per trial"
    )
    print("\n| comparisons | n | kept | rate | 95% bound |")
    print("|---|---:|---:|---:|---|")
    rows = [r for r in rows if r["confirmed"] is not None]
    aa = [r for r in rows if r["class"] == "A/A"]
    print(rate_row("A/A: false regressions kept", sum(r["confirmed"] for r in aa), len(aa), bound="upper"))
    ctl = [r for r in rows if r["class"] == "unaffected"]
    print(rate_row("planted, unaffected models: flags kept", sum(r["confirmed"] for r in ctl), len(ctl), bound="upper"))
    target = [r for r in rows if r["plant"] > 0 and r["class"] in {n for lo, _, n in BINS if lo >= TARGET_CHANGE}]
    label = f"target: planted, effective change >= {TARGET_CHANGE:.0%}: detected and kept"
    print(rate_row(label, sum(r["confirmed"] for r in target), len(target), bound="lower"))


def print_family(report: dict[str, Any], rows: list[dict[str, Any]], family: int) -> None:
    """The false-alarm and target rows again, judged within the nightly suite's Holm family."""
    title = f"re-judged as one of {family} Holm-corrected tests (the nightly suite's CPU configurations)"
    print_rejudged(title, rows, rejudge(report, family))


def print_rejudged(title: str, rows: list[dict[str, Any]], flags: dict[tuple[int, float, str], bool]) -> None:
    """A/A, unaffected and target rows under another verdict (``flags``), beside the nightly's own
    verdicts on the same comparisons (``flags`` may cover only some trials)."""
    rows = [r for r in rows if (r["trial"], r["plant"], r["key"]) in flags]
    if not rows:
        return
    trials = len({(r["trial"], r["plant"]) for r in rows})
    print(f"\n{title}; {trials} trials:")
    print("\n| comparisons | n | flagged (nightly's verdict) | flagged here | rate here | 95% bound |")
    print("|---|---:|---:|---:|---:|---|")
    here = lambda r: flags[r["trial"], r["plant"], r["key"]]  # noqa: E731
    target = {n for lo, _, n in BINS if lo >= TARGET_CHANGE}
    groups = (
        ("A/A: false regressions (time)", [r for r in rows if r["class"] == "A/A"], "upper"),
        ("planted, unaffected models: flags", [r for r in rows if r["class"] == "unaffected"], "upper"),
        (
            f"target: planted, effective change >= {TARGET_CHANGE:.0%}: detected",
            [r for r in rows if r["class"] in target],
            "lower",
        ),
    )
    for label, group, bound in groups:
        if group:
            cells = rate_row(label, sum(map(here, group)), len(group), bound=bound).split(" | ")
            print(" | ".join([cells[0], cells[1], str(sum(r["flagged"] for r in group)), *cells[2:]]))


def _scenario(plant: float) -> str:
    return "A/A" if plant == 0 else f"+{plant:.0%} plant"


def print_configurations(rows: list[dict[str, Any]], plants: list[float]) -> None:
    """Per configuration: step size, process spread, undisturbed fraction, flags per scenario."""
    head = " | ".join(f"{_scenario(p)}: effective / flagged / median change" for p in plants)
    print(f"\n| configuration | base step CPU ms (median) | process CV (median) | undisturbed | {head} |")
    print("|---|---:|---:|---:|" + "---|" * len(plants))
    for key in sorted({r["key"] for r in rows}):
        mine = [r for r in rows if r["key"] == key]
        cells = []
        for p in plants:
            cell = [r for r in mine if r["plant"] == p]
            eff = cell[0]["effective"] if cell else None
            change = _median(r["change"] for r in cell)
            cells.append(
                f"{'-' if eff is None else f'{eff:+.1%}'} / {sum(r['flagged'] for r in cell)} of {len(cell)} / "
                f"{'-' if change is None else f'{change:+.1%}'}"
            )
        step, cv, und = (_median(r[k] for r in mine) for k in ("step_ms", "cv", "undisturbed"))
        print(
            f"| {key} | {'-' if step is None else f'{step:.2f}'} | {'-' if cv is None else f'{cv:.0%}'} | "
            f"{'-' if und is None else f'{und:.0%}'} | " + " | ".join(cells) + " |"
        )
