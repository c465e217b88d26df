"""Offline analysis of trace files: the bug rules on a device trace with Python stacks, the real
traces end to end, and a trace written by torchgauge's own profiler read back."""

from __future__ import annotations

import pytest

from torchgauge.workflows.trace_analysis import analyse_trace_file, diagnose_trace_file

STEPS = 3
STEP_US = 10_000.0
STORM = 32


def _gpu_step(kineto, s: int, corr: int) -> tuple[list[dict], int]:
    """One training step with four planted problems, each under a Python frame of model.py."""
    t0 = s * STEP_US
    ev = [kineto.step(s, t0, STEP_US)]
    # (a) 32 zero_() calls back to back, each launching a 2 us kernel
    ev.append(kineto.host_op("model.py(10): train_step", t0 + 10, 400, cat="python_function"))
    for i in range(STORM):
        ts = t0 + 20 + i * 10
        ev.append(kineto.host_op("aten::zero_", ts, 6))
        ev += kineto.launched("void at::native::fill_kernel<float>()", ts + 1, ts + 5, 2, corr=corr)
        corr += 1
    # (b) a tiny host-to-device copy (8 bytes) built every step
    ev.append(kineto.host_op("model.py(20): forward", t0 + 500, 100, cat="python_function"))
    ev.append(kineto.host_op("aten::to", t0 + 510, 40))
    ev += kineto.launched(
        "Memcpy HtoD (Pageable -> Device)", t0 + 515, t0 + 530, 2, corr=corr, cat="gpu_memcpy", bytes=8
    )
    corr += 1
    # (d) .item(): a device-to-host copy and a stream synchronisation
    ev.append(kineto.host_op("model.py(30): forward", t0 + 700, 300, cat="python_function"))
    ev.append(kineto.host_op("aten::item", t0 + 710, 250))
    ev.append(kineto.host_op("aten::_local_scalar_dense", t0 + 715, 240))
    ev += kineto.launched(
        "Memcpy DtoH (Device -> Pageable)", t0 + 720, t0 + 900, 3, corr=corr, cat="gpu_memcpy", bytes=4
    )
    ev.append(kineto.host_op("cudaStreamSynchronize", t0 + 730, 200, cat="cuda_runtime", correlation=corr + 1))
    corr += 2
    # (e) 3 ms of host work with the device idle, then the real compute (a 5 ms kernel)
    ev.append(kineto.host_op("model.py(40): prepare_batch", t0 + 1000, 3000, cat="python_function"))
    ev.append(kineto.host_op("aten::mm", t0 + 4100, 20))
    ev += kineto.launched("void gemm_kernel<float>()", t0 + 4105, t0 + 4200, 5000, corr=corr)
    return ev, corr + 1


def _planted_gpu_trace(kineto, path):
    events, corr = [], 1
    for s in range(STEPS):
        step_events, corr = _gpu_step(kineto, s, corr)
        events += step_events
    return kineto.write_trace(path, events, gz=True, distributedInfo={"rank": 0})


def test_gpu_trace_rules_give_count_time_per_step_and_source_line(kineto, tmp_path) -> None:
    (d,) = diagnose_trace_file(_planted_gpu_trace(kineto, tmp_path / "planted.json.gz"))
    assert (d.device, d.steps) == ("cuda:0", STEPS)
    found = {f.rule: f for f in d.findings}
    assert set(found) == {"launch_storm", "tiny_h2d", "sync", "idle_gap"}, d.findings
    storm, copy, sync, idle = found["launch_storm"], found["tiny_h2d"], found["sync"], found["idle_gap"]
    assert (storm.operator, storm.count) == ("aten::zero_", STORM)
    assert storm.source.startswith("model.py:10 in train_step")
    assert storm.time_ms == pytest.approx((STORM * 10 - 4) / 1e3)  # the storm's span: all calls are tiny
    assert (copy.operator, copy.count, copy.time_ms) == ("aten::to", 1, pytest.approx(0.040))
    assert copy.source.startswith("model.py:20 in forward")
    assert (sync.operator, sync.count, sync.time_ms) == ("aten::item", 1, pytest.approx(0.200))
    assert sync.source.startswith("model.py:30 in forward")
    assert idle.count == 1 and idle.source.startswith("model.py:40 in prepare_batch")
    assert idle.operator == "model.py(40): prepare_batch"
    assert 3.0 <= idle.time_ms <= 3.5  # the host work, plus the launch before the kernel starts


def test_gpu_trace_breakdown_per_step_and_kernel_tables(kineto, tmp_path) -> None:
    (a,) = analyse_trace_file(_planted_gpu_trace(kineto, tmp_path / "planted.json.gz"), top=3)
    assert a.breakdown["kind"] == "cuda" and a.breakdown["steps"] == STEPS and len(a.per_step) == STEPS
    for s in a.per_step:
        assert sum(s["fractions"].values()) == pytest.approx(1.0)
    assert [r["kernels"] for r in a.launches] == [STORM + 1] * STEPS
    assert [r["memcpy"] for r in a.launches] == [2] * STEPS
    assert a.top_kernels[0].name == "void gemm_kernel<float>()" and a.top_kernels[0].calls == STEPS
    assert a.kernel_types["compute"]["count"] == STEPS * (STORM + 1)
    assert a.kernel_types["memory"]["count"] == STEPS * 2


def test_every_real_trace_is_diagnosed_and_analysed(gpu_traces) -> None:
    for path in sorted(gpu_traces.glob("*.json.gz")):
        for d in diagnose_trace_file(path):
            assert all(f.count > 0 and f.time_ms >= 0 for f in d.findings), path.name
        for a in analyse_trace_file(path):
            assert a.breakdown["span_ms"] > 0, path.name


def test_real_training_trace_finds_its_step_syncs(gpu_traces) -> None:
    (d,) = diagnose_trace_file(gpu_traces / "cuda-a100-training-rank3.json.gz")
    syncs = {f.operator: f for f in d.findings if f.rule == "sync"}
    # .item() reaches the profiler as aten::item around a blocking runtime call: 3 per step.
    assert syncs["aten::item"].count == 3 and syncs["aten::item"].time_ms > 0


def test_trace_written_by_torchgauges_profiler_reads_back_the_same(tmp_path) -> None:
    import torch

    from torchgauge.harness.breakdown import breakdown
    from torchgauge.harness.profile import profile_steps

    x = torch.randn(64, 64)
    path = tmp_path / "cpu.pt.trace.json"
    live = profile_steps(lambda: (x @ x).relu().sum(), "cpu", steps=3, trace_path=path)
    (a,) = analyse_trace_file(path)
    assert a.platform == "cpu" and a.steps_annotated and a.breakdown["steps"] == 3
    ours, theirs = a.breakdown, breakdown(live)
    assert ours["ops"] == theirs["ops"]
    assert ours["fractions"]["aten"] == pytest.approx(theirs["fractions"]["aten"], abs=0.02)


def test_map_trace_files_concatenates_per_device_results_and_names_a_bad_file(tmp_path) -> None:
    from torchgauge.workflows.trace_analysis import TraceFileError, map_trace_files

    assert map_trace_files(["a", "b"], lambda path: [f"{path}:0", f"{path}:1"]) == ["a:0", "a:1", "b:0", "b:1"]
    bad = tmp_path / "bad.json"
    bad.write_text("not a trace")
    with pytest.raises(TraceFileError, match="bad.json.*accepted: Chrome trace JSON"):
        map_trace_files([bad], diagnose_trace_file)
    with pytest.raises(TraceFileError, match="missing.json"):
        map_trace_files([tmp_path / "missing.json"], analyse_trace_file)
