"""Whole-core claims: disjoint, all or nothing, released when the holder ends or dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchgauge.executors.cpu_cores import CORE_LOCK_DIR_ENV, CoresUnavailable, claim_cores

CORES = len(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(CORE_LOCK_DIR_ENV, str(tmp_path / "locks"))


def test_claims_are_disjoint_and_released() -> None:
    with claim_cores(1, timeout_s=1) as first:
        if CORES > 1:
            with claim_cores(CORES - 1, timeout_s=1) as rest:
                assert not set(first) & set(rest) and len(set(first) | set(rest)) == CORES
        with pytest.raises(CoresUnavailable, match=f"for {CORES} free cores"):
            with claim_cores(CORES, timeout_s=0.3):
                pass
    with claim_cores(CORES, timeout_s=1) as everything:  # all released on exit
        assert len(everything) == CORES


def test_a_failed_claim_holds_nothing() -> None:
    with claim_cores(1, timeout_s=1):
        with pytest.raises(CoresUnavailable):
            with claim_cores(CORES, timeout_s=0.3):
                pass
        if CORES > 1:  # the partial claim was dropped: the other cores are free
            with claim_cores(CORES - 1, timeout_s=0.3) as rest:
                assert len(rest) == CORES - 1


def test_more_cores_than_the_machine_is_one_line() -> None:
    with pytest.raises(CoresUnavailable, match=rf"cannot claim {CORES + 1} cores; this machine offers {CORES}"):
        with claim_cores(CORES + 1, timeout_s=1):
            pass


def test_a_dead_holder_releases_its_cores(tmp_path) -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    script = textwrap.dedent(f"""
        import time
        from torchgauge.executors.cpu_cores import claim_cores
        with claim_cores({CORES}, timeout_s=5):
            print("held", flush=True)
            time.sleep(60)
    """)
    env = dict(os.environ, PYTHONPATH=src)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(CoresUnavailable):
            with claim_cores(1, timeout_s=0.3):
                pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        with claim_cores(CORES, timeout_s=5) as cores:
            assert len(cores) == CORES
    finally:
        if proc.poll() is None:
            proc.kill()
