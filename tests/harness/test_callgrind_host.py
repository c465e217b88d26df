"""The callgrind host: one valgrind process per run that forks a counting child per request.

The protocol, the fallbacks and the runner's wiring are tested without valgrind (a fake host
speaks the protocol); one slow test starts a real host (about 30 s of CPU under valgrind).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from torchgauge.config import RunConfig
from torchgauge.harness import callgrind_host as cgh
from torchgauge.harness import instructions as ins
from torchgauge.registry import load_model_file
from torchgauge.results.schema import RunRecord
from torchgauge.runner.options import RunnerOptions
from torchgauge.runner.suite_loop import _instruction_counter
from torchgauge.workload import UnsupportedError

MODELS = "tests/harness/counting_models.py"
REQUEST = {"run": {}, "steps": [2, 3], "model_file": None}


@pytest.mark.skipif(not cgh.host_supported(), reason="client requests from Python are x86-64 Linux only")
def test_client_request_runs_natively_and_answers_not_on_valgrind() -> None:
    # The magic sequence is a no-op outside valgrind: the default result (0) comes back.
    assert cgh.client_request(cgh.RUNNING_ON_VALGRIND) == 0
    assert cgh.client_request(cgh.START_INSTRUMENTATION, 1, 2) == 0


def _fake_host(tmp_path: Path, replies: list[dict]) -> tuple[str, list[dict]]:
    """A socket speaking the host's protocol: one connection, the given reply lines, requests kept."""
    address = str(tmp_path / "host.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(1)
    received: list[dict] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            received.append(json.loads(conn.makefile("r").readline()))
            for reply in replies:
                conn.sendall((json.dumps(reply) + "\n").encode())
            if replies and "dumps" not in replies[-1] and "error" not in replies[-1]:
                conn.recv(1)  # hold the connection open: the client must time out
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return address, received


def test_request_count_reads_and_removes_each_dump(tmp_path: Path) -> None:
    dumps = []
    for i, total in enumerate((1200, 2400), start=1):
        path = tmp_path / f"callgrind.out.77.{i}"
        path.write_text(f"events: Ir\nsummary: {total}\n")
        dumps.append(str(path))
    address, received = _fake_host(tmp_path, [{"pid": 77}, {"dumps": dumps}])
    assert cgh.request_count(address, REQUEST, timeout_s=30) == [1200, 2400]
    assert received == [REQUEST]
    assert not any(Path(p).exists() for p in dumps)


def test_a_failed_child_is_an_error_with_its_traceback(tmp_path: Path) -> None:
    address, _ = _fake_host(tmp_path, [{"pid": 77}, {"error": "KeyError: 'no model named nope'"}])
    with pytest.raises(RuntimeError, match="callgrind child failed:\nKeyError: 'no model named nope'"):
        cgh.request_count(address, REQUEST, timeout_s=30)


def test_a_child_past_its_time_is_killed(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    address, _ = _fake_host(tmp_path, [{"pid": child.pid}])
    with pytest.raises(RuntimeError, match="did not finish within 1 s"):
        cgh.request_count(address, REQUEST, timeout_s=1)
    assert child.wait(10) == -signal.SIGKILL


def test_an_unreachable_host_is_a_connection_error(tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match="callgrind host at"):
        cgh.request_count(str(tmp_path / "gone.sock"), REQUEST, timeout_s=5)


class _FakeHost:
    started: list[dict] = []

    def __init__(self, valgrind: str, env: dict, timeout_s: float = 1.0) -> None:
        if valgrind == "broken":
            raise RuntimeError("the host died at start")
        self.address = "/tmp/fake-host.sock"
        _FakeHost.started.append(env)
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _wire(monkeypatch, valgrind: str = "/usr/bin/valgrind") -> None:
    monkeypatch.setattr(cgh, "CallgrindHost", _FakeHost)
    monkeypatch.setattr(cgh, "host_supported", lambda: True)
    monkeypatch.setattr(ins, "find_valgrind", lambda: valgrind)
    _FakeHost.started = []


def test_a_run_that_counts_instructions_shares_one_host(monkeypatch) -> None:
    _wire(monkeypatch)
    configs = [RunConfig("dlrm", metrics=("time", "instructions")), RunConfig("resnet18", metrics=("instructions",))]
    base = RunnerOptions(worker_env=(("A", "1"),))
    with _instruction_counter(configs, base) as options:
        assert dict(options.worker_env) == {"A": "1", cgh.HOST_ENV: "/tmp/fake-host.sock"}
        assert options.timeout_s == base.timeout_s
    assert len(_FakeHost.started) == 1
    assert _FakeHost.started[0]["OMP_NUM_THREADS"] == "1"  # the counting child's environment


@pytest.mark.parametrize(
    ("configs", "isolate"),
    [
        ([RunConfig("dlrm", metrics=("time",))], True),  # nothing to count
        ([RunConfig("dlrm", metrics=("instructions",), device="cuda")], True),  # not on the CPU
        ([RunConfig("dlrm", metrics=("instructions",))], False),  # in-process: no workers to serve
    ],
)
def test_no_host_without_cpu_instruction_runs_in_workers(monkeypatch, configs, isolate) -> None:
    _wire(monkeypatch)
    base = RunnerOptions(isolate=isolate)
    with _instruction_counter(configs, base) as options:
        assert options is base
    assert _FakeHost.started == []


def test_no_host_without_valgrind(monkeypatch) -> None:
    _wire(monkeypatch)

    def missing() -> str:
        raise UnsupportedError("instructions needs valgrind (callgrind) on PATH")

    monkeypatch.setattr(ins, "find_valgrind", missing)
    base = RunnerOptions()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # quietly: each run's record says why it was not counted
        with _instruction_counter([RunConfig("dlrm", metrics=("instructions",))], base) as options:
            assert options is base
    assert _FakeHost.started == []


def test_a_host_that_fails_to_start_leaves_each_run_its_own(monkeypatch) -> None:
    _wire(monkeypatch, valgrind="broken")
    base = RunnerOptions()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _instruction_counter([RunConfig("dlrm", metrics=("instructions",))], base) as options:
            assert options is base
    assert any("no shared callgrind host (the host died at start)" in str(w.message) for w in caught)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(not cgh.host_supported(), reason="client requests from Python are x86-64 Linux only")
def test_a_real_host_counts_each_request_in_a_fresh_child_and_leaves_nothing() -> None:
    load_model_file(MODELS)
    config = RunConfig(model="counting_matmul", mode="eval", size="smoke", warmup=20)
    request = {"run": RunRecord(config, "ok").to_dict(), "steps": [10], "model_file": str(Path(MODELS).resolve())}
    with cgh.CallgrindHost(ins.find_valgrind(), ins.child_env()) as host:
        (first,) = cgh.request_count(host.address, request, timeout_s=600)
        (second,) = cgh.request_count(host.address, request, timeout_s=600)
        bad = {**request, "run": RunRecord(config.with_(model="no_such_model"), "ok").to_dict()}
        with pytest.raises(RuntimeError, match="no_such_model"):
            cgh.request_count(host.address, bad, timeout_s=600)
        pgid = host._proc.pid
    assert first > 0
    assert abs(second - first) / first <= 2 * ins.INSTRUCTIONS_SPREAD  # children start from the same state
    with pytest.raises(ProcessLookupError):  # the host's process group is gone
        os.killpg(pgid, 0)
