"""The performance-bug finder: planted workloads recorded on CPU, and synthetic CUDA traces.

Every rule gets a positive case (the planted bug is found, with the source line that plants
it) and a negative one (the clean twin triggers no rule at all).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from torchgauge.harness.events import ProfileTrace, TraceEvent
from torchgauge.workflows.diagnose.rules import (
    FOREACH_OPS,
    HEAVY_TRAFFIC_MIN_BYTES,
    IDLE_GAP_US,
    RULES,
    STORM_MIN_REPEATS,
    TINY_COPY_BYTES,
    TINY_OP_US,
    diagnose,
)

FIXTURE = Path("tests/fixtures/planted_perf_bugs.py").resolve()
FIXTURE_LINES = FIXTURE.read_text().splitlines()

# planted model -> (rule it must trigger, operator, text on the reported source line)
PLANTED = {
    "planted_bug_zero_loop": ("launch_storm", "aten::zero_", "g.zero_()"),
    "planted_bug_scalar_tensor": ("tiny_h2d", "aten::lift_fresh", "torch.tensor(float(self.d)"),
    "planted_bug_offload": ("heavy_traffic", "aten::copy_", ".copy_("),
    "planted_bug_sync": ("sync", "aten::item", ".item()"),
    "planted_bug_idle": ("idle_gap", "<built-in function sleep>", "def forward"),
}
CLEAN = [
    "planted_clean_foreach_zero",
    "planted_clean_scalar",
    "planted_clean_resident",
    "planted_clean_nosync",
    "planted_clean_busy",
]
# Attribution corner cases: model -> [(rule, text on the reported line, calls per step), ...], exactly
# (None: at least one; printing makes as many reads as the formatter needs).
CALL_SITES = {
    "planted_bug_print": [("sync", "print(h[0, :4]", None)],
    "planted_bug_loss_item_after_adam": [("sync", "loss.item()", 1)],
    "planted_bug_two_tensor_lines": [("tiny_h2d", "torch.tensor(0.5)", 1), ("tiny_h2d", "torch.tensor([1.0, 2.0])", 1)],
    "planted_bug_tolist": [("sync", ".tolist()", 1)],
    "planted_bug_helper_tensor": [("tiny_h2d", "torch.tensor([0.25, 0.5])", 1), ("tiny_h2d", "torch.tensor(3.0)", 1)],
    "planted_bug_exceptions": [("exception", "h.view(-1, 7)", 32)],
}


@pytest.fixture(scope="module")
def diagnosed():
    """Diagnose every planted model once (about a second in all on CPU)."""
    from torchgauge.registry import get_spec, load_model_file
    from torchgauge.workflows.diagnose import diagnose_model

    load_model_file(FIXTURE)
    out = {}
    for name in [*PLANTED, *CLEAN, *CALL_SITES]:
        mode = get_spec(name).modes[0]
        out[name] = diagnose_model(name, mode, "cpu", size="smoke")
    return out


def _line_of(source: str) -> str:
    path, _, rest = source.partition(":")
    assert Path(path).resolve() == FIXTURE, source
    return FIXTURE_LINES[int(rest.split()[0]) - 1]


@pytest.mark.parametrize("name", list(PLANTED))
def test_planted_bug_is_found_exactly(diagnosed, name) -> None:
    rule, operator, line_text = PLANTED[name]
    findings = diagnosed[name].findings
    assert {f.rule for f in findings} == {rule}, findings
    (f,) = [f for f in findings if f.operator == operator]
    assert f.operator == operator
    assert f.count >= 1 and f.time_ms > 0
    assert line_text in _line_of(f.source), f.source
    assert f.message


def test_zero_loop_counts_every_parameter(diagnosed) -> None:
    from torchgauge.registry import create

    n_params = len(list(create("planted_bug_zero_loop", size="smoke").module.parameters()))
    (f,) = diagnosed["planted_bug_zero_loop"].findings
    assert f.count == n_params
    assert "torch._foreach_zero_" in f.message


def test_sync_finds_item_and_nonzero_on_their_lines(diagnosed) -> None:
    findings = {f.operator: f for f in diagnosed["planted_bug_sync"].findings}
    assert set(findings) == {"aten::item", "aten::nonzero"}
    assert "torch.nonzero" in _line_of(findings["aten::nonzero"].source)
    assert all(f.count == 1 for f in findings.values())


@pytest.mark.parametrize("name", CLEAN)
def test_clean_twin_triggers_no_rule(diagnosed, name) -> None:
    assert diagnosed[name].findings == []


@pytest.mark.parametrize("name", list(CALL_SITES))
def test_one_finding_per_call_site_on_the_users_line(diagnosed, name) -> None:
    found = sorted((f.rule, _line_of(f.source), f.count) for f in diagnosed[name].findings)
    expected = sorted(CALL_SITES[name])
    assert len(found) == len(expected), diagnosed[name].findings
    for (rule, line, count), (want_rule, text, want_count) in zip(found, expected):
        assert rule == want_rule and text in line, (line, text)
        assert count == want_count if want_count is not None else count >= 1
    assert all(f.time_ms > 0 for f in diagnosed[name].findings)


def test_exception_cost_is_measured_from_the_raising_calls() -> None:
    from torchgauge.harness.profile import profile_for_diagnosis
    from torchgauge.registry import create, get_spec, load_model_file

    load_model_file(FIXTURE)
    workload = create("planted_bug_exceptions", mode="eval", size="smoke")
    trace, sites, files = profile_for_diagnosis(workload, 3, builder=get_spec("planted_bug_exceptions").builder)
    (f,) = diagnose(trace, model_files=files, call_lines=sites.lines, raised=sites.raised)
    views = [e for e in trace.events if e.name == "aten::view" and e.step is not None]
    forward = [
        e
        for e in trace.events
        if e.category == "python"
        and e.step is not None
        and e.name.endswith(": forward")
        and "planted_perf_bugs" in e.name
    ]
    # Each failing call costs its operator time (the c10::Error and its backtrace are built
    # inside it) plus the unwinding after it; all of it lies inside the model's forward.
    assert sum(e.duration_us for e in views) / 3e3 <= f.time_ms <= sum(e.duration_us for e in forward) / 3e3
    assert f.count == 32 and "test the condition first" in f.message


def test_no_finding_is_attributed_to_torchgauges_harness(diagnosed) -> None:
    for d in diagnosed.values():
        for f in d.findings:
            assert f.source is None or "torchgauge/" not in f.source.replace("\\", "/"), f


def test_deep_clean_mlp_has_no_finding_across_repeated_runs() -> None:
    from torchgauge.registry import load_model_file
    from torchgauge.workflows.diagnose import diagnose_model

    load_model_file(FIXTURE)
    for _ in range(3):  # the storm rule used to follow the machine's load here
        for mode in ("train", "eval"):
            assert diagnose_model("planted_clean_deep_mlp", mode, "cpu", size="smoke").findings == []


def test_diagnose_modes_skips_an_unsupported_mode_with_one_message() -> None:
    from torchgauge.registry import load_model_file
    from torchgauge.workflows.diagnose import diagnose_modes

    load_model_file(FIXTURE)
    events: list[str] = []
    unsupported: list[str] = []
    (d,) = diagnose_modes(
        "planted_bug_sync",
        ("train", "eval"),
        size="smoke",
        steps=2,
        on_event=events.append,
        on_unsupported=unsupported.append,
    )
    assert (d.mode, d.steps) == ("eval", 2) and any(f.rule == "sync" for f in d.findings)
    assert events == [
        "profiling planted_bug_sync train on cpu (smoke, 2 steps)",
        "profiling planted_bug_sync eval on cpu (smoke, 2 steps)",
    ]
    assert len(unsupported) == 1 and unsupported[0].startswith("planted_bug_sync train: unsupported:")


def _named_apis(message: str) -> list[str]:
    return re.findall(r"torch(?:\.[A-Za-z_]\w*)+", message)


def _resolves(dotted: str) -> bool:
    import torch

    obj = torch
    for part in dotted.split(".")[1:]:
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def test_every_api_a_hint_names_exists(diagnosed) -> None:
    import torch

    assert all(hasattr(torch, name) for name in FOREACH_OPS)
    messages = [f.message for d in diagnosed.values() for f in d.findings]
    # Storm hints for every operator name a single-op storm can carry, plus a non-foreach one.
    for op in [f"aten::{n[len('_foreach_') :]}" for n in FOREACH_OPS] + ["aten::narrow", "aten::as_strided"]:
        trace = ProfileTrace("cpu", [(0, 1e4)], [dataclasses.replace(e, name=op) for e in _storm(STORM_MIN_REPEATS)])
        messages += [f.message for f in diagnose(trace, rules=["launch_storm"])]
    named = {api for m in messages for api in _named_apis(m)}
    assert {"torch._foreach_zero_", "torch.nonzero_static", "torch.tensor"} <= named
    assert [api for api in named if not _resolves(api)] == []


# -- synthetic traces: the CUDA branches and the thresholds ----------------------------------------
def _ev(name, cat, s, e, **kw) -> TraceEvent:
    return TraceEvent(name, cat, s, e, **{"step": 0, **kw})


def _storm(n: int, gap: float = 1.0, dur: float = 2.0) -> list[TraceEvent]:
    out, t = [], 0.0
    for _ in range(n):
        out.append(_ev("aten::zero_", "cpu_op", t, t + dur))
        t += dur + gap
    return out


def test_storm_threshold_is_inclusive_and_needs_tiny_back_to_back_calls() -> None:
    hit = diagnose(ProfileTrace("cpu", [(0, 1e4)], _storm(STORM_MIN_REPEATS)), rules=["launch_storm"])
    assert [f.count for f in hit] == [STORM_MIN_REPEATS]
    assert diagnose(ProfileTrace("cpu", [(0, 1e4)], _storm(STORM_MIN_REPEATS - 1)), rules=["launch_storm"]) == []
    slow = _storm(STORM_MIN_REPEATS, dur=TINY_OP_US * 2)
    assert diagnose(ProfileTrace("cpu", [(0, 1e5)], slow), rules=["launch_storm"]) == []
    spread = _storm(STORM_MIN_REPEATS, gap=5000.0)
    assert diagnose(ProfileTrace("cpu", [(0, 1e6)], spread), rules=["launch_storm"]) == []


def test_storm_finds_a_multi_op_loop_body() -> None:
    events, t = [], 0.0
    for _ in range(STORM_MIN_REPEATS):
        for name in ("aten::mul_", "aten::add_", "aten::add_"):
            events.append(_ev(name, "cpu_op", t, t + 3))
            t += 4
    (f,) = diagnose(ProfileTrace("cpu", [(0, t)], events), rules=["launch_storm"])
    assert f.operator == "aten::mul_ + aten::add_ + aten::add_" and f.count == STORM_MIN_REPEATS


def _cuda_copy(i: int, start: float, nbytes: int, direction: str = "h2d") -> list[TraceEvent]:
    # host op -> runtime call (child) -> device memcpy, linked by the correlation id
    host = [
        _ev("aten::to", "cpu_op", start, start + 20, bytes=nbytes),
        _ev("cudaMemcpyAsync", "runtime", start + 5, start + 15, correlation=100 + i, parent=None),
    ]
    name = {"h2d": "Memcpy HtoD (Pageable -> Device)", "d2h": "Memcpy DtoH (Device -> Pageable)"}[direction]
    dev = _ev(
        name,
        "memcpy",
        start + 16,
        start + 18,
        device="cuda:0",
        thread=7,
        bytes=nbytes,
        direction=direction,
        correlation=100 + i,
    )
    return [*host, dev]


def _linked(events: list[TraceEvent]) -> list[TraceEvent]:
    # Give each runtime call its preceding host op as parent (what profile.py derives from nesting).
    out = []
    for i, e in enumerate(events):
        if e.category == "runtime":
            e = dataclasses.replace(e, parent=i - 1)
        out.append(e)
    return out


def test_cuda_tiny_h2d_copies_are_found_and_large_ones_are_not() -> None:
    tiny = _linked(_cuda_copy(0, 0, 4) + _cuda_copy(1, 100, 8) + _cuda_copy(2, 200, TINY_COPY_BYTES * 64))
    kernels = [_ev("gemm", "kernel", 300, 900, device="cuda:0", thread=7)]
    findings = diagnose(ProfileTrace("cuda", [(0, 1000)], tiny + kernels, device="cuda:0"), rules=["tiny_h2d"])
    assert [(f.operator, f.count) for f in findings] == [("aten::to", 2)]
    assert findings[0].time_ms == pytest.approx(0.040)  # two 20 us host copies per step
    assert (
        diagnose(
            ProfileTrace("cuda", [(0, 1000)], _linked(_cuda_copy(0, 0, TINY_COPY_BYTES + 1)) + kernels),
            rules=["tiny_h2d"],
        )
        == []
    )


def test_cuda_copy_linked_to_its_host_op_without_a_runtime_event() -> None:
    # Kineto may link a device event straight to the launching op (profile.py sets ``parent``).
    events = [
        _ev("aten::copy_", "cpu_op", 0, 30, bytes=4),
        _ev("Memcpy HtoD (Pageable -> Device)", "memcpy", 31, 33, device="cuda:0", bytes=4, direction="h2d", parent=0),
    ]
    (f,) = diagnose(ProfileTrace("cuda", [(0, 100)], events), rules=["tiny_h2d"])
    assert (f.operator, f.count, f.time_ms) == ("aten::copy_", 1, pytest.approx(0.030))


def test_cuda_heavy_traffic_needs_both_bytes_and_time_relative_to_compute() -> None:
    big = HEAVY_TRAFFIC_MIN_BYTES * 4
    copies = [
        _ev("Memcpy HtoD", "memcpy", 0, 400, device="cuda:0", bytes=big, direction="h2d"),
        _ev("Memcpy DtoH", "memcpy", 500, 900, device="cuda:0", bytes=big, direction="d2h"),
    ]
    small_compute = [_ev("gemm", "kernel", 400, 500, device="cuda:0")]
    (f,) = diagnose(ProfileTrace("cuda", [(0, 1000)], copies + small_compute), rules=["heavy_traffic"])
    assert f.count == 2 and f.time_ms == pytest.approx(0.8)
    long_compute = [_ev("gemm", "kernel", 1000, 9000, device="cuda:0")]
    assert diagnose(ProfileTrace("cuda", [(0, 9000)], copies + long_compute), rules=["heavy_traffic"]) == []
    few_bytes = [dataclasses.replace(c, bytes=1024) for c in copies]
    assert diagnose(ProfileTrace("cuda", [(0, 1000)], few_bytes + small_compute), rules=["heavy_traffic"]) == []


def test_cuda_sync_is_attributed_to_the_operator_that_waited() -> None:
    events = [
        _ev("aten::item", "cpu_op", 0, 100),
        _ev("aten::_local_scalar_dense", "cpu_op", 5, 95, parent=0),
        _ev("cudaStreamSynchronize", "sync", 10, 90, parent=1),
        _ev("gemm", "kernel", 0, 95, device="cuda:0"),
    ]
    (f,) = diagnose(ProfileTrace("cuda", [(0, 100)], events), rules=["sync"])
    assert (f.operator, f.count, f.time_ms) == ("aten::item", 1, pytest.approx(0.08))
    no_sync = [e for e in events if e.category != "sync"]
    assert diagnose(ProfileTrace("cuda", [(0, 100)], no_sync), rules=["sync"]) == []


def test_cuda_idle_gap_on_the_device_timeline_recurring_every_step() -> None:
    gap = IDLE_GAP_US * 2
    events, steps, t = [], [], 0.0
    for i in range(3):
        events.append(_ev("gemm", "kernel", t, t + 500, device="cuda:0", step=i))
        events.append(_ev("time.sleep", "python", t + 500, t + 500 + gap, step=i))
        steps.append((t, t + 500 + gap))
        t += 500 + gap
    (f,) = diagnose(ProfileTrace("cuda", steps, events), rules=["idle_gap"])
    assert f.operator == "time.sleep" and f.count == 1 and f.time_ms == pytest.approx(gap / 1e3)
    # A single pause in one of three steps is noise, not a bug in the step.
    once = [e for e in events if not (e.category == "python" and e.step > 0)]
    once += [_ev("gemm", "kernel", s + 500, e, device="cuda:0", step=i) for i, (s, e) in enumerate(steps) if i > 0]
    assert diagnose(ProfileTrace("cuda", steps, once), rules=["idle_gap"]) == []


def test_unknown_rule_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown rule 'bogus'; accepted: " + ", ".join(RULES)):
        diagnose(ProfileTrace("cpu", [(0, 1)], []), rules=["bogus"])
