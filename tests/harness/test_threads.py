"""Thread settings are applied, recorded with the machine's load, and flag oversubscription."""

from __future__ import annotations

import os

import pytest
import torch

from torchgauge.harness.threads import (
    CpuSnapshot,
    ThreadSettings,
    apply_thread_settings,
    cpu_snapshot,
    others_busy_cpus,
    parse_threads,
    thread_record,
)


def test_parse_threads_accepts_counts_and_all() -> None:
    assert parse_threads("1") == 1 and parse_threads(3) == 3
    assert parse_threads("all") is None and parse_threads(None) is None
    for bad in ("0", "-2", "two"):
        with pytest.raises(ValueError, match="accepted: a positive integer, or 'all'"):
            parse_threads(bad)


def test_others_busy_subtracts_our_own_cpu_time() -> None:
    start = CpuSnapshot(wall_s=0.0, machine_busy_s=100.0, own_cpu_s=1.0, load_avg=1.0)
    # 2 s of wall time, 3 CPU-seconds busy machine-wide, 1 of them ours: 1 CPU busy elsewhere
    end = CpuSnapshot(wall_s=2.0, machine_busy_s=103.0, own_cpu_s=2.0, load_avg=1.0)
    assert others_busy_cpus(start, end) == 1.0
    assert others_busy_cpus(start, CpuSnapshot(0.01, 100.5, 1.0, 1.0)) is None  # too short to read
    assert others_busy_cpus(CpuSnapshot(0.0, None, 0.0, None), end) is None  # no /proc/stat


def test_thread_record_marks_an_oversubscribed_measurement() -> None:
    cpus = len(os.sched_getaffinity(0))
    start = CpuSnapshot(0.0, 0.0, 0.0, 0.0)
    crowded = CpuSnapshot(1.0, float(cpus), 0.0, float(cpus))  # every CPU busy with other work
    record = thread_record(start, crowded, CpuSnapshot(2.0, 2.0 * cpus, 0.0, float(cpus)))
    assert record["intra_op"] == torch.get_num_threads() and record["inter_op"] == torch.get_num_interop_threads()
    assert record["others_busy_start"] == record["others_busy_timed"] == cpus
    assert record["oversubscribed"] is True and record["affinity"] == sorted(os.sched_getaffinity(0))
    quiet = thread_record(start, CpuSnapshot(1.0, 0.0, 0.0, 0.0), CpuSnapshot(2.0, 0.0, 0.0, 0.0))
    assert quiet["oversubscribed"] is False


def test_thread_record_keeps_the_allocator_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    snap = CpuSnapshot(0.0, 0.0, 0.0, 0.0)
    env = thread_record(snap, snap, snap)["env"]
    assert env["MALLOC_TRIM_THRESHOLD_"] == "0" and "LD_PRELOAD" not in env


def test_apply_thread_settings_sets_torch_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    saved = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    try:
        apply_thread_settings(ThreadSettings(intra_op=1))
        assert torch.get_num_threads() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    finally:
        torch.set_num_threads(saved)
    with pytest.raises(ValueError, match="thread counts must be >= 1"):
        ThreadSettings(intra_op=0)


def test_snapshot_reads_this_machine() -> None:
    snap = cpu_snapshot()
    assert snap.own_cpu_s >= 0 and snap.wall_s > 0
    if os.path.exists("/proc/stat"):
        assert snap.machine_busy_s is not None and snap.machine_busy_s > 0
