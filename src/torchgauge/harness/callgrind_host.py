"""One callgrind process per suite run that counts every configuration's instructions.

Starting Python and importing torch under valgrind is most of what the ``instructions``
metric costs at smoke size: 44-52 s of a configuration's 44-52 s (dlrm and resnet18 eval,
load ~1). A :class:`CallgrindHost` pays it once per ``run``: the runner starts one valgrind
process (``--instr-atstart=no``: plain valgrind speed until a child asks for more) that imports
torch and torchgauge and then forks a child per request. Each child is a fresh copy of that
process, as isolated as a worker: it rebuilds the configuration, warms up, switches callgrind's
instrumentation on for itself with a client request (:func:`client_request`), and counts the
steps exactly as the standalone child does (:func:`torchgauge.harness.instructions.count_steps`).

Requests come from the workers over a Unix socket whose path the runner puts in the workers'
environment (:data:`HOST_ENV`). A worker whose host is gone falls back to the standalone child.
The host exits when the runner closes it or dies; each child dies with the host
(``PR_SET_PDEATHSIG``) and with its client's connection.

Client requests are valgrind's "magic" instruction sequence (``valgrind.h``); torch exposes only
the toggle and dump ones, so :func:`client_request` runs the sequence from a small executable
buffer. It is written for x86-64 Linux; elsewhere the standalone child is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

__all__ = ["HOST_ENV", "CallgrindHost", "client_request", "host_supported", "request_count"]

# The workers' environment variable naming the host's socket.
HOST_ENV = "TORCHGAUGE_CALLGRIND_HOST"
# How long the runner waits for the host to import torch under valgrind (minutes on a loaded 2-core machine).
HOST_START_TIMEOUT_S = 900.0
# valgrind.h: VG_USERREQ__RUNNING_ON_VALGRIND; callgrind.h: VG_USERREQ_TOOL_BASE('C','T') + 4.
RUNNING_ON_VALGRIND = 0x1001
START_INSTRUMENTATION = 0x43540004
# push rbx; mov rax,rdi (the request's argument block); xor edx,edx (result when not on valgrind);
# the preamble rol rdi,3/13/61/51 (a no-op natively: 128 bits of rotation); xchg rbx,rbx (the
# request); mov rax,rdx; pop rbx; ret.
_X86_64_REQUEST = bytes.fromhex("53 4889f8 31d2 48c1c703 48c1c70d 48c1c73d 48c1c733 4887db 4889d0 5b c3")
_request_fn = None


def host_supported() -> bool:
    """Client requests from Python are implemented for x86-64 Linux only."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


def client_request(code: int, *args: int) -> int:
    """Run valgrind client request ``code`` with up to five arguments; 0 when not on valgrind."""
    global _request_fn
    import ctypes
    import mmap

    if not host_supported():
        raise OSError(f"valgrind client requests from Python need x86-64 Linux, not {platform.machine()}")
    if _request_fn is None:
        buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        buf.write(_X86_64_REQUEST)
        address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        _request_fn = (ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p)(address), buf)
    block = (ctypes.c_uint64 * 6)(code, *args, *([0] * (5 - len(args))))
    return int(_request_fn[0](ctypes.addressof(block)))


class CallgrindHost:
    """The valgrind process that serves a run's instruction counts (a context manager).

    ``env`` is the child environment of the standalone path (one thread, fixed hash seed);
    ``address`` is the socket to put in the workers' :data:`HOST_ENV`.
    """

    def __init__(self, valgrind: str, env: dict[str, str], timeout_s: float = HOST_START_TIMEOUT_S) -> None:
        self._dir = tempfile.mkdtemp(prefix="torchgauge-cghost-")
        self.address = os.path.join(self._dir, "host.sock")
        self.out_pattern = os.path.join(self._dir, "callgrind.out")
        cmd = [
            valgrind,
            "--tool=callgrind",
            "--collect-atstart=no",
            "--instr-atstart=no",
            "--dump-line=no",
            f"--callgrind-out-file={self.out_pattern}.%p",
            sys.executable,
            "-c",
            "from torchgauge.harness.callgrind_host import host_main; host_main()",
            self.address,
        ]
        log = open(os.path.join(self._dir, "host.log"), "wb")  # noqa: SIM115 - closed in close()
        self._log = log
        self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(self.address + ".ready"):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                tail = self._tail()
                self.close()
                raise RuntimeError(f"instructions: the callgrind host did not start:\n{tail}")
            time.sleep(0.2)

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(Path(self._dir, "host.log").read_text(errors="replace").splitlines()[-15:])
        return ""

    def close(self) -> None:
        """Stop the host and its children; remove its files."""
        import shutil

        group = self._proc.pid  # the host leads its own group: its children are in it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        deadline = time.monotonic() + 10.0
        with contextlib.suppress(ProcessLookupError):  # until the last child is gone
            while time.monotonic() < deadline:
                os.killpg(group, 0)
                time.sleep(0.05)
            os.killpg(group, signal.SIGKILL)
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> CallgrindHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request_count(address: str, request: dict[str, Any], timeout_s: float) -> list[int]:
    """Count ``request`` (the standalone child's request dict) in a fresh child of the host.

    Raises ConnectionError when the host cannot be reached (the caller falls back), RuntimeError
    when the child failed or ran out of time (the child is killed).
    """
    from .instructions import parse_callgrind_total

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(address)
        except OSError as exc:
            raise ConnectionError(f"callgrind host at {address}: {exc}") from exc
        sock.settimeout(timeout_s)
        reader = sock.makefile("r")
        sock.sendall((json.dumps(request) + "\n").encode())
        pid = None
        try:
            pid = json.loads(reader.readline() or "{}").get("pid")
            reply = json.loads(reader.readline() or "{}")
        except (TimeoutError, socket.timeout):  # noqa: UP041 - socket.timeout is TimeoutError from 3.10
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise RuntimeError(f"instructions: the callgrind child did not finish within {timeout_s:.0f} s") from None
        if pid is None:
            raise ConnectionError(f"callgrind host at {address} closed the connection")
        if "error" in reply or "dumps" not in reply:
            raise RuntimeError(f"instructions: the callgrind child failed:\n{reply.get('error', 'no reply')}")
    counts = []
    for path in reply["dumps"]:
        counts.append(parse_callgrind_total(Path(path).read_text()))
        Path(path).unlink(missing_ok=True)
    return counts


def host_main() -> None:
    """The valgrind process: import once, then serve each connection in a forked child."""
    import torch

    from . import instructions  # noqa: F401 - with torchgauge's configure/registry: imported once here

    torch.set_num_threads(1)
    address = sys.argv[1]
    out_pattern = os.path.join(os.path.dirname(address), "callgrind.out")
    parent = os.getppid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(address)
    server.listen(16)
    server.settimeout(1.0)
    Path(address + ".ready").touch()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    while os.getppid() == parent:  # the runner died: leave
        _reap(out_pattern)
        try:
            conn, _ = server.accept()
        except (TimeoutError, socket.timeout):  # noqa: UP041
            continue
        pid = os.fork()
        if pid == 0:
            server.close()
            _serve(conn, out_pattern)
            os._exit(0)
        conn.close()


def _reap(out_pattern: str) -> None:
    """Collect finished children and remove their exit dumps (the counted ones the clients took)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        Path(f"{out_pattern}.{pid}").unlink(missing_ok=True)


def _serve(conn: socket.socket, out_pattern: str) -> None:
    """One child: count the request, reply with its dump files or the error's traceback."""
    import ctypes

    from .instructions import count_steps

    with contextlib.suppress(OSError, AttributeError):  # die with the host
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    conn.settimeout(None)
    reader = conn.makefile("r")
    request = json.loads(reader.readline())
    conn.sendall((json.dumps({"pid": os.getpid()}) + "\n").encode())
    threading.Thread(target=_die_with_client, args=(conn,), daemon=True).start()
    try:
        count_steps(request, lambda: client_request(START_INSTRUMENTATION))
        dumps = [f"{out_pattern}.{os.getpid()}.{i}" for i in range(1, len(request["steps"]) + 1)]
        reply: dict[str, Any] = {"dumps": dumps}
    except BaseException as exc:  # the model's error goes to the worker's record
        reply = {"error": "".join(traceback.format_exception(exc))[-3000:]}
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(reply) + "\n").encode())


def _die_with_client(conn: socket.socket) -> None:
    """A worker that timed out or was killed closes its end: stop counting for it."""
    with contextlib.suppress(OSError):
        conn.recv(1, socket.MSG_PEEK)  # returns b"" only when the client has closed
    os._exit(3)
