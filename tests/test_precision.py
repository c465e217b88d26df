"""Precisions on tiny CPU workloads: dtypes of weights, inputs, outputs and state; autocast scope."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from torchgauge.precision import apply_channels_last, apply_precision, cast_workload, get_precision, list_precisions
from torchgauge.registry import create, load_model_file
from torchgauge.workload import BuildContext, UnsupportedError, Workload, language_modeling

PLANTED = str(Path(__file__).parent / "fixtures" / "planted_accuracy.py")


@pytest.fixture(scope="module", autouse=True)
def _planted() -> None:
    load_model_file(PLANTED)


@pytest.fixture(autouse=True)
def _restore_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_registry_names_and_unknown() -> None:
    assert list_precisions()[:5] == ["fp32", "tf32", "fp16", "bf16", "amp"]
    with pytest.raises(ValueError, match="unknown precision 'fp8'; accepted: fp32, tf32"):
        get_precision("fp8")


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("fp32", torch.float32), ("tf32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)],
)
def test_cast_precisions(precision: str, dtype: torch.dtype, mode: str) -> None:
    w = create("acc_tiny_mlp", mode=mode)
    apply_precision(w, precision)
    assert {p.dtype for p in w.module.parameters()} == {dtype}
    assert w.inputs[0].dtype == dtype and w.targets.dtype == torch.long  # labels keep their dtype
    out = w.step()
    assert out.dtype == dtype
    if mode == "train":
        assert all(p.grad.dtype == dtype for p in w.module.parameters())
    assert torch.backends.cuda.matmul.allow_tf32 is (precision == "tf32")
    assert torch.backends.cudnn.allow_tf32 is (precision == "tf32")


def test_amp_eval_autocasts_to_bf16_on_cpu() -> None:
    w = create("acc_tiny_mlp", mode="eval")
    apply_precision(w, "amp")
    assert {p.dtype for p in w.module.parameters()} == {torch.float32}  # weights stay fp32
    assert w.step().dtype == torch.bfloat16
    assert w.grad_scaler is None


def test_amp_train_keeps_backward_and_optimizer_outside_autocast() -> None:
    w = create("acc_tiny_mlp", mode="train")
    apply_precision(w, "amp")
    seen: dict[str, object] = {}

    def record_dtype(module, inputs, output) -> None:
        seen["fc1_out"] = output.dtype

    w.module.fc1.register_forward_hook(record_dtype)
    step = w.optimizer.step

    def spying_step(*args, **kwargs):
        seen["autocast_in_optimizer"] = torch.is_autocast_enabled("cpu")
        return step(*args, **kwargs)

    w.optimizer.step = spying_step
    w.step()
    assert seen == {"fc1_out": torch.bfloat16, "autocast_in_optimizer": False}
    assert all(p.grad.dtype == torch.float32 for p in w.module.parameters())  # fp32 master weights
    assert w.grad_scaler is None  # bf16 needs no loss scaling


def test_train_step_with_grad_scaler_steps_the_optimizer() -> None:
    # The fp16-AMP path (CUDA in practice); GradScaler also runs on CPU.
    w = create("acc_tiny_mlp", mode="train")
    w.grad_scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    before = [p.detach().clone() for p in w.module.parameters()]
    loss = w.step()
    assert torch.isfinite(loss) and not loss.requires_grad
    assert any(not torch.equal(a, b) for a, b in zip(before, w.module.parameters()))
    assert w.grad_scaler.get_scale() == 1024.0  # finite grads: scale kept, step taken


class _Env:
    """Environment-like state a workload holds outside its module and inputs."""

    def __init__(self) -> None:
        self.state = torch.zeros(2, 3)
        self.steps = torch.zeros(2, dtype=torch.long)
        self.history = [torch.ones(1)]


def test_cast_workload_casts_floating_state_and_keeps_parameter_identity() -> None:
    ctx = BuildContext(name="t", mode="train", device=torch.device("cpu"), batch_size=2, size="full")
    w = ctx.finish(
        language_modeling(ctx, nn.Sequential(nn.Embedding(11, 4), nn.Linear(4, 11)), vocab_size=11, seq_len=5)
    )
    w.env = _Env()
    params = [id(p) for group in w.optimizer.param_groups for p in group["params"]]
    cast_workload(w, torch.bfloat16)
    assert w.inputs[0].dtype == torch.long and w.targets.dtype == torch.long  # token ids untouched
    assert w.module[0].weight.dtype == torch.bfloat16
    assert w.env.state.dtype == torch.bfloat16 and w.env.steps.dtype == torch.long
    assert w.env.history[0].dtype == torch.bfloat16
    assert [id(p) for p in w.module.parameters()] == params  # the optimizer still steps these
    assert w.step().dtype == torch.bfloat16


class _ComplexScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([1 + 2j, -3j], dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.view_as_real(x * self.weight)


@pytest.mark.parametrize("dtype, complex_dtype", [(torch.float64, torch.complex128), (torch.float16, torch.complex32)])
def test_cast_workload_keeps_complex_parameters_complex(dtype: torch.dtype, complex_dtype: torch.dtype) -> None:
    # module.to(float64) would keep only the real part of a complex parameter (with a warning)
    ctx = BuildContext(name="t", mode="eval", device=torch.device("cpu"), batch_size=2, size="full")
    module = _ComplexScale()
    w = ctx.finish(Workload(ctx, module, (torch.ones(2, dtype=torch.complex64), torch.ones(2))))
    param_id = id(module.weight)
    cast_workload(w, dtype)
    assert module.weight.dtype == complex_dtype and id(module.weight) == param_id
    assert module.weight.to(torch.complex128).tolist() == [1 + 2j, -3j]
    assert w.inputs[0].dtype == complex_dtype and w.inputs[1].dtype == dtype


def test_cast_workload_complex_to_bfloat16_is_unsupported() -> None:
    ctx = BuildContext(name="t", mode="eval", device=torch.device("cpu"), batch_size=2, size="full")
    w = ctx.finish(Workload(ctx, _ComplexScale(), (torch.ones(2, dtype=torch.complex64),)))
    with pytest.raises(UnsupportedError, match="complex"):
        cast_workload(w, torch.bfloat16)


def test_model_declared_unsupported_precision() -> None:
    w = create("acc_no_fp16", mode="eval")
    with pytest.raises(UnsupportedError, match="does not support precision 'fp16': planted: overflows"):
        apply_precision(w, "fp16")
    apply_precision(w, "bf16")  # others still run


def test_channels_last_converts_conv_model_and_4d_inputs() -> None:
    w = create("acc_tiny_cnn", mode="train")
    apply_channels_last(w)
    assert w.module[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert w.inputs[0].is_contiguous(memory_format=torch.channels_last) and not w.inputs[0].is_contiguous()
    assert torch.isfinite(w.step())


def test_channels_last_rejects_model_without_convolutions() -> None:
    w = create("acc_tiny_mlp", mode="eval")
    with pytest.raises(UnsupportedError, match="needs a model with 2-D convolutions"):
        apply_channels_last(w)


def test_workload_without_registry_entry_is_accepted() -> None:
    ctx = BuildContext(name="not_registered", mode="eval", device=torch.device("cpu"), batch_size=2, size="full")
    w = ctx.finish(Workload(ctx, nn.Linear(3, 2), (ctx.randn(2, 3),)))
    apply_precision(w, "fp16")
    assert w.step().dtype == torch.float16


def test_torchbench_defaults_name_registered_precisions() -> None:
    from torchgauge.registry.model_spec import TORCHBENCH_PRECISIONS

    assert set(TORCHBENCH_PRECISIONS) <= set(list_precisions())


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"cuda": {"infer": "fp16"}}, "torchbench_precision mode 'infer'; accepted: the model's train, eval"),
        ({"tpu": {"eval": "fp16"}}, "torchbench_precision device 'tpu'; accepted: the model's cpu, cuda"),
        ({"cuda": {"eval": "amp_fp16"}}, "torchbench_precision 'amp_fp16'; accepted: fp32, tf32, fp16, bf16, amp"),
        ({"cuda": "fp16"}, "accepted: mode -> precision"),
    ],
)
def test_register_model_checks_its_torchbench_precision(declared: dict, message: str) -> None:
    from torchgauge.registry import register_model

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        register_model(domain="other", task="t", source="s", batch_size=1, torchbench_precision=declared)


def test_torchbench_default_is_fp32_unless_declared() -> None:
    from torchgauge.registry import get_spec, register_model

    @register_model(
        domain="other",
        task="t",
        source="s",
        batch_size=1,
        modes=("eval",),
        torchbench_precision={"cuda": {"eval": "fp16"}, "cpu": {"eval": "fp32"}},
    )
    def tb_precision_declared(ctx):  # never built
        raise AssertionError

    spec = get_spec("tb_precision_declared")
    assert spec.torchbench_precision == {"cuda": {"eval": "fp16"}}  # an fp32 entry says nothing
    assert (spec.torchbench_default("eval", "cuda"), spec.torchbench_default("eval", "cpu")) == ("fp16", "fp32")
    assert spec.torchbench_default("train", "cuda") == "fp32" and spec.as_dict()["torchbench_precision"] == {
        "cuda": {"eval": "fp16"}
    }
