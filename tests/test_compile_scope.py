"""--compile-scope: torch.compile wraps the forward only (default) or the whole training step."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from torchgauge.backends import apply_backend
from torchgauge.cli.run_cmd import run_command
from torchgauge.registry import create, load_model_file
from torchgauge.results.schema import RunConfig
from torchgauge.runner import execute

PLANTED = "tests/fixtures/planted_models.py"


@pytest.fixture(autouse=True)
def _planted() -> None:
    load_model_file(PLANTED)


def _compiled_frames() -> list[str]:
    from torch._dynamo import utils

    return [m.co_name for m in utils.get_compilation_metrics() if m.co_name]


def test_forward_scope_compiles_only_the_forward() -> None:
    w = create("planted_ok", mode="train", size="smoke")
    apply_backend(w, "aot_eager", {"compile_scope": "forward"}, warmup=1)
    w.step()
    assert set(_compiled_frames()) == {"forward"}
    assert "scope=forward" in w.compile_probe.notes


def test_step_scope_is_recorded_and_compiles_the_whole_iteration() -> None:
    config = RunConfig(
        "planted_ok",
        mode="train",
        backend="aot_eager",
        size="smoke",
        repeat=2,
        warmup=1,
        options={"compile_scope": "step"},
    )
    record = execute(config)
    assert record.status == "ok", record.error
    frames = set(_compiled_frames())
    # The step frame itself and what it calls: loss, backward and optimizer step run under dynamo.
    assert {"step", "compute_loss", "backward_and_step"} <= frames
    assert "scope=step" in record.metrics["compile"]["notes"]
    assert record.to_dict()["options"]["compile_scope"] == "step"


def test_invalid_scope_and_non_dynamo_backend_are_one_line_errors() -> None:
    w = create("planted_ok", mode="eval", size="smoke")
    with pytest.raises(ValueError, match="invalid compile_scope 'graph'; accepted: forward, step"):
        apply_backend(w, "aot_eager", {"compile_scope": "graph"}, warmup=1)
    with pytest.raises(ValueError, match="option compile_scope does not apply to backend 'torchscript'"):
        apply_backend(w, "torchscript", {"compile_scope": "step"}, warmup=1)
    result = CliRunner().invoke(run_command, ["planted_ok", "--model-file", PLANTED, "--compile-scope", "step"])
    assert (
        result.exit_code == 2
        and "--compile-scope" in result.output
        and "does not apply to backend eager" in result.output
    )
