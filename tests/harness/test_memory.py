"""Memory probe: fields present, windowed peak sees an allocation, env capture."""

from __future__ import annotations

import os

from torchgauge.harness import memory
from torchgauge.harness.env import collect_env, machine_fingerprint


def test_probe_reports_cpu_fields() -> None:
    probe = memory.MemoryProbe("cpu")
    probe.start()
    blob = bytearray(64 * 1024 * 1024)  # touched on allocation: resident
    out = probe.read()
    del blob
    assert {"cpu_peak_mb", "cpu_delta_mb", "cpu_baseline_mb", "cpu_peak_windowed"} <= set(out)
    assert out["cpu_peak_mb"] >= out["cpu_baseline_mb"]
    assert "gpu_peak_mb" not in out
    if out["cpu_peak_windowed"]:
        assert out["cpu_peak_mb"] - memory.current_rss_mb() > 30  # the freed 64 MiB was seen at its peak


def test_pid_rss_of_self_and_of_dead_pid() -> None:
    assert memory.pid_rss_mb(os.getpid()) > 10
    assert memory.pid_rss_mb(2**22 + 12345) is None


def test_env_has_the_fields_results_need() -> None:
    env = collect_env()
    for key in (
        "torch_version",
        "torch_git_version",
        "python_version",
        "cpu_model",
        "cpu_count",
        "hostname",
        "gpu_name",
        "torchgauge_version",
        "machine_fingerprint",
    ):
        assert key in env
    assert env["machine_fingerprint"] == machine_fingerprint(env)
    assert machine_fingerprint({**env, "cpu_count": 999}) != env["machine_fingerprint"]


def test_fingerprint_is_the_hardware_not_the_hostname() -> None:
    env = collect_env()
    assert isinstance(env["memory_gib"], float) and env["memory_gib"] > 0
    assert machine_fingerprint({**env, "hostname": "another-runner"}) == env["machine_fingerprint"]
    for key, value in (("cpu_model", "Other CPU"), ("memory_gib", 1.0), ("gpu_name", "GPU Z"), ("gpu_driver", "999.1")):
        assert machine_fingerprint({**env, key: value}) != env["machine_fingerprint"], key
