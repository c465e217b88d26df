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


# -- the instruction-count procedure (power_icount) and its work plant --------------------------------

power_icount = _load("power_icount")
power_plant = _load("power_plant")


def test_the_plant_is_sized_from_the_measured_slope() -> None:
    # the unit loop aims at 25% of the stock step at a guessed 200 instructions per iteration
    assert power_icount.unit_iterations(14_000_000, 1) == round(0.25 * 14_000_000 / 200)
    assert power_icount.unit_iterations(14_000_000, 2) == round(0.25 * 14_000_000 / 400)  # two planted calls a step
    assert power_icount.unit_iterations(10_000, 1) == 1000  # never too small to measure
    with pytest.raises(ValueError, match="no unit loop"):
        power_icount.unit_iterations(14_000_000, 0)
    stock, unit, unit_count = 14_000_000, 20_000, 14_000_000 + 20_000 * 41
    per_iteration = power_icount.slope(stock, unit_count, unit)
    assert per_iteration == 41.0
    n = power_icount.plant_iterations(stock, per_iteration, 0.10)
    assert abs(stock + n * per_iteration - 1.10 * stock) <= per_iteration  # one iteration of rounding
    assert power_icount.plant_iterations(stock, per_iteration, 0.0) == 0
    # a hook that costs 1% of the step by itself leaves 9% of a 10% plant to the loop
    zero = 1.01 * stock
    n = power_icount.plant_iterations(stock, per_iteration, 0.10, zero=zero)
    assert abs(zero + n * per_iteration - 1.10 * stock) <= per_iteration
    assert power_icount.plant_iterations(stock, per_iteration, 0.0, zero=zero) == 0  # never negative
    with pytest.raises(ValueError, match="did not add instructions"):
        power_icount.slope(stock, stock, unit)


def test_shared_plant_keys_are_named_and_sizes_map_by_key() -> None:
    survey = {
        "a/eval": {"keys": {"Net/10/eval": 1}},
        "a/train": {"keys": {"Net/10/train": 2}},
        "b/eval": {"keys": {"Net/10/eval": 1, "Head/3/eval": 1}},  # the same module as a/eval's
        "mlp/eval": {"keys": {}},
    }
    assert power_icount.key_collisions(survey) == {"Net/10/eval": ["a/eval", "b/eval"]}
    sizes = power_icount.work_map(survey, {"a/eval": 7, "a/train": 9, "b/eval": 8})
    assert sizes == {"Net/10/eval": 7, "Net/10/train": 9, "Head/3/eval": 8}  # a shared key keeps the first size


@pytest.fixture
def work_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """power_plant.HOOK loaded as a module with the work plant on; torch restored afterwards."""
    import importlib.util as iu
    import json

    import torch

    path = tmp_path / "planted_work.py"
    path.write_text(power_plant.HOOK)
    monkeypatch.setenv("TORCHGAUGE_PLANT_KIND", "work")
    net_params = 8 * 3 * 9 + 8 + 8 * 2 + 2  # the test's Net: Conv2d(3, 8, 3) and Linear(8, 2)
    monkeypatch.setenv("TORCHGAUGE_PLANT_WORK", json.dumps({f"Net/{net_params}/eval": 5, "*": 3}))
    train, call = torch.nn.Module.train, torch.nn.Module.__call__
    spec = iu.spec_from_file_location("planted_work", path)
    hook = iu.module_from_spec(spec)
    try:
        spec.loader.exec_module(hook)
        yield hook
    finally:
        torch.nn.Module.train, torch.nn.Module.__call__ = train, call


def test_the_work_plant_loops_after_outermost_conv_forwards_only_with_the_same_operators(work_hook) -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Block(torch.nn.Module):  # contains a Conv2d: planted only when it is the outermost call
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3)

        def forward(self, x):
            return self.conv(x)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block, self.fc = Block(), torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.fc(self.block(x).mean((2, 3)))

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    stock, planted, mlp = Net(), Net(), torch.nn.Linear(4, 4)  # stock: its mode never set, so never found
    planted.load_state_dict(stock.state_dict())
    planted.eval()  # the harness sets the mode at build time: that is when the plant finds modules
    mlp.eval()
    assert type(stock) is Net and type(planted) is not Net and isinstance(planted, Net)
    assert type(planted).__name__ == "Net" and type(planted.block) is not Block
    assert type(planted.fc) is torch.nn.Linear and type(mlp) is torch.nn.Linear  # no Conv2d: stock code
    x = torch.randn(1, 3, 6, 6)
    with torch.no_grad(), Ops() as stock_ops:
        expected = stock(x)
    key = work_hook.plant_key(planted)
    assert key == f"Net/{sum(p.numel() for p in planted.parameters())}/eval"
    with torch.no_grad(), Ops() as planted_ops:
        out = planted(x)
    torch.testing.assert_close(out, expected)
    assert planted_ops.ops == stock_ops.ops  # a pure-Python loop: operator counts and FLOPs unchanged
    planted(x)
    assert work_hook.planted_keys == {key: 2}  # once per outermost call; the nested Block never
    assert key in work_hook.WORK and work_hook._iterations[planted][1] == 5  # its size from the JSON map
    planted.block(x)  # called on its own, the Conv2d block is outermost: planted with the "*" size
    assert work_hook._iterations[planted.block][1] == 3
    planted.train()
    planted(x)
    assert work_hook.planted_keys[key.replace("/eval", "/train")] == 1  # the key follows the mode


def test_the_time_plant_stays_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util as iu

    import torch

    monkeypatch.delenv("TORCHGAUGE_PLANT_KIND", raising=False)
    monkeypatch.setenv("TORCHGAUGE_PLANT", "0")
    path = tmp_path / "planted_time.py"
    path.write_text(power_plant.HOOK)
    train, call = torch.nn.Module.train, torch.nn.Module.__call__
    spec = iu.spec_from_file_location("planted_time", path)
    hook = iu.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert hook.KIND == "time" and torch.nn.Module.train is train and torch.nn.Module.__call__ is call


def _icount_config(verdict: str, base: int, new: int) -> dict:
    change = (new - base) / base
    return {
        "verdict": verdict,
        "change": change,
        "p_value": None,
        "signal": None,
        "memory_flag": False,
        "base": {"instructions": [base]},
        "new": {"instructions": [new]},
    }


ICOUNT_REPORT = {
    "procedure": {
        "rounds": 1,
        "repeat": 1,
        "warmup": 1,
        "size": "smoke",
        "metric": "instructions",
        "name": "instruction-count gate",
        "compare_args": ["--threshold", "7%", "--alpha", "0.01", "--correction", "holm", "--time-signal", "auto"],
    },
    "models": ["convnet", "mlp"],
    "affected": ["convnet"],
    "trials": [
        {
            "plant": 0.0,
            "index": 0,
            "cpu_s": 100.0,
            "compare": {"exit": 0},
            "nights": {"base": {"wall_s": 50.0, "load_start": [1.0], "load_end": [1.2]}},
            "configs": {
                "convnet/eval": _icount_config("unchanged", 1_000_000, 1_001_000),
                "mlp/eval": _icount_config("unchanged", 2_000_000, 1_999_000),
            },
        },
        {
            "plant": 0.1,
            "index": 0,
            "cpu_s": 120.0,
            "compare": {"exit": 1},
            "nights": {"base": {"wall_s": 60.0, "load_start": [1.1], "load_end": [1.3]}},
            "configs": {
                "convnet/eval": _icount_config("regression", 1_000_000, 1_101_000),
                "mlp/eval": _icount_config("unchanged", 2_000_000, 2_000_000),
            },
        },
    ],
}
ICOUNT_CAL = {
    "convnet/eval": {
        "keys": {"ConvNet/1234/eval": 1},
        "stock": 1_000_000,
        "hook_change": 0.004,
        "slope": 40.0,
        "iterations": {"0.1": 2500},
        "change": {"0.1": 0.1008},
        "predicted": {"0.1": 0.1},
    },
    "mlp/eval": {"keys": {}, "stock": 2_000_000, "change": {"0.1": 0.0}},
    "_runs": {},  # the calibration's run costs: not a configuration
}


def test_instruction_counts_are_scored_and_their_aa_margin_reported(capsys: pytest.CaptureFixture) -> None:
    rows = {(r["plant"], r["key"]): r for r in power_rates.outcomes(ICOUNT_REPORT, ICOUNT_CAL)}
    assert rows[0.1, "convnet/eval"]["class"] == "9-20%" and rows[0.1, "convnet/eval"]["flagged"]
    assert rows[0.1, "mlp/eval"]["class"] == "unaffected" and not rows[0.1, "mlp/eval"]["flagged"]
    assert rows[0.0, "mlp/eval"]["step_ms"] == 2_000_000  # the per-process value is the count here
    margins = power_icount.aa_margins(ICOUNT_REPORT)
    assert margins == {"convnet/eval": [pytest.approx(0.001)], "mlp/eval": [pytest.approx(0.0005)]}
    power_icount.print_icount_tables(ICOUNT_REPORT, ICOUNT_CAL)
    out = capsys.readouterr().out
    assert "| A/A, all configurations: false regressions (instructions) | 2 | 0 | 0.0% | upper 77.6% |" in out
    assert "| +10% plant, affected, effective change 9-20%: detected | 1 | 1 | 100.0% | lower 5.0% |" in out
    assert "max 0.1000%, median 0.0750% (threshold 2%: max is 20x below it)" in out
    assert "base step CPU ms" not in out  # the time procedures' per-configuration table does not apply
    plant_cell = "10%: 2500 it, measured +10.08% (predicted +10.00%)"
    assert f"| convnet/eval | ConvNet/1234/eval (1) | 1,000,000 | +0.40% | 40.0 | {plant_cell} |" in out
    assert "| mlp/eval | none | 2,000,000 | - | - | 10%: 0 it, measured +0.00% |" in out
    assert "ran other loop sizes" in out  # the synthetic trials recorded no sizes


def test_an_icount_trial_plants_only_the_candidate_with_the_calibrated_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    calls = []

    def fake_cli(args: list[str], env: dict[str, str]) -> dict:
        calls.append((args[0], env.get("TORCHGAUGE_PLANT_KIND"), env.get("TORCHGAUGE_PLANT_WORK")))
        return {"exit": 0, "wall_s": 1.0, "cpu_s": 1.0, "load_start": [0.0], "load_end": [0.0]}

    class Bench(_FakeBench):
        hook_dir = tmp_path

        def env(self, plant: float) -> dict[str, str]:
            return {"PYTHONPATH": "src"}

    monkeypatch.setattr(power_icount, "cli", fake_cli)
    cal = {"resnet18/eval": {"keys": {"ResNet/831096/eval": 1}, "iterations": {"0.1": 46000}}, "dlrm/eval": {}}
    proc = power_icount.IcountProcedure(repeat=1, warmup=1, compare_args=("--threshold", "7%"))
    record = power_icount.run_icount_trial(Bench(), proc, tmp_path / "t", 0.1, base_first=False, cal=cal)
    assert calls == [
        ("run", "work", json.dumps({"ResNet/831096/eval": 46000})),  # candidate first (base_first=False)
        ("run", None, None),
        ("compare", None, None),
    ]
    assert record["work"] == {"ResNet/831096/eval": 46000} and list(record["nights"]) == ["candidate", "base"]
    calls.clear()
    power_icount.run_icount_trial(Bench(), proc, tmp_path / "aa", 0.0, base_first=True, cal=cal)
    assert [c[1] for c in calls] == [None, None, None]  # A/A: the candidate is stock too
    args = proc.run_args()
    assert args[args.index("--metrics") + 1] == "instructions" and args[args.index("--mode") + 1] == "both"
    with pytest.raises(SystemExit, match="no calibrated loop size for plant 0.25"):
        power_icount.plant_sizes(cal, 0.25)
