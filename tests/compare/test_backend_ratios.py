"""compare_backends on hand-made runs with known ratios and geometric means."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from torchgauge.compare.backend_ratios import compare_backends, select_backend
from torchgauge.compare.matching import CompareError
from torchgauge.results.schema import RunRecord

_spec = importlib.util.spec_from_file_location(
    "results_factory", Path(__file__).parents[1] / "fixtures" / "results_factory.py"
)
factory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)


def _recs(*docs) -> list[RunRecord]:
    return [RunRecord.from_dict(d) for d in docs]


COMPILE = {
    "compile_s": 12.5,
    "first_iter_ms": 900.0,
    "steady_ms": 5.0,
    "graphs": 1,
    "graph_breaks": 2,
    "guards": 10,
    "break_reasons": [],
}


def _pair():
    base = _recs(
        factory.run("m1", "train", time_ms=10.0, cpu_mb=200.0, gpu_mb=100.0),
        factory.run("m1", "eval", time_ms=8.0, cpu_mb=100.0, gpu_mb=50.0),
        factory.run("m2", "train", time_ms=20.0, cpu_mb=400.0, gpu_mb=100.0),
        factory.run("m2", "eval", time_ms=4.0, cpu_mb=100.0, gpu_mb=100.0),
        factory.run("m3", "eval", time_ms=5.0),
        factory.run("m4", "eval", time_ms=5.0),
    )
    cand = _recs(
        factory.run("m1", "train", backend="inductor", time_ms=5.0, cpu_mb=100.0, gpu_mb=200.0, compile=COMPILE),
        factory.run("m1", "eval", backend="inductor", time_ms=2.0, cpu_mb=50.0, gpu_mb=100.0, compile=COMPILE),
        factory.run("m2", "train", backend="inductor", time_ms=40.0, cpu_mb=100.0, gpu_mb=800.0),
        factory.run("m2", "eval", backend="inductor", time_ms=8.0, cpu_mb=100.0, gpu_mb=100.0),
        factory.run("m3", "eval", backend="inductor", status="error", error="Traceback\nBackendCompilerFailed: boom"),
        factory.run("m5", "eval", backend="inductor", time_ms=1.0),
    )
    return base, cand


def test_ratios_geomeans_compile_time_and_failures() -> None:
    base, cand = _pair()
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    rows = {(r.model, r.mode): r for r in cmp.rows}
    assert set(rows) == {("m1", "train"), ("m1", "eval"), ("m2", "train"), ("m2", "eval")}
    assert rows["m1", "train"].ratios == {"time": 0.5, "cpu_mem": 0.5, "gpu_mem": 2.0}
    assert rows["m2", "train"].ratios == {"time": 2.0, "cpu_mem": 0.25, "gpu_mem": 8.0}
    assert rows["m1", "eval"].ratios["time"] == 0.25 and rows["m2", "eval"].ratios["time"] == 2.0
    assert rows["m1", "train"].compile_s == 12.5 and rows["m1", "train"].graph_breaks == 2
    # 2x apart with 8 samples a side: significant and beyond the threshold
    assert (rows["m1", "train"].verdict, rows["m2", "train"].verdict) == ("faster", "slower")
    assert rows["m2", "train"].compile_s is None
    g = cmp.geomeans
    assert g["train"]["time"] == {"geomean": pytest.approx(1.0), "n": 2}
    assert g["train"]["cpu_mem"]["geomean"] == pytest.approx((0.5 * 0.25) ** 0.5)
    assert g["train"]["gpu_mem"]["geomean"] == pytest.approx(4.0)
    assert g["eval"]["time"]["geomean"] == pytest.approx((0.25 * 2.0) ** 0.5)
    failed = cmp.failed_candidate
    assert [(u.model, u.status) for u in failed] == [("m3", "error")]
    assert "BackendCompilerFailed: boom" in failed[0].detail
    missing = {(u.model, u.detail) for u in cmp.unmatched if u.reason == "missing"}
    assert missing == {("m4", "missing in inductor"), ("m5", "missing in eager")}
    doc = cmp.to_dict()
    assert doc["failed_candidate"][0]["model"] == "m3" and len(doc["rows"]) == 4


def test_accuracy_failure_is_flagged_and_left_out_of_geomeans() -> None:
    base = _recs(factory.run("m1", time_ms=10.0), factory.run("m2", time_ms=10.0))
    bad = {"status": "fail_accuracy", "max_abs_err": 0.5, "max_rel_err": 0.1, "tolerance": {}}
    cand = _recs(
        factory.run("m1", backend="inductor", time_ms=5.0),
        factory.run("m2", backend="inductor", time_ms=1.0, accuracy=bad),
    )
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert [r.model for r in cmp.failed_accuracy] == ["m2"]
    assert cmp.geomeans["eval"]["time"] == {"geomean": pytest.approx(0.5), "n": 1}
    assert cmp.to_dict()["failed_accuracy"] == ["m2/eval"]


def test_fail_accuracy_status_keeps_time_but_not_geomean() -> None:
    base = _recs(factory.run("m1", time_ms=10.0), factory.run("m2", time_ms=10.0))
    cand = _recs(
        factory.run("m1", backend="inductor", time_ms=5.0),
        factory.run("m2", backend="inductor", time_ms=1.0, status="fail_accuracy"),
    )
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert {r.model: r.ratios["time"] for r in cmp.rows} == {"m1": 0.5, "m2": 0.1}
    assert cmp.geomeans["eval"]["time"]["n"] == 1


def test_eager_nondeterministic_is_compared_and_counted() -> None:
    base = _recs(factory.run("m1", time_ms=10.0))
    cand = _recs(factory.run("m1", backend="inductor", time_ms=5.0, status="eager_nondeterministic"))
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert [(r.accuracy, r.ratios["time"]) for r in cmp.rows] == [("eager_nondeterministic", 0.5)]
    assert cmp.geomeans["eval"]["time"] == {"geomean": pytest.approx(0.5), "n": 1}


def test_failed_baseline_is_not_a_candidate_failure() -> None:
    base = _recs(factory.run("m1", status="oom", error="CUDA out of memory"))
    cand = _recs(factory.run("m1", backend="inductor"))
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert cmp.rows == [] and cmp.failed_candidate == []
    assert cmp.unmatched[0].side == "eager" and cmp.unmatched[0].status == "oom"


def test_mode_unsupported_on_both_sides_is_not_a_failure() -> None:
    msg = "m1 does not support mode 'train' (supports eval)"
    base = _recs(factory.run("m1", "train", status="unsupported", error=msg))
    cand = _recs(factory.run("m1", "train", backend="inductor", status="unsupported", error=msg))
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert cmp.rows == [] and cmp.failed_candidate == []
    (u,) = cmp.unmatched
    assert (u.reason, u.status, u.side) == ("unsupported", "unsupported", None)
    assert "unsupported on both sides" in u.detail and "supports eval" in u.detail


def test_runs_pair_on_batch_size_and_precision() -> None:
    base = _recs(factory.run("m1", batch_size=8, actual_batch=8), factory.run("m1", precision="bf16"))
    cand = _recs(
        factory.run("m1", backend="inductor", batch_size=16, actual_batch=16),
        factory.run("m1", backend="inductor", precision="bf16", time_ms=5.0),
    )
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert [(r.precision, r.ratios["time"]) for r in cmp.rows] == [("bf16", 0.5)]
    assert sorted(u.config for u in cmp.unmatched) == ["m1/eval/cpu/fp32/bs=16", "m1/eval/cpu/fp32/bs=8"]
    detail = {u.config: u.detail for u in cmp.unmatched}
    assert detail["m1/eval/cpu/fp32/bs=8"] == (
        "missing in inductor (it has m1/eval/cpu/fp32/bs=16, m1/eval/cpu/bf16/bs=default)"
    )


def test_default_batch_sizes_that_differ_are_reported() -> None:
    base = _recs(factory.run("m1", actual_batch=8))
    cand = _recs(factory.run("m1", backend="inductor", actual_batch=16))
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert cmp.rows == [] and cmp.unmatched[0].reason == "batch_mismatch"
    assert "8 in eager, 16 in inductor" in cmp.unmatched[0].detail


def test_select_backend_and_bad_input() -> None:
    recs = _recs(factory.run("m1"), factory.run("m1", backend="inductor"))
    assert [r.config.backend for r in select_backend(recs, "inductor", "x.json")] == ["inductor"]
    assert len(select_backend(recs, None, "x.json")) == 2
    with pytest.raises(CompareError, match="x.json has no runs of backend 'tvm'; it has: eager, inductor"):
        select_backend(recs, "tvm", "x.json")
    with pytest.raises(CompareError, match="more than one run of m1/eval/cpu/fp32/bs=default"):
        compare_backends(recs, recs[:1], baseline="a", candidate="b")
    with pytest.raises(CompareError, match="both 'eager'"):
        compare_backends(recs[:1], recs[:1], baseline="eager", candidate="eager")


def test_small_differences_read_as_same() -> None:
    base = _recs(factory.run("m1", time_ms=10.0), factory.run("m2", time_ms=10.0))
    cand = _recs(
        factory.run("m1", backend="inductor", time_ms=10.3),  # 3%: under the threshold
        factory.run("m2", backend="inductor", time_ms=10.0),
    )
    cmp = compare_backends(base, cand, baseline="eager", candidate="inductor")
    assert [r.verdict for r in cmp.rows] == ["same", "same"]
    assert cmp.rows[0].ratios["time"] == pytest.approx(1.03)
