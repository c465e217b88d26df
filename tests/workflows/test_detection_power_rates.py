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
