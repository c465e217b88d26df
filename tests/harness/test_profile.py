"""The profiled pass on CPU: step spans, plain records, stacks, call lines, trace export."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from torchgauge.harness.breakdown import breakdown
from torchgauge.harness.profile import profile_steps, record_call_lines, trace_file_path


def _step_fn():
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)

    def step():
        y = lin(x).relu().sum()
        y.backward()
        return y.detach()

    return step


def test_profile_returns_plain_records_with_step_spans(tmp_path) -> None:
    path = tmp_path / "t.json"
    trace = profile_steps(_step_fn(), "cpu", 3, with_stack=True, trace_path=path)
    assert trace.kind == "cpu" and len(trace.steps) == 3 and trace.trace_path == str(path)
    assert all(s < e for s, e in trace.steps) and trace.steps == sorted(trace.steps)
    ops = [e for e in trace.events if e.category == "cpu_op" and e.step is not None]
    assert {e.step for e in ops} == {0, 1, 2}
    for name in ("aten::addmm", "aten::relu", "aten::threshold_backward"):
        assert sum(e.name == name for e in ops) == 3  # once per step
    relu = next(e for e in ops if e.name == "aten::relu")
    assert any("_step_fn" in f or "step" in f for f in relu.stack)  # Python frames, innermost first
    assert isinstance(relu.shapes, tuple) and relu.shapes[0] == (2, 4)
    assert all(type(v) in (str, int, float, tuple, type(None)) for v in dataclasses.astuple(relu))
    assert json.loads(path.read_text())["traceEvents"]
    b = breakdown(trace)
    assert b["steps"] == 3 and sum(b["fractions"].values()) == pytest.approx(1.0)


def test_without_stack_no_python_events_are_recorded() -> None:
    trace = profile_steps(_step_fn(), "cpu", 1)
    assert not any(e.category == "python" for e in trace.events)
    assert len(trace.steps) == 1


def test_copy_ops_record_their_bytes() -> None:
    src, dst = torch.randn(256), torch.empty(256)
    trace = profile_steps(lambda: dst.copy_(src), "cpu", 1)
    (copy,) = [e for e in trace.events if e.name == "aten::copy_" and e.step == 0]
    assert copy.bytes == 256 * 4


def test_record_call_lines_maps_function_start_to_call_line() -> None:
    x = torch.randn(4)

    def step():
        y = x * 2
        return y.sum()

    lines = record_call_lines(step)
    first = step.__code__.co_firstlineno
    (mul,) = [v for (op, _, f), v in lines.items() if op == "aten::mul" and f == first]
    assert mul == {first + 1: 1}


def test_trace_file_path_uses_safe_characters(tmp_path) -> None:
    path = trace_file_path(tmp_path / "new", "hf_T5/eval/cuda:0/fp16/inductor (max autotune)")
    assert path.parent.is_dir()
    assert path.name == "hf_T5-eval-cuda_0-fp16-inductor_max_autotune.pt.trace.json"


def test_bad_step_count_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="accepted: an integer >= 1"):
        profile_steps(lambda: None, "cpu", 0)


def test_breakdown_metric_through_measure() -> None:
    from torchgauge.measurement import measure
    from torchgauge.registry import create, load_model_file

    load_model_file("tests/fixtures/planted_models.py")
    record = measure(create("planted_ok", mode="eval", size="smoke"), repeat=2, warmup=1, metrics=("time", "breakdown"))
    b = record.metrics["breakdown"]
    assert b["kind"] == "cpu" and b["ops"] > 0 and "trace" not in b
    assert sum(b["fractions"].values()) == pytest.approx(1.0)
