"""instructions metric: callgrind plumbing on CPU, and one real (slow) valgrind count.

The real count starts Python + torch under callgrind, about 100 s of CPU before the first
step, so it is marked ``slow`` (deselect with ``-m "not slow"``) and skipped without
valgrind. Everything else is tested without valgrind.
"""

from __future__ import annotations

import shutil

import pytest

from torchgauge.config import RunOptions
from torchgauge.harness import instructions as ins
from torchgauge.registry import load_model_file
from torchgauge.results.schema import RunConfig
from torchgauge.workload import UnsupportedError

MODELS = "tests/harness/counting_models.py"
# A tiny callgrind output as valgrind 3.19 writes it with --dump-line=no.
CALLGRIND_OUT = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 9249
cmd:  python3 s.py 10
part: 1

desc: I1 cache:
desc: Timerange: Basic block 0 - 1000
desc: Trigger: Client Request: dump

positions: line
events: Ir
summary: 788163


totals: 788163
"""


def test_parse_callgrind_total() -> None:
    assert ins.parse_callgrind_total(CALLGRIND_OUT) == 788163
    with pytest.raises(ValueError, match="not a callgrind output file"):
        ins.parse_callgrind_total("events: Ir\n")


def test_command_starts_with_collection_off() -> None:
    cmd = ins.callgrind_command("/usr/bin/valgrind", "/tmp/x/cg.out", "/usr/bin/python3", ["-c", "pass"])
    assert cmd[:3] == ["/usr/bin/valgrind", "--tool=callgrind", "--collect-atstart=no"]
    assert "--callgrind-out-file=/tmp/x/cg.out" in cmd
    assert cmd[-3:] == ["/usr/bin/python3", "-c", "pass"]
    assert "--instr-atstart=yes" in cmd
    # with callgrind_control the child switches instrumentation on only before the counted steps
    fast = ins.callgrind_command(
        "/usr/bin/valgrind", "/tmp/x/cg.out", "/usr/bin/python3", ["-c", "pass"], instrument_at_start=False
    )
    assert "--instr-atstart=no" in fast


def test_missing_valgrind_is_unsupported_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(ins.shutil, "which", lambda name: None)
    with pytest.raises(UnsupportedError, match="needs valgrind"):
        ins.find_valgrind()
    config = RunConfig(model="counting_matmul", mode="eval", size="smoke")
    with pytest.raises(UnsupportedError, match="needs valgrind"):
        ins.count_instructions(config, (1,))


def test_non_cpu_device_and_bad_steps_are_refused() -> None:
    with pytest.raises(UnsupportedError, match="accepted: cpu"):
        ins.count_instructions(RunConfig(model="counting_matmul", device="cuda"), (1,))
    with pytest.raises(ValueError, match="steps must be"):
        ins.count_instructions(RunConfig(model="counting_matmul"), (0,))
    assert ins.instruction_steps(RunOptions()) == ins.DEFAULT_INSTRUCTION_STEPS
    assert ins.instruction_steps(RunOptions(instruction_steps=2)) == 2
    with pytest.raises(ValueError, match="invalid instruction_steps 0; accepted: an integer >= 1"):
        RunOptions.from_dict({"instruction_steps": 0})


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_tiny_matmul_count_is_positive_and_doubles_with_the_work() -> None:
    load_model_file(MODELS)  # the valgrind child loads the same file to find the model
    # 20 warm-up steps: after only 2, the first 10 counted steps cost 59.8k instructions each
    # and the next 10 only 45.8k (interpreter specialisation and allocator state settling
    # are the likely causes); negligible for a real model, not for a 64x64 matmul.
    config = RunConfig(model="counting_matmul", mode="eval", size="smoke", warmup=20)
    one, two = ins.count_instructions(config, (10, 20))  # both in one valgrind process
    assert one > 0
    assert two / one == pytest.approx(2.0, rel=0.2)
