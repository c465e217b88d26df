"""What benchmarks/detection_power.py's nightly procedure reads and how its report is scored.

The benchmark's numbers go into docs/regression-detection.md, so the pure parts are checked:
the procedure it reads from the nightly workflow (it must follow the workflow), which
comparison counts as a false alarm or a detection, and the rate rows with exact bounds.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings (rounds_cost)
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve the module by name
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


power_nightly = _load("power_nightly")
power_rates = _load("power_rates")


def test_the_procedure_is_read_from_the_nightly_workflow() -> None:
    proc = power_nightly.read_workflow()
    text = power_nightly.WORKFLOW.read_text()
    assert f'ROUNDS: "{proc.rounds}"' in text and f'REPEAT: "{proc.repeat}"' in text
    assert f'WARMUP: "{proc.warmup}"' in text
    assert proc.env == {"OMP_NUM_THREADS": "1"}
    assert "torchgauge compare previous latest " + " ".join(proc.compare_args) in text
    assert proc.option("--time-signal") == "auto" and proc.option("--correction") == "holm"
    assert proc.run_args()[:4] == ["--device", "cpu", "--mode", "both"]


def test_a_workflow_of_another_shape_is_refused_by_name(tmp_path: Path) -> None:
    changed = tmp_path / "nightly.yml"
    changed.write_text(power_nightly.WORKFLOW.read_text().replace("ROUNDS:", "NIGHT_ROUNDS:"))
    with pytest.raises(SystemExit, match=r"cannot find variables \['ROUNDS'\]"):
        power_nightly.read_workflow(changed)


def test_trials_are_interleaved_over_the_scenarios() -> None:
    assert power_nightly.schedule([0.0, 0.1, 0.25], [3, 2, 1]) == [
        (0.0, 0),
        (0.1, 0),
        (0.25, 0),
        (0.0, 1),
        (0.1, 1),
        (0.0, 2),
    ]


def _config(verdict: str, memory: bool = False) -> dict:
    side = {"cpu_ms": [1.0, 1.1, 0.9], "wall_ms": [1.0, 1.2, 1.0], "undisturbed": [1.0, 0.0, 1.0], "oversubscribed": 0}
    return {"verdict": verdict, "change": 0.1, "p_value": 0.001, "memory_flag": memory, "base": side, "new": side}


REPORT = {
    "affected": ["convnet"],
    "trials": [
        {
            "plant": 0.0,
            "index": 0,
            "configs": {"convnet/eval": _config("regression"), "mlp/eval": _config("unchanged")},
        },
        {
            "plant": 0.1,
            "index": 0,
            "confirm": {"kept": ["convnet/eval"], "dismissed": ["mlp/eval"]},
            "configs": {
                "convnet/eval": _config("regression"),
                "convnet/train": _config("unchanged"),
                "mlp/eval": _config("regression", memory=True),
            },
        },
    ],
}
CAL = {"convnet/eval": {"change": {"0.1": 0.097}}, "convnet/train": {"change": {"0.1": 0.03}}, "mlp/eval": {}}


def test_each_comparison_is_scored_against_its_scenario_and_effective_change() -> None:
    rows = {(r["plant"], r["key"]): r for r in power_rates.outcomes(REPORT, CAL)}
    assert rows[0.0, "convnet/eval"]["class"] == "A/A"  # a flag here is a false alarm, affected or not
    assert rows[0.0, "convnet/eval"]["flagged"]
    assert rows[0.1, "mlp/eval"]["class"] == "unaffected"  # a flag on a control is a false flag
    assert rows[0.1, "mlp/eval"]["memory_flag"]
    assert rows[0.1, "convnet/eval"]["class"] == "9-20%"  # in the target's population (>= 9%)
    assert rows[0.1, "convnet/train"]["class"] == "below the 7% threshold"  # a forward-only plant on a train step
    assert rows[0.1, "convnet/eval"]["confirmed"] and rows[0.1, "mlp/eval"]["confirmed"] is False
    assert rows[0.0, "convnet/eval"]["confirmed"] is None  # that trial was not confirmed
    assert rows[0.1, "convnet/eval"]["step_ms"] == 1.0
    assert rows[0.1, "convnet/eval"]["undisturbed"] == 1.0


def test_an_uncalibrated_affected_configuration_is_not_scored_as_a_detection_target() -> None:
    rows = power_rates.outcomes(REPORT, {})
    assert {r["class"] for r in rows if r["plant"] == 0.1 and r["key"].startswith("convnet")} == {"not calibrated"}


def test_rate_rows_carry_the_exact_bound() -> None:
    assert power_rates.rate_row("A/A", 0, 300, bound="upper") == "| A/A | 300 | 0 | 0.0% | upper 1.0% |"
    assert power_rates.rate_row("hit", 30, 30, bound="lower") == "| hit | 30 | 30 | 100.0% | lower 90.5% |"
    assert power_rates.rate_row("none", 0, 0, bound="upper") == "| none | 0 | - | - | - |"


power_ab = _load("power_ab")


def test_the_ab_procedure_judges_with_the_nightlys_options_on_cpu_time() -> None:
    nightly, ab = power_nightly.read_workflow(), power_ab.ABProcedure(rounds=8, repeat=10, warmup=3)
    for name in ("--threshold", "--alpha", "--correction"):
        assert ab.option(name) == nightly.option(name)
    assert ab.option("--time-signal") == "cpu" and ab.env == nightly.env
    args = ab.run_args()
    assert args[args.index("--rounds") + 1] == "1" and args[args.index("--threads") + 1] == "1"
    assert args[args.index("--mode") + 1] == "eval" and args[args.index("--size") + 1] == "smoke"


class _FakeBench:
    models = ["resnet18", "dlrm"]

    def env(self, plant: float) -> dict[str, str]:
        return {"PLANT": str(plant)}


def test_an_ab_trial_alternates_the_builds_and_compares_every_run_of_each_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    calls = []

    def fake_cli(args: list[str], env: dict[str, str]) -> dict:
        calls.append((args[0], env["PLANT"], env["OMP_NUM_THREADS"]))
        if args[0] == "run":
            out = Path(args[args.index("--output") + 1])
            out.write_text(json.dumps({"env": {}, "runs": [{"model": "resnet18", "tag": out.stem}]}))
        return {"exit": 0, "wall_s": 1.0, "cpu_s": 1.0, "load_start": [0.0], "load_end": [0.0]}

    monkeypatch.setattr(power_ab, "cli", fake_cli)
    proc = power_ab.ABProcedure(rounds=3, repeat=10, warmup=3)
    record = power_ab.run_ab_trial(_FakeBench(), proc, tmp_path, 0.1, base_first=False)
    runs = [(c[0], c[1]) for c in calls]
    # candidate first in round 0 (base_first=False), then the order alternates; one compare at the end
    assert runs == [("run", "0.1"), ("run", "0.0"), ("run", "0.0"), ("run", "0.1"), ("run", "0.1")] + [
        ("run", "0.0"),
        ("compare", "0.0"),
    ]
    assert all(c[2] == "1" for c in calls)  # one intra-op thread, as the nightly's CPU shards
    assert list(record["nights"]) == [
        f"{s}-{k}"
        for k, pair in enumerate([("candidate", "base"), ("base", "candidate"), ("candidate", "base")])
        for s in pair
    ]
    merged = json.loads((tmp_path / "base.json").read_text())
    assert [r["tag"] for r in merged["runs"]] == ["base-0", "base-1", "base-2"]
    assert record["wall_s"] == 7.0 and record["configs"] == {}  # no compare output: no verdicts
