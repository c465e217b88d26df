"""compare_results on hand-made result sets with known answers."""

from __future__ import annotations

import random

import pytest

from torchgauge.compare.regression import FINDING_KEYS, compare_results, parse_threshold
from torchgauge.harness.metrics import CPU_PEAK_SPREAD
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord


def _run(
    model: str,
    level: float | None = 10.0,
    *,
    mode: str = "eval",
    status: str = "ok",
    rel_sd: float = 0.01,
    seed: int = 0,
    n: int = 10,
    **metrics,
) -> RunRecord:
    rng = random.Random(f"{model}/{mode}/{level}/{seed}")  # str seeds are stable across processes
    m = dict(metrics)
    if level is not None and status in ("ok", "fail_accuracy"):
        m["time_ms"] = {"samples": [level * (1 + rel_sd * rng.gauss(0, 1)) for _ in range(n)]}
    return RunRecord(
        RunConfig(model, mode=mode),
        status,
        metrics=m if status == "ok" else {},
        error="Traceback\nValueError: boom" if status == "error" else None,
        batch_size=2,
    )


def _rf(*runs: RunRecord, env: dict | None = None) -> ResultsFile:
    return ResultsFile(env=env or {"torch_version": "2.13.0"}, runs=list(runs))


def test_time_regression_improvement_and_unchanged() -> None:
    base = _rf(_run("slow", 10), _run("fast", 10), _run("same", 10), _run("small", 10))
    new = _rf(
        _run("slow", 11.5, seed=1), _run("fast", 8.0, seed=1), _run("same", 10, seed=1), _run("small", 10.3, seed=1)
    )
    cmp = compare_results(base, new, threshold=0.07, alpha=0.01)
    assert [(f.config.model, f.metric) for f in cmp.regressions] == [("slow", "time_ms")]
    assert [(f.config.model, f.metric) for f in cmp.improvements] == [("fast", "time_ms")]
    assert {f.config.model for f in cmp.unchanged if f.metric == "time_ms"} == {"same", "small"}
    reg = cmp.regressions[0]
    assert reg.change == pytest.approx(0.15, abs=0.02) and reg.p_value < 0.01 and reg.n_base == 10
    assert list(reg.to_dict())[: len(FINDING_KEYS)] == list(FINDING_KEYS)
    assert cmp.has_regressions and cmp.compared == 4


def test_correction_makes_marginal_regression_unchanged() -> None:
    # n=5 per side fully separated: raw one-sided p = 1/252 = 0.004 < 0.01 ...
    base_runs = [RunRecord(RunConfig("m0"), "ok", metrics={"time_ms": {"samples": [1.0, 1.01, 1.02, 1.03, 1.04]}})]
    new_runs = [RunRecord(RunConfig("m0"), "ok", metrics={"time_ms": {"samples": [1.2, 1.21, 1.22, 1.23, 1.24]}})]
    for i in range(1, 5):  # ... but with 4 more (unchanged) configs Holm multiplies it by 5
        base_runs.append(_run(f"m{i}", 10))
        new_runs.append(_run(f"m{i}", 10, seed=2))
    assert compare_results(_rf(*base_runs[:1]), _rf(*new_runs[:1])).has_regressions
    assert not compare_results(_rf(*base_runs), _rf(*new_runs), correction="holm").has_regressions
    assert compare_results(_rf(*base_runs), _rf(*new_runs), correction="none").has_regressions


def test_memory_threshold_floor_and_leak() -> None:
    base = _rf(
        _run("a", 10, cpu_peak_mb=1000.0, gpu_peak_mb=0.2, leak={"leaking": False, "cpu_growth_mb_per_iter": 0.0}),
        _run("b", 10, cpu_peak_mb=1000.0, leak={"leaking": True, "cpu_growth_mb_per_iter": 3.0}),
    )
    new = _rf(
        _run(
            "a", 10, seed=1, cpu_peak_mb=1300.0, gpu_peak_mb=0.4, leak={"leaking": True, "cpu_growth_mb_per_iter": 2.5}
        ),
        _run("b", 10, seed=1, cpu_peak_mb=1050.0, leak={"leaking": False, "cpu_growth_mb_per_iter": 0.01}),
    )
    cmp = compare_results(base, new, threshold=0.07)
    assert {(f.config.model, f.metric) for f in cmp.regressions} == {("a", "cpu_peak_mb"), ("a", "leak")}
    assert {(f.config.model, f.metric) for f in cmp.improvements} == {("b", "leak")}
    gpu = next(f for f in cmp.unchanged if f.metric == "gpu_peak_mb")
    assert gpu.change == pytest.approx(1.0)  # +100%, but 0.2 MiB is below MEMORY_MIN_DELTA_MB
    mem = next(f for f in cmp.regressions if f.metric == "cpu_peak_mb")
    assert (mem.base, mem.new, mem.p_value) == (1000.0, 1300.0, None)


def test_deterministic_counts_threshold_and_changed_ops() -> None:
    base = _rf(
        _run(
            "q",
            10,
            instructions={"per_step": 1_000_000, "steps": 2, "tool": "callgrind"},
            op_counts={"total": 100, "by_op": {"aten::mm": 60, "aten::add": 40}},
            flops={"total": 5000},
        )
    )
    new = _rf(
        _run(
            "q",
            10,
            seed=1,
            instructions={"per_step": 10_000_000, "steps": 2, "tool": "callgrind"},
            op_counts={"total": 130, "by_op": {"aten::mm": 60, "aten::add": 40, "aten::copy_": 30}},
            flops={"total": 5100},
        )
    )
    cmp = compare_results(base, new, threshold=0.07)
    regs = {f.metric: f for f in cmp.regressions}
    # default count thresholds (stats.deterministic): the +2% FLOPs change counts too
    assert set(regs) == {"instructions", "op_counts", "flops"}
    assert regs["instructions"].change == pytest.approx(9.0) and regs["instructions"].p_value is None
    assert regs["op_counts"].detail == {"ops": {"aten::copy_": {"kind": "added", "base": 0, "new": 30}}}
    # one explicit threshold for every count: 7% leaves the FLOPs change out
    loose = compare_results(base, new, count_threshold=0.07)
    assert {f.metric for f in loose.regressions} == {"instructions", "op_counts"}
    assert any(f.metric == "flops" for f in loose.unchanged)


def test_statuses_new_failures_fixes_and_unmatched() -> None:
    base = _rf(
        _run("breaks"),
        _run("heals", status="error"),
        _run("gone"),
        _run("both_bad", status="error"),
        _run("unsup"),
        _run("bs"),
    )
    new_bs = _run("bs", seed=1)
    new_bs.batch_size = 4
    new = _rf(
        _run("breaks", status="error"),
        _run("heals", seed=1),
        _run("fresh"),
        _run("both_bad", status="timeout"),
        _run("unsup", status="unsupported"),
        new_bs,
    )
    cmp = compare_results(base, new)
    assert [(s.config.model, s.base_status, s.new_status, s.error) for s in cmp.new_failures] == [
        ("breaks", "ok", "error", "ValueError: boom")
    ]
    assert [(s.config.model, s.base_status, s.new_status) for s in cmp.fixes] == [("heals", "error", "ok")]
    reasons = {(u.model, u.reason, u.side) for u in cmp.unmatched}
    assert reasons == {
        ("gone", "missing", "new"),
        ("fresh", "missing", "base"),
        ("both_bad", "failed", None),
        ("unsup", "failed", "new"),
        ("bs", "batch_mismatch", None),
    }
    assert not cmp.has_regressions  # failures are reported separately; the CLI decides the exit code


def test_several_processes_per_side_test_process_medians() -> None:
    # three fresh processes per side, each with a process-level offset of up to 10%
    offsets_b, offsets_n = [1.0, 1.08, 0.95], [1.02, 0.97, 1.09]
    base = _rf(*[_run("m", 10 * o, seed=i, rel_sd=0.005) for i, o in enumerate(offsets_b)])
    new = _rf(*[_run("m", 10 * o, seed=10 + i, rel_sd=0.005) for i, o in enumerate(offsets_n)])
    cmp = compare_results(base, new)
    (f,) = [f for f in cmp.inconclusive if f.metric == "time_ms"]
    assert (f.n_base, f.n_new) == (3, 3)  # medians of processes, not 30 pooled samples
    # 3 process medians per side cannot reach alpha 0.01 (best p 0.05): inconclusive, not "unchanged"
    assert "smallest one-sided p is 0.05" in f.detail["reason"] and not cmp.inconclusive_beyond_threshold


def test_ordering_and_validation() -> None:
    with pytest.raises(ValueError, match="accepted: holm, bh, none"):
        compare_results(_rf(), _rf(), correction="bonf")
    with pytest.raises(ValueError, match="alpha"):
        compare_results(_rf(), _rf(), alpha=1.5)
    empty = compare_results(_rf(), _rf())
    assert empty.compared == 0 and not empty.has_regressions


@pytest.mark.parametrize(
    "text,value",
    [("7%", 0.07), ("0.07", 0.07), ("7", 0.07), (" 12.5% ", 0.125), ("150", 1.5), ("100%", 1.0), (0.05, 0.05)],
)
def test_parse_threshold(text, value) -> None:
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize(
    "text,msg",
    [
        ("-7%", "must be positive"),
        ("0", "must be positive"),
        ("1", "ambiguous"),
        ("seven", "accepted"),
        ("nan", "must be positive"),
        ("%", "accepted"),
    ],
)
def test_parse_threshold_rejects(text, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        parse_threshold(text)


def test_backend_and_device_verdicts_say_inconclusive_not_same() -> None:
    from torchgauge.compare.matching import time_verdict

    def rec(samples):
        return RunRecord(RunConfig("m", mode="eval"), "ok", metrics={"time_ms": {"samples": samples}})

    # three samples per side: 1.5-4.8x differences used to read "same"
    assert time_verdict(rec([10.0, 10.1, 9.9]), rec([48.0, 47.0, 49.0])) == "inconclusive"
    ten = [10.0 + 0.01 * i for i in range(10)]
    assert time_verdict(rec(ten), rec([v * 2 for v in ten])) == "slower"
    assert time_verdict(rec(ten), rec(list(reversed(ten)))) == "same"


def test_sides_on_different_hardware_are_named() -> None:
    a = {"cpu_model": "Xeon A", "cpu_count": 4, "memory_gib": 16.0}
    base, new = _rf(_run("m", 10.0)), _rf(_run("m", 10.0))
    base.env, new.env = dict(a, hostname="x"), dict(a, hostname="y")
    assert compare_results(base, new).hardware_note is None  # hostnames differ, hardware does not
    new.env = dict(a, cpu_model="EPYC B")
    note = compare_results(base, new).hardware_note
    assert "base ran on Xeon A, 4 CPUs, 16 GiB, no GPU, new on EPYC B" in note


def test_memory_floor_scales_with_the_footprint_and_the_observed_spread() -> None:
    from torchgauge.compare.regression import MEMORY_SPREAD_MULTIPLE, measured_spread, memory_floor_mb

    def mem(model, peak):
        return RunRecord(RunConfig(model, mode="eval"), "ok", metrics={"cpu_peak_mb": peak}, batch_size=2)

    # one process a side: MEMORY_SPREAD_MULTIPLE x CPU_PEAK_SPREAD of the base peak must be exceeded too
    floor = MEMORY_SPREAD_MULTIPLE * CPU_PEAK_SPREAD * 400.0
    needed = max(floor, 0.07 * 400.0)  # and the threshold
    above, below = 400.0 + needed + 1.0, 400.0 + needed - 1.0
    big = compare_results(_rf(mem("m", 400.0)), _rf(mem("m", above)))
    assert [f.metric for f in big.regressions] == ["cpu_peak_mb"]
    assert big.regressions[0].detail["floor_mb"] == round(floor, 1)
    assert not compare_results(_rf(mem("m", 400.0)), _rf(mem("m", below))).regressions
    # the floor scales with the footprint: the same step is noise on a large peak
    assert memory_floor_mb([4000.0], [4000.0 + floor + 1.0], CPU_PEAK_SPREAD) > floor + 1.0
    # several processes a side whose own values spread more than the measured fraction: that spread counts
    wide = 4 * CPU_PEAK_SPREAD * 400.0
    noisy = compare_results(
        _rf(mem("m", 400.0), mem("m", 400.0 + wide), mem("m", 405.0)),
        _rf(mem("m", 400.0 + 1.5 * wide), mem("m", 401.0 + 1.5 * wide), mem("m", 400.0 + 2 * wide)),
    )
    assert not noisy.regressions
    assert noisy.unchanged[-1].detail["floor_mb"] == round(2 * wide, 1)
    assert memory_floor_mb([1.0], [1.5], spread=CPU_PEAK_SPREAD) == 2.0  # the absolute floor for tiny peaks
    assert measured_spread([400.0]) == 0.0 and measured_spread([390.0, 400.0, 410.0]) == pytest.approx(0.05)


def test_time_signal_cpu_tests_the_process_cpu_time() -> None:
    def rec(wall, cpu):
        return RunRecord(
            RunConfig("m", mode="eval"), "ok", batch_size=2, metrics={"time_ms": {"samples": wall, "cpu_samples": cpu}}
        )

    steady = [10.0 + 0.01 * i for i in range(10)]
    # the candidate ran descheduled (wall x3) but its CPU time per step did not change
    base, new = _rf(rec(steady, steady)), _rf(rec([3 * v for v in steady], steady))
    assert compare_results(base, new, time_signal="wall").regressions
    cpu = compare_results(base, new, time_signal="cpu")
    assert not cpu.regressions and cpu.time_signal == "cpu"
    assert cpu.unchanged[0].detail["signal"] == "cpu"
    with pytest.raises(ValueError, match="accepted: auto, wall, cpu"):
        compare_results(base, new, time_signal="ticks")


def _timed(wall, cpu=None, *, device="cpu", intra_op=1):
    timing = {"samples": wall, **({"cpu_samples": cpu} if cpu is not None else {})}
    return RunRecord(
        RunConfig("m", mode="eval", device=device),
        "ok",
        batch_size=2,
        metrics={"time_ms": timing},
        threads={"intra_op": intra_op} if intra_op is not None else None,
    )


def test_auto_time_signal_tests_cpu_time_only_where_it_is_the_step_cost() -> None:
    from torchgauge.report.regression import render_markdown, time_signal_line

    steady = [10.0 + 0.01 * i for i in range(10)]
    slow = [3 * v for v in steady]
    # one thread on a CPU: the descheduled candidate (wall x3, same CPU time) is not a regression
    cmp = compare_results(_rf(_timed(steady, steady)), _rf(_timed(slow, steady)))
    assert cmp.time_signal == "auto" and not cmp.regressions
    assert cmp.time_signals == {("cpu", None): 1}
    assert (
        time_signal_line(cmp) == "time tested on per-step process CPU time in 1 configuration(s) [--time-signal auto]"
    )
    assert "Time tested on per-step process CPU time" in render_markdown(cmp)
    # where CPU time is not the step's cost, or not recorded, wall time is tested and the reason given
    for base, new, note in (
        (_timed(steady, steady, intra_op=2), _timed(slow, steady, intra_op=2), "2 intra-op threads"),
        (_timed(steady, steady, device="cuda"), _timed(slow, steady, device="cuda"), "device cuda"),
        (_timed(steady, steady, intra_op=None), _timed(slow, steady, intra_op=None), "not recorded"),
        (_timed(steady), _timed(slow, steady), "no per-step CPU time in the base records"),
    ):
        cmp = compare_results(_rf(base), _rf(new))
        (finding,) = cmp.regressions
        assert finding.detail["signal"] == "wall" and note in finding.detail["signal_note"], finding.detail
        assert "wall time in 1 configuration(s) (" in time_signal_line(cmp)


def test_cpu_time_signal_falls_back_to_wall_time_for_old_records() -> None:
    steady = [10.0 + 0.01 * i for i in range(10)]
    # records stored before CPU time was recorded: --time-signal cpu still compares them, on wall time
    cmp = compare_results(_rf(_timed(steady)), _rf(_timed([3 * v for v in steady])), time_signal="cpu")
    (finding,) = cmp.regressions
    assert finding.detail["signal"] == "wall"
    assert finding.detail["signal_note"] == "no per-step CPU time in the base and new records"
    assert cmp.to_dict()["time_signals"] == [
        {"signal": "wall", "note": "no per-step CPU time in the base and new records", "configurations": 1}
    ]
    # explicit cpu keeps CPU time where auto would not (two threads): the user asked for it
    two = compare_results(
        _rf(_timed(steady, steady, intra_op=2)), _rf(_timed(steady, steady, intra_op=2)), time_signal="cpu"
    )
    assert two.time_signals == {("cpu", None): 1}


def test_compare_says_when_the_sides_ran_with_different_threads() -> None:
    from torchgauge.compare.regression import compare_results, threads_note
    from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord

    def side(threads):
        samples = {"time_ms": {"samples": [10.0, 10.1, 9.9, 10.0, 10.2]}}
        return ResultsFile(
            env={}, runs=[RunRecord(RunConfig("m", mode="eval"), "ok", metrics=samples, threads=threads)]
        )

    one, two, old = side({"intra_op": 1}), side({"intra_op": 2}), side(None)
    assert threads_note(one, side({"intra_op": 1})) is None
    note = threads_note(one, two)
    assert note.startswith("different intra-op threads: base 1, new 2") and "--threads" in note
    assert "new unrecorded" in threads_note(one, old)
    cmp = compare_results(one, two)
    assert cmp.threads_note == note and cmp.to_dict()["threads_note"] == note


def test_groups_of_rounds_pair_like_single_runs() -> None:
    # rounds: three processes in base, one in new; a failed round fails its configuration
    base = _rf(*[_run("m", 10, seed=i) for i in range(3)], _run("flaky", 10), _run("flaky", 10, seed=1))
    new = _rf(_run("m", 12, seed=9), _run("flaky", 10, seed=2), _run("flaky", status="error"))
    cmp = compare_results(base, new)
    (f,) = [f for f in cmp.regressions if f.metric == "time_ms"]
    assert (f.config.model, f.n_base, f.n_new) == ("m", 3, 10)  # base: 3 process medians; new: its 10 samples
    assert [(s.config.model, s.base_status, s.new_status) for s in cmp.new_failures] == [("flaky", "ok", "error")]
    assert cmp.unmatched == [] and cmp.compared == 1


NIGHTLY_METRICS = ("time", "memory", "tensor_memory", "op_counts", "flops")


def _rounds(
    model: str, level: float, *, ops: dict, tensor_mb: float, flops: int, at: int = 0, seed: int = 0
) -> list[RunRecord]:
    """Ten records of one configuration shaped like ``run --rounds 10 --repeat 1``: one timed step
    each; the deterministic metrics only in the record of round ``at`` (with several jobs the
    first round need not finish first), whose config requested them; the rest requested time and memory."""
    out = []
    for r in range(10):
        rec = _run(model, level, seed=seed + r, n=1, cpu_peak_mb=500.0 + r)
        if r == at:
            rec.config = RunConfig(model, mode="eval", metrics=NIGHTLY_METRICS)
            rec.metrics["tensor_memory"] = {"cpu_peak_mb": tensor_mb, "cpu_net_mb": 0.0}
            rec.metrics["op_counts"] = {"total": sum(ops.values()), "by_op": ops}
            rec.metrics["flops"] = {"total": flops, "tflops": 0.1}
        else:
            rec.config = RunConfig(model, mode="eval", metrics=("time", "memory"))
        out.append(rec)
    return out


def test_rounds_judge_the_deterministic_metrics_of_the_one_record_that_has_them() -> None:
    """The nightly's shape: 10 records a side, op_counts/flops/tensor memory in one of them."""
    base_ops = {"aten::mm": 60, "aten::add": 40}
    base = _rf(
        *_rounds("counted", 10, ops=base_ops, tensor_mb=50.0, flops=5000),
        *_rounds("steady", 10, ops=base_ops, tensor_mb=50.0, flops=5000),
    )
    new = _rf(
        *_rounds("counted", 10, ops={**base_ops, "aten::copy_": 30}, tensor_mb=60.0, flops=5000, at=3, seed=20),
        *_rounds("steady", 10, ops=base_ops, tensor_mb=50.5, flops=5000, at=9, seed=20),
    )
    cmp = compare_results(base, new, threshold=0.07, alpha=0.01)
    regs = {(f.config.model, f.metric): f for f in cmp.regressions}
    assert set(regs) == {("counted", "op_counts"), ("counted", "tensor_memory")}
    ops = regs["counted", "op_counts"]
    assert (ops.base, ops.new, ops.change, ops.n_base, ops.n_new) == (100, 130, pytest.approx(0.3), 1, 1)
    assert ops.detail == {"ops": {"aten::copy_": {"kind": "added", "base": 0, "new": 30}}}  # from the record with them
    mem = regs["counted", "tensor_memory"]
    assert (mem.base, mem.new, mem.detail["floor_mb"]) == (50.0, 60.0, 2.0)  # deterministic: threshold and 2 MiB
    # the finding names the configuration as planned: every metric the rounds collected between them
    assert ops.config.metrics == NIGHTLY_METRICS and mem.config.metrics == NIGHTLY_METRICS
    unchanged = {(f.config.model, f.metric) for f in cmp.unchanged}
    assert {("steady", "op_counts"), ("steady", "flops"), ("steady", "tensor_memory")} <= unchanged
    assert ("counted", "flops") in unchanged and not cmp.inconclusive_beyond_threshold
    # time is tested on the 10 process medians of each side, memory on the 10 process peaks
    times = [f for f in (*cmp.unchanged, *cmp.inconclusive) if f.metric == "time_ms"]
    assert {(f.n_base, f.n_new) for f in times} == {(10, 10)}
    peaks = [f for f in cmp.unchanged if f.metric == "cpu_peak_mb"]
    assert {(f.n_base, f.n_new) for f in peaks} == {(10, 10)}


def test_records_of_one_side_that_disagree_on_a_count_are_named_not_picked() -> None:
    from torchgauge.compare.regression import exit_code

    ops = {"aten::mm": 60, "aten::add": 40}
    base = _rf(*_rounds("m", 10, ops=ops, tensor_mb=50.0, flops=5000))
    split = _rounds("m", 10, ops=ops, tensor_mb=50.0, flops=5000, seed=20)
    split[5].config = split[0].config
    split[5].metrics["op_counts"] = {"total": 104, "by_op": {**ops, "aten::relu": 4}}
    cmp = compare_results(base, _rf(*split), threshold=0.07)
    (f,) = [f for f in cmp.inconclusive if f.metric == "op_counts"]
    assert (f.base, f.new, f.n_base, f.n_new) == (100.0, None, 1, 2)  # no value picked for the new side
    assert f.change == pytest.approx(0.04)  # the largest change the disagreement could hide
    assert f.detail["reason"].startswith("the new side's 2 records disagree on op_counts (100, 104)")
    assert f.detail["new_values"] == [100.0, 104.0] and f.detail["threshold"] == 0.01
    # beyond the count threshold (1%), not the time threshold (7%): the gate fails with exit 3
    assert cmp.inconclusive_beyond_threshold == [f] and exit_code(cmp) == 3
    assert not [g for g in cmp.regressions + cmp.unchanged if g.metric == "op_counts"]
    # equal copies agree (merged reruns); instructions agree within their measured wobble (0.2%)
    split[5].metrics["op_counts"] = split[0].metrics["op_counts"]
    split[5].metrics["instructions"] = {"per_step": 1_002_000}
    split[0].metrics["instructions"] = {"per_step": 1_000_000}
    base.runs[0].metrics["instructions"] = {"per_step": 1_000_000}
    again = compare_results(base, _rf(*split), threshold=0.07)
    assert not again.inconclusive_beyond_threshold
    (inst,) = [g for g in again.unchanged if g.metric == "instructions"]
    assert (inst.new, inst.n_new) == (1_001_000, 2)


def test_a_metric_measured_on_one_side_only_is_listed_not_dropped() -> None:
    # A nightly whose op_counts pass failed (or was not requested) must not read as "no change in op_counts"
    counts = {"total": 100, "by_op": {"aten::mm": 100}}
    base = _rf(_run("m", 10, op_counts=counts), _run("k", 10))
    new = _rf(_run("m", 10, seed=1), _run("k", 10, seed=1, op_counts=counts))
    cmp = compare_results(base, new)
    lost = sorted((u.model, u.metric, u.side, u.detail) for u in cmp.unmatched if u.reason == "metric_missing")
    assert lost == [
        ("k", "op_counts", "base", "op_counts measured in new only: not compared"),
        ("m", "op_counts", "new", "op_counts measured in base only: not compared"),
    ]
    assert {f.metric for f in cmp.unchanged} == {"time_ms"} and cmp.compared == 2  # time still judged
    assert not compare_results(base, base).unmatched  # both sides alike: nothing to say
