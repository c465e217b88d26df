"""Breakdown arithmetic on synthetic event lists with hand-computed answers (no GPU needed)."""

from __future__ import annotations

import math

import pytest

from torchgauge.harness.breakdown import (
    CPU_NAMES,
    CUDA_NAMES,
    breakdown,
    clip,
    cpu_breakdown,
    cuda_breakdown,
    is_aten_op,
    subtract,
    total,
    union,
)
from torchgauge.harness.events import ProfileTrace, TraceEvent, memcpy_direction, parse_frame, top_level


def kernel(s: float, e: float, stream: int = 7) -> TraceEvent:
    return TraceEvent("void gemm_kernel<float>", "kernel", s, e, device="cuda:0", thread=stream, step=0)


def copy(s: float, e: float, direction: str, nbytes: int = 4096, stream: int = 7) -> TraceEvent:
    name = {
        "h2d": "Memcpy HtoD (Pageable -> Device)",
        "d2h": "Memcpy DtoH (Device -> Pageable)",
        "d2d": "Memcpy DtoD (Device -> Device)",
    }[direction]
    return TraceEvent(name, "memcpy", s, e, device="cuda:0", thread=stream, step=0, bytes=nbytes, direction=direction)


def op(name: str, s: float, e: float, thread: int = 1) -> TraceEvent:
    return TraceEvent(name, "cpu_op", s, e, thread=thread, step=0)


def assert_sums_to_one(record: dict) -> None:
    assert math.isclose(sum(record["fractions"].values()), 1.0, rel_tol=1e-12)
    assert math.isclose(sum(record["ms"].values()), record["span_ms"], rel_tol=1e-12)


# -- interval arithmetic ------------------------------------------------------------------------
def test_union_merges_overlaps_and_touching_intervals() -> None:
    assert union([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9)]) == [(0, 4), (5, 7)]
    assert union([]) == []


def test_subtract_and_clip() -> None:
    assert subtract([(0, 10)], [(2, 3), (5, 6), (9, 12)]) == [(0, 2), (3, 5), (6, 9)]
    assert subtract([(0, 2), (4, 6)], [(1, 5)]) == [(0, 1), (5, 6)]
    assert subtract([(0, 2)], []) == [(0, 2)]
    assert clip([(-5, 1), (3, 4), (8, 20)], (0, 10)) == [(0, 1), (3, 4), (8, 10)]
    assert total([(0, 1), (3, 5)]) == 3


# -- CUDA breakdown ----------------------------------------------------------------------------
def test_cuda_overlapping_kernels_on_two_streams_count_once() -> None:
    # window 0..100; kernels 10-40 (stream 7) and 30-50 (stream 8): active = 40 us.
    trace = ProfileTrace("cuda", [(0, 100)], [kernel(10, 40), kernel(30, 50, stream=8)], device="cuda:0")
    b = cuda_breakdown(trace)
    assert b["kind"] == "cuda" and b["steps"] == 1 and b["span_ms"] == pytest.approx(0.1)
    assert b["fractions"]["active"] == pytest.approx(0.4)
    assert b["fractions"]["idle"] == pytest.approx(0.6)
    assert b["kernels"] == 2
    assert tuple(b["fractions"]) == CUDA_NAMES
    assert_sums_to_one(b)


def test_cuda_memcpy_partly_under_a_kernel_counts_only_the_uncovered_part() -> None:
    # kernel 0-50, H2D copy 40-70 (10 us hidden under the kernel), D2H copy 80-90, gaps elsewhere.
    trace = ProfileTrace("cuda", [(0, 100)], [kernel(0, 50), copy(40, 70, "h2d", 1 << 20), copy(80, 90, "d2h", 256)])
    b = cuda_breakdown(trace)
    assert b["ms"]["active"] == pytest.approx(0.050)
    assert b["ms"]["data_movement_h2d"] == pytest.approx(0.020)
    assert b["ms"]["data_movement_d2h"] == pytest.approx(0.010)
    assert b["ms"]["data_movement_d2d"] == 0
    assert b["ms"]["idle"] == pytest.approx(0.020)  # 70-80 and 90-100
    assert b["bytes"] == {"h2d": 1 << 20, "d2h": 256, "d2d": 0}
    assert_sums_to_one(b)


def test_cuda_overlapping_copies_of_two_directions_are_charged_once_by_priority() -> None:
    # H2D 10-30 and D2H 20-40 on different streams: 10-30 -> h2d, 30-40 -> d2h; memset counts as d2d.
    memset = TraceEvent("Memset (Device)", "memset", 50, 55, device="cuda:0", step=0, direction="d2d")
    trace = ProfileTrace("cuda", [(0, 60)], [copy(10, 30, "h2d"), copy(20, 40, "d2h", stream=9), memset])
    b = cuda_breakdown(trace)
    assert b["ms"]["data_movement_h2d"] == pytest.approx(0.020)
    assert b["ms"]["data_movement_d2h"] == pytest.approx(0.010)
    assert b["ms"]["data_movement_d2d"] == pytest.approx(0.005)
    assert b["ms"]["idle"] == pytest.approx(0.025)
    assert_sums_to_one(b)


def test_cuda_window_spans_steps_and_device_work_that_outlives_the_host() -> None:
    # Two steps on the host, 0-10 and 10-20; the last kernel launched in step 1 runs to 30.
    # A kernel from before the steps (warm-up) and one after the window are ignored.
    events = [kernel(-20, -10), kernel(5, 15), kernel(18, 30), kernel(40, 50)]
    trace = ProfileTrace("cuda", [(0, 10), (10, 20)], events)
    assert trace.window() == (0, 30)
    b = cuda_breakdown(trace)
    assert b["steps"] == 2
    assert b["ms"]["active"] == pytest.approx(0.022)  # 5-15 and 18-30
    assert b["ms"]["idle"] == pytest.approx(0.008)
    assert_sums_to_one(b)


def test_cuda_host_events_never_count_as_device_time() -> None:
    host = [
        op("aten::mm", 0, 100),
        TraceEvent("cudaLaunchKernel", "runtime", 1, 2),
        TraceEvent("cudaStreamSynchronize", "sync", 50, 90),
    ]
    b = breakdown(ProfileTrace("cuda", [(0, 100)], host + [kernel(10, 20)]))
    assert b["fractions"]["active"] == pytest.approx(0.1)
    assert b["fractions"]["idle"] == pytest.approx(0.9)


# -- CPU breakdown -----------------------------------------------------------------------------
def test_cpu_aten_vs_overhead_with_nesting_and_two_threads() -> None:
    # Step 0-100. Thread 1: linear 10-40 with nested addmm 15-35; relu 50-60.
    # Thread 2 (autograd): mm 55-70 overlaps relu by 5. Autograd bookkeeping 0-100 is not ATen.
    events = [
        op("aten::linear", 10, 40),
        op("aten::addmm", 15, 35),
        op("aten::relu", 50, 60),
        op("aten::mm", 55, 70, thread=2),
        op("autograd::engine::evaluate_function: MmBackward0", 0, 100, thread=2),
        TraceEvent("torch/nn/modules/module.py(1750): _call_impl", "python", 5, 45),
    ]
    b = cpu_breakdown(ProfileTrace("cpu", [(0, 100)], events))
    assert b["kind"] == "cpu" and tuple(b["fractions"]) == CPU_NAMES
    assert b["ms"]["aten"] == pytest.approx(0.050)  # 10-40 and 50-70
    assert b["fractions"]["overhead"] == pytest.approx(0.5)
    assert_sums_to_one(b)


def test_cpu_ops_outside_the_steps_are_clipped() -> None:
    events = [op("aten::add", -50, 5), op("aten::mul", 95, 150)]
    b = cpu_breakdown(ProfileTrace("cpu", [(0, 50), (50, 100)], events))
    assert b["ms"]["aten"] == pytest.approx(0.010)
    assert b["span_ms"] == pytest.approx(0.1)


def test_empty_window_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="profiled window is empty"):
        cpu_breakdown(ProfileTrace("cpu", [(5, 5)], []))
    with pytest.raises(ValueError, match="accepted: cuda, cpu"):
        ProfileTrace("gpu", [(0, 1)], [])
    with pytest.raises(ValueError, match="at least one step"):
        ProfileTrace("cpu", [], [])


# -- event helpers -----------------------------------------------------------------------------
def test_event_helpers() -> None:
    assert memcpy_direction("Memcpy HtoD (Pageable -> Device)") == "h2d"
    assert memcpy_direction("Memcpy DtoH (Device -> Pinned)") == "d2h"
    assert memcpy_direction("Memcpy DtoD (Device -> Device)") == "d2d"
    assert memcpy_direction("Memset (Device)") == "d2d"
    assert memcpy_direction("void kernel") is None
    assert is_aten_op(op("aten::mm", 0, 1)) and is_aten_op(op("torchvision::nms", 0, 1))
    assert not is_aten_op(op("autograd::engine::evaluate_function: X", 0, 1))
    assert not is_aten_op(op("AddmmBackward0", 0, 1))
    frame = parse_frame("torch/nn/modules/linear.py(124): forward")
    assert (frame.file, frame.line, frame.func) == ("torch/nn/modules/linear.py", 124, "forward")
    assert parse_frame("<built-in method sleep>") is None
    tops = top_level(
        [op("aten::linear", 0, 10), op("aten::addmm", 1, 9), op("aten::relu", 10, 12), op("aten::mm", 2, 3, thread=2)]
    )
    assert [e.name for e in tops] == ["aten::linear", "aten::mm", "aten::relu"]


def test_trace_round_trips_through_plain_dicts() -> None:
    trace = ProfileTrace("cuda", [(0, 10)], [kernel(1, 2), op("aten::mm", 0, 3)], device="cuda:0")
    again = ProfileTrace.from_dict(trace.to_dict())
    assert again.events == trace.events and again.steps == trace.steps and again.kind == "cuda"


def test_step_breakdowns_equal_a_breakdown_over_each_step_window(kineto, tmp_path) -> None:
    from torchgauge.harness.breakdown import step_breakdowns, step_windows
    from torchgauge.harness.trace_import import read_trace

    ev = list(kineto.training_events(4, 20, streams=2, step_us=500.0))
    ev += kineto.launched("void long_kernel()", 10, 300, 900, corr=10_000)  # runs across two steps
    trace = read_trace(kineto.write_trace(tmp_path / "t.json", ev)).traces["cuda:0"]
    fast = step_breakdowns(trace)
    assert len(fast) == 4
    for rec, window in zip(fast, step_windows(trace)):
        slow = breakdown(trace, window)
        assert rec["fractions"] == pytest.approx(slow["fractions"]) and rec["steps"] == 1
