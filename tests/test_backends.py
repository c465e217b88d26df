"""Backends on CPU: registry, torchscript script/trace, dynamo compile cost, warm-up and option checks.

Compilation is slow on a small CPU: the dynamo tests use the two-layer fixture MLP and
inductor compiles only an eval forward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from torchgauge.backends import (
    CompileError,
    CompileProbe,
    apply_backend,
    get_backend,
    list_backends,
)
from torchgauge.cli.run_cmd import run_command
from torchgauge.config import RunOptions
from torchgauge.measurement import measure
from torchgauge.registry import create, load_model_file
from torchgauge.results.schema import ResultsFile, RunConfig
from torchgauge.runner import execute
from torchgauge.workload import BuildContext, UnsupportedError, Workload

PLANTED = str(Path(__file__).parent / "fixtures" / "planted_accuracy.py")
COMPILE_KEYS = {"compile_s", "first_iter_ms", "steady_ms", "graphs", "graph_breaks", "guards", "break_reasons"}


@pytest.fixture(scope="module", autouse=True)
def _planted() -> None:
    load_model_file(PLANTED)


def _workload(module: nn.Module, mode: str = "eval", shape: tuple[int, ...] = (2, 8)) -> Workload:
    ctx = BuildContext(name="t", mode=mode, device=torch.device("cpu"), batch_size=2, size="full")
    return ctx.finish(Workload(ctx, module, (ctx.randn(*shape),), ctx.randn(2, 4), loss_fn=nn.functional.mse_loss))


def test_registry() -> None:
    assert list_backends()[:5] == ["eager", "inductor", "aot_eager", "cudagraphs", "torchscript"]
    assert not get_backend("eager").compiles and get_backend("inductor").compiles
    with pytest.raises(ValueError, match="unknown backend 'tvm'; accepted: eager, inductor"):
        get_backend("tvm")


def test_eager_records_no_compile_metric() -> None:
    w = create("acc_tiny_mlp", mode="eval")
    apply_backend(w, "eager", warmup=0)
    assert w.compile_probe is None
    assert "compile" not in measure(w, repeat=2, warmup=0).metrics


def test_cudagraphs_is_unsupported_on_cpu() -> None:
    with pytest.raises(UnsupportedError, match="runs on cuda only, not cpu"):
        apply_backend(create("acc_tiny_mlp", mode="eval"), "cudagraphs")
    record = execute(RunConfig("acc_tiny_mlp", mode="eval", backend="cudagraphs", repeat=1, warmup=1))
    assert record.status == "unsupported" and "cuda only" in record.error


def test_compiled_backends_need_warmup_and_known_options() -> None:
    w = create("acc_tiny_mlp", mode="eval")
    with pytest.raises(ValueError, match="compiles during warm-up; accepted: warmup >= 1"):
        apply_backend(w, "aot_eager", warmup=0)
    with pytest.raises(
        ValueError, match="option compile_mode does not apply to backend 'aot_eager'; accepted with: inductor"
    ):
        apply_backend(w, "aot_eager", {"compile_mode": "max-autotune"})
    with pytest.raises(
        ValueError, match="invalid compile_mode 'fast'; accepted: default, reduce-overhead, max-autotune"
    ):
        apply_backend(w, "inductor", {"compile_mode": "fast"})
    # A compiled workload handed to measure() directly must still warm up first.
    w.compile_probe = CompileProbe("aot_eager")
    with pytest.raises(ValueError, match="accepted: warmup >= 1"):
        measure(w, repeat=1, warmup=0)


def test_torchscript_scripts_and_matches_eager() -> None:
    w = _workload(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)))
    expected = w.step()
    apply_backend(w, "torchscript")
    assert isinstance(w.module, torch.jit.ScriptModule)
    record = measure(w, repeat=2, warmup=1)
    compile_ = record.metrics["compile"]
    assert COMPILE_KEYS <= set(compile_)
    assert compile_["notes"] == "torchscript: scripted" and compile_["compile_s"] > 0
    assert compile_["graphs"] is None and compile_["guards"] is None  # no dynamo involved
    torch.testing.assert_close(w.step(), expected)


class _Unscriptable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(t for t in (self.fc(x), self.fc(x * x)))  # generator expression: TorchScript rejects it


class _Untraceable(_Unscriptable):
    def forward(self, x: torch.Tensor):
        return {str(t) for t in (self.fc(x),)}  # a set of strings: neither scriptable nor traceable


def test_torchscript_falls_back_to_trace_and_keeps_training() -> None:
    w = _workload(_Unscriptable(), mode="train")
    apply_backend(w, "torchscript")
    assert w.compile_probe.notes.startswith("torchscript: traced (script failed:")
    before = w.module.fc.weight.detach().clone()
    w.step()
    assert not torch.equal(before, w.module.fc.weight)  # the optimizer steps the traced module's weights


def test_torchscript_failing_both_ways_raises_compile_error() -> None:
    with pytest.raises(CompileError, match="script failed .* and trace failed"):
        apply_backend(_workload(_Untraceable()), "torchscript")


def test_aot_eager_counts_graph_break_and_guards() -> None:
    w = create("acc_graph_break_mlp", mode="train")
    apply_backend(w, "aot_eager")
    compile_ = measure(w, repeat=2, warmup=2).metrics["compile"]
    assert COMPILE_KEYS <= set(compile_)
    assert compile_["compile_s"] > 0 and compile_["first_iter_ms"] > 0 and compile_["steady_ms"] > 0
    assert compile_["graph_breaks"] == 1 and compile_["graphs"] >= 2  # one .item() site splits the forward
    assert any("item()" in reason for reason in compile_["break_reasons"])
    assert isinstance(compile_["guards"], int) and compile_["guards"] > 0
    assert compile_["recompiles_after_warmup"] == 0
    assert "compiled forward" in compile_["notes"]


def test_inductor_compiles_forward_without_breaks() -> None:
    w = create("acc_tiny_mlp", mode="eval")
    expected = w.step()
    apply_backend(w, "inductor", {"dynamic": False})
    compile_ = measure(w, repeat=2, warmup=1, metrics=("memory",)).metrics["compile"]
    assert compile_["graphs"] == 1 and compile_["graph_breaks"] == 0 and compile_["break_reasons"] == []
    assert (
        compile_["compile_s"] > 0
        and compile_["notes"] == "inductor: compiled forward; mode=default, scope=forward, dynamic=False"
    )
    torch.testing.assert_close(w.step(), expected, rtol=1e-5, atol=1e-6)


class _CustomStep(Workload):
    """A workload with its own eval step that calls its networks directly (like GANs and RL)."""

    def eval_step(self):
        with torch.no_grad():
            return self.module.decoder(self.module.encoder(self.inputs[0]))


def test_custom_step_workload_compiles_its_networks_in_place() -> None:
    ctx = BuildContext(name="t", mode="eval", device=torch.device("cpu"), batch_size=2, size="full")
    nets = nn.ModuleDict({"encoder": nn.Linear(8, 3), "decoder": nn.Linear(3, 4)})
    w = ctx.finish(_CustomStep(ctx, nets, (ctx.randn(2, 8),)))
    expected = w.step()
    apply_backend(w, "aot_eager")
    compile_ = measure(w, repeat=1, warmup=1).metrics["compile"]
    assert compile_["notes"].startswith("aot_eager: compiled networks encoder, decoder (custom step)")
    assert compile_["graphs"] == 2
    torch.testing.assert_close(w.step(), expected)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "inductor", "--warmup", "0"], "backend inductor compiles during warm-up"),
        (
            ["--backend", "inductor", "--compile-mode", "fast"],
            "'fast'; accepted: default, reduce-overhead, max-autotune",
        ),
        (["--backend", "torchscript", "--dynamic"], "does not apply to backend torchscript"),
        (["--precision", "fp8"], "'fp8'; accepted: fp32, tf32, fp16, bf16, amp"),
    ],
)
def test_cli_rejects_bad_backend_options(args: list[str], message: str) -> None:
    result = CliRunner().invoke(run_command, ["acc_tiny_mlp", "--model-file", PLANTED, *args])
    assert result.exit_code == 2 and message in result.output


def test_cli_run_records_options_compile_and_accuracy(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = [
        "acc_tiny_cnn",
        "--model-file",
        PLANTED,
        "--mode",
        "eval",
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--backend",
        "torchscript",
        "--channels-last",
        "--accuracy",
        "--in-process",
        "-q",
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(run_command, args)
    assert result.exit_code == 0, result.output
    (run,) = ResultsFile.from_dict(json.loads(out.read_text())).runs
    assert run.status == "ok" and run.config.options == RunOptions(channels_last=True, accuracy=True)
    assert run.metrics["compile"]["notes"] == "torchscript: scripted"
    assert run.metrics["accuracy"]["status"] == "pass" and len(run.metrics["time_ms"]["samples"]) == 2
