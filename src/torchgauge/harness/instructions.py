"""``instructions`` metric: executed CPU instructions per step, counted by valgrind callgrind.

Instruction counts hardly move with machine load, so a noisy CI runner can gate on them
with a plain threshold (``stats/deterministic.py``; issue 9, item 5). The price is speed:
under callgrind a step runs 50-100x slower, so at full size use it for a subset of models
and for bisection, and raise the runner's ``--timeout`` accordingly; at smoke size a whole
suite is affordable (the nightly's ``cpu-instructions`` job).

How it runs (the technique of ``torch.utils.benchmark.Timer.collect_callgrind``, which
cannot take a built workload): the current process cannot be put under valgrind, so the
configuration is rebuilt from its :class:`RunConfig` (same registry, seed, shapes, precision
and backend) in a process under valgrind: it runs ``config.warmup`` untraced steps, then for each
requested step count toggles collection on around exactly those steps and dumps the counter
(``torch._C._valgrind_toggle_and_dump_stats``). The totals are the ``Ir`` events of each dump.
On x86-64 Linux that process is a child forked from a callgrind host
(:mod:`~torchgauge.harness.callgrind_host`): valgrind starts uninstrumented, imports Python,
torch and torchgauge once, and each child switches instrumentation on for itself (a client
request) only before its counted steps. A suite run shares one host between all its
configurations (the runner starts it); a lone call starts its own. Measured (smoke eval,
load ~1-2, 2026-11-28): dlrm 7-9 s and resnet18 12-17 s per configuration in a shared host,
against 44 s and 52 s when each started Python and torch under valgrind itself; the host's
start, ~30 s, once per run. Elsewhere the child is a fresh ``valgrind python`` that switches
instrumentation on through ``callgrind_control -i on``. Either way the child runs one
intra-op thread and a fixed ``PYTHONHASHSEED``: worker threads spin-wait a variable number
of instructions, which would make the count noisy. The two kinds of process give slightly
different counts for the same work (resnet18 eval at smoke: 14.19M in host children, 14.00M
in a fresh child): the record says which (``process``); compare counts of one kind.

Measured on torch 2.13 (2-core shared machine, valgrind 3.19): resnet18 eval at smoke size,
3 counted steps, 47.10M and 47.18M instructions per step in two fresh processes (0.15%
apart), 405-718 s wall each; a 64x64 matmul step, 0.15-0.2% apart. The first steps after
a short warm-up cost more than later ones (interpreter and allocator settling), so compare
counts taken with the same ``warmup`` and ``instruction_steps``.

CPU device only (valgrind does not run CUDA drivers reliably). When valgrind is missing or
the platform is unsupported, the metric raises :class:`~torchgauge.workload.UnsupportedError`.
``RunConfig.options.instruction_steps`` sets the counted steps (default
:data:`DEFAULT_INSTRUCTION_STEPS`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..stats.deterministic import INSTRUCTIONS_SPREAD, INSTRUCTIONS_THRESHOLD
from .callgrind_host import HOST_ENV, CallgrindHost, host_supported, request_count
from .metrics import Quantity, register_metric

if TYPE_CHECKING:  # pragma: no cover
    from ..config import RunConfig, RunOptions
    from ..workload import Workload

__all__ = [
    "DEFAULT_INSTRUCTION_STEPS",
    "INSTRUCTIONS_TIMEOUT_S",
    "callgrind_command",
    "count_instructions",
    "find_valgrind",
    "instruction_steps",
    "parse_callgrind_total",
]

# Counted steps per run: the count is exact per step, so a few steps average out
# step-to-step variation (allocator reuse) without multiplying the callgrind cost.
DEFAULT_INSTRUCTION_STEPS = 3
# Wall-clock limit for the valgrind child; the runner's per-run timeout still applies.
INSTRUCTIONS_TIMEOUT_S = 3600.0
# Fixed hash seed in the child: dict/set iteration order must not change the work done.
_CHILD_HASH_SEED = "0"
_SUMMARY_RE = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def find_valgrind() -> str:
    """Path of the valgrind executable; UnsupportedError with the reason when unusable."""
    from ..workload import UnsupportedError  # workload imports torch; only on this path

    path = shutil.which("valgrind")
    if path is None:
        raise UnsupportedError(
            "instructions needs valgrind (callgrind) on PATH; install it, e.g. apt-get install valgrind"
        )
    import torch

    if not torch._C._valgrind_supported_platform():
        raise UnsupportedError("instructions: this torch build has no valgrind client requests (unsupported platform)")
    return path


def instruction_steps(options: RunOptions) -> int:
    """Counted steps: ``options.instruction_steps`` (RunOptions checked it) or the default."""
    return options.instruction_steps or DEFAULT_INSTRUCTION_STEPS


def parse_callgrind_total(text: str) -> int:
    """Total ``Ir`` of one callgrind output file (its ``summary:`` or ``totals:`` line).

    Example:
        >>> parse_callgrind_total("events: Ir\\nsummary: 788163\\n")
        788163
    """
    match = _SUMMARY_RE.search(text)
    if match is None:
        raise ValueError("not a callgrind output file: no 'summary:' or 'totals:' line")
    return int(match.group(1))


def callgrind_command(
    valgrind: str, out_file: str, python: str, child_args: Sequence[str], *, instrument_at_start: bool = True
) -> list[str]:
    """The valgrind command line: collection off until the child toggles it around steps.

    ``instrument_at_start=False`` also leaves callgrind's instrumentation off until the child
    turns it on right before the counted steps (:func:`_instrumentation_on`): starting Python,
    importing torch, building and warming up then run at plain valgrind speed, 3-4x less CPU
    than instrumented (measured: 22 s instead of 64 s of user time for ``import torch`` and a
    64x64 matmul). Only the toggled steps are counted either way.
    """
    return [
        valgrind,
        "--tool=callgrind",
        "--collect-atstart=no",
        f"--instr-atstart={'yes' if instrument_at_start else 'no'}",
        "--dump-line=no",  # totals only: smaller dumps, faster exit
        f"--callgrind-out-file={out_file}",
        python,
        *child_args,
    ]


def _model_file_of(model: str) -> str | None:
    """The file to load in the child for a model registered from a ``--model-file``."""
    from ..registry import get_spec

    module = get_spec(model).module
    if module.startswith("torchgauge_user_") and module in sys.modules:
        return getattr(sys.modules[module], "__file__", None)
    return None


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED=_CHILD_HASH_SEED)
    package_root = str(Path(__file__).resolve().parents[2])  # .../src, parent of torchgauge/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


def count_instructions(
    config: RunConfig, steps: Sequence[int] = (DEFAULT_INSTRUCTION_STEPS,), *, timeout_s: float = INSTRUCTIONS_TIMEOUT_S
) -> list[int]:
    """Instructions executed by ``n`` steps of ``config``'s workload, for each ``n`` in ``steps``.

    One valgrind process serves every entry (its start-up is the expensive part), so
    ``steps=(5, 10)`` measures 5 steps and then 10 more in the same process.

    Args:
        config: the run to rebuild in the child (model, mode, size, seed, precision, ...).
        steps: step counts to measure, each >= 1.
        timeout_s: wall-clock limit for the valgrind child.

    Returns:
        The total ``Ir`` of each measurement, in the order of ``steps``.

    Raises:
        UnsupportedError: valgrind missing, unsupported platform, or a non-CPU device.
        RuntimeError: the child failed or timed out (its last output lines in the message).
    """
    from ..results.schema import RunRecord
    from ..workload import UnsupportedError  # workload imports torch; only on this path

    if config.device.split(":")[0] != "cpu":
        raise UnsupportedError(
            f"instructions counts host instructions under valgrind; device {config.device!r} "
            "is not supported, accepted: cpu"
        )
    if not steps or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in steps):
        raise ValueError(f"steps must be a non-empty list of integers >= 1, got {list(steps)!r}")
    valgrind = find_valgrind()
    request = {
        "run": RunRecord(config, "ok").to_dict(),
        "steps": list(steps),
        "model_file": _model_file_of(config.model),
    }
    if host_supported():  # counted in a child forked from a callgrind host: the run's, or our own
        host = os.environ.get(HOST_ENV)
        if host:
            try:
                return request_count(host, request, timeout_s)
            except ConnectionError as exc:
                print(f"instructions: {exc}; starting a callgrind host for this run", file=sys.stderr)
        with CallgrindHost(valgrind, child_env(), timeout_s) as own:
            return request_count(own.address, request, timeout_s)
    with tempfile.TemporaryDirectory(prefix="torchgauge-callgrind-") as tmp:
        out_file = os.path.join(tmp, "callgrind.out")
        request_file = os.path.join(tmp, "request.json")
        Path(request_file).write_text(json.dumps(request))
        child = ["-c", "from torchgauge.harness.instructions import _child_main; _child_main()", request_file]
        control = shutil.which("callgrind_control")
        if control:
            request["callgrind_control"] = control
            Path(request_file).write_text(json.dumps(request))
        cmd = callgrind_command(valgrind, out_file, sys.executable, child, instrument_at_start=control is None)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=child_env())
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"instructions: valgrind child did not finish within {timeout_s:.0f} s") from None
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"instructions: valgrind child exited with code {proc.returncode}:\n{tail}")
        # Dumps requested by the child are numbered <out>.1, <out>.2, ... in order.
        return [parse_callgrind_total(Path(f"{out_file}.{i}").read_text()) for i in range(1, len(steps) + 1)]


def _child_main() -> None:
    """Entry point of the standalone valgrind child: count the request in this process."""
    request = json.loads(Path(sys.argv[1]).read_text())
    control = request.get("callgrind_control")
    count_steps(request, (lambda: _instrumentation_on(control)) if control else None)


def count_steps(request: dict[str, Any], instrumentation_on: Callable[[], object] | None) -> None:
    """Rebuild, warm up and count each measurement of ``request`` in this (valgrind) process.

    Shared by the standalone child and the callgrind host's children: ``instrumentation_on``
    switches callgrind's instrumentation on right before the counted steps (None: it is on).
    Each measurement is dumped (``<out>.1``, ``<out>.2``, ... in order).
    """
    import torch

    from ..configure import apply_config, build_workload
    from ..registry import load_model_file
    from ..results.schema import RunRecord

    if request["model_file"]:
        load_model_file(request["model_file"])
    config = RunRecord.from_dict(request["run"]).config
    torch.set_num_threads(1)
    workload = apply_config(build_workload(config), config)
    for _ in range(max(config.warmup, 1)):
        workload.step()
    if instrumentation_on is not None:
        instrumentation_on()
    for n in request["steps"]:
        torch._C._valgrind_toggle()
        for _ in range(n):
            workload.step()
        torch._C._valgrind_toggle_and_dump_stats()


# How long the child waits for callgrind to switch its instrumentation on.
INSTRUMENTATION_ON_TIMEOUT_S = 300.0


def _instrumentation_on(control: str) -> None:
    """Ask callgrind (``callgrind_control -i on``) to instrument this process from now on.

    Valgrind reads such commands only while the process runs guest code, so the child keeps
    executing Python until the command has been acknowledged (a blocking wait would never be).
    """
    import time

    proc = subprocess.Popen(
        [control, "-i", "on", str(os.getpid())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + INSTRUMENTATION_ON_TIMEOUT_S
    while proc.poll() is None:
        sum(range(1000))  # guest code: lets valgrind poll its command file
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("instructions: callgrind_control did not switch instrumentation on in time")
    output = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0 or "OK" not in output:
        raise RuntimeError(f"instructions: callgrind_control -i on failed: {output.strip()[-300:]}")


@register_metric(
    "instructions",
    "CPU instructions per step under valgrind callgrind (deterministic; slow: subsets)",
    quantities=[
        Quantity(
            "instructions",
            ("instructions", "per_step"),
            "instructions/iter",
            deterministic=True,
            threshold=INSTRUCTIONS_THRESHOLD,
            rule="exact",
            title="CPU instructions per step",
            spread=INSTRUCTIONS_SPREAD,
        )
    ],
)
def collect_instructions(workload: Workload, config: RunConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """Count ``instruction_steps`` steps of a fresh copy of this run under callgrind."""
    n = instruction_steps(config.options)
    (total,) = count_instructions(config, (n,))
    record = {"per_step": round(total / n), "steps": n, "total": total, "tool": "callgrind", "threads": 1}
    # Counts from the two kinds of process differ by up to ~1.4% (resnet18 eval): say which.
    record["process"] = "forked from a callgrind host" if host_supported() else "fresh valgrind child"
    return {"instructions": record}
