"""compare_devices on hand-made results files with known ratios, geomeans and wins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from torchgauge.compare.devices import compare_devices, describe_env
from torchgauge.compare.matching import CompareError
from torchgauge.results.schema import load_results

_spec = importlib.util.spec_from_file_location(
    "results_factory", Path(__file__).parents[1] / "fixtures" / "results_factory.py"
)
factory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)


def _files(tmp_path):
    r = factory.run
    a = factory.write_results(
        tmp_path / "a.json",
        [
            r("m1", "train", device="cuda", time_ms=10.0),
            r("m1", "eval", device="cuda", time_ms=2.0),
            r("m2", "train", device="cuda", time_ms=30.0),
            r("m2", "eval", device="cuda", time_ms=10.0),
            r("m3", "eval", device="cuda", time_ms=10.0),
            r("m4", "eval", device="cuda", time_ms=10.0),
            r("m5", "eval", device="cuda", status="oom", error="torch.OutOfMemoryError: CUDA out of memory"),
        ],
        env=factory.ENV_GPU,
    )
    b = factory.write_results(
        tmp_path / "b.json",
        [
            r("m1", "train", device="cuda:1", time_ms=20.0),
            r("m1", "eval", device="cuda:1", time_ms=1.0),
            r("m2", "train", device="cuda:1", time_ms=15.0),
            r("m2", "eval", device="cuda:1", time_ms=20.0),
            r("m3", "eval", device="cuda:1", time_ms=10.1),
            r("m5", "eval", device="cuda:1", time_ms=3.0),
            r("m6", "eval", device="cuda:1", time_ms=3.0),
        ],
        env=factory.ENV_CPU,
    )
    return load_results(a), load_results(b)


def test_ratios_geomeans_and_wins(tmp_path) -> None:
    a, b = _files(tmp_path)
    cmp = compare_devices(a, b, a_label="a", b_label="b")
    ratios = {(r.model, r.mode): r.ratio for r in cmp.rows}
    assert ratios == {
        ("m1", "train"): 0.5,
        ("m1", "eval"): 2.0,
        ("m2", "train"): 2.0,
        ("m2", "eval"): 0.5,
        ("m3", "eval"): pytest.approx(10.0 / 10.1),
    }
    assert cmp.geomeans["train"] == {"geomean": pytest.approx(1.0), "n": 2}
    assert cmp.geomeans["eval"]["geomean"] == pytest.approx((2.0 * 0.5 * 10.0 / 10.1) ** (1 / 3))
    assert cmp.wins == {"train": {"a": 1, "b": 1, "ties": 0}, "eval": {"a": 1, "b": 1, "ties": 1}}
    row = next(r for r in cmp.rows if r.model == "m1" and r.mode == "train")
    assert (row.a_ms, row.b_ms, row.a_device, row.b_device) == (10.0, 20.0, "cuda", "cuda:1")
    assert {(r.model, r.mode): r.verdict for r in cmp.rows} == {
        ("m1", "train"): "faster",
        ("m1", "eval"): "slower",
        ("m2", "train"): "slower",
        ("m2", "eval"): "faster",
        ("m3", "eval"): "same",
    }


def test_unmatched_runs_say_why(tmp_path) -> None:
    a, b = _files(tmp_path)
    cmp = compare_devices(a, b, a_label="a", b_label="b")
    why = {u.model: (u.reason, u.detail) for u in cmp.unmatched}
    assert why["m4"] == ("missing", "missing in b")
    assert why["m6"] == ("missing", "missing in a")
    assert why["m5"][0] == "failed" and why["m5"][1].startswith("failed in a: oom (torch.OutOfMemoryError")
    assert set(why) == {"m4", "m5", "m6"}


def test_zero_tie_band_counts_every_difference(tmp_path) -> None:
    a, b = _files(tmp_path)
    cmp = compare_devices(a, b, tie_band=0.0)
    assert cmp.wins["eval"] == {"a": 2, "b": 1, "ties": 0}
    assert cmp.to_dict()["tie_band"] == 0.0


def test_env_description_and_duplicate_runs(tmp_path) -> None:
    assert describe_env(factory.ENV_GPU) == "Test GPU X1 (host Test CPU 9000), torch 2.13.0+cu128"
    assert describe_env(factory.ENV_CPU) == "Test CPU 9000 x2, torch 2.13.0+cpu"
    dup = load_results(
        factory.write_results(
            tmp_path / "d.json", [factory.run("m1", device="cuda:0"), factory.run("m1", device="cuda:1")]
        )
    )
    with pytest.raises(CompareError, match="more than one run of m1/eval/fp32/eager/bs=default"):
        compare_devices(dup, dup, a_label="d.json")
