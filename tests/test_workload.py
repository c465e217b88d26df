"""Workload contract: modes, grad contexts, input mapping, builder validation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchgauge.workload import SMOKE_BATCH_SIZE, BuildContext, Workload, image_classification, language_modeling


def _ctx(mode="train", size="full", batch_size=4, given=False):
    return BuildContext(
        name="t", mode=mode, device=torch.device("cpu"), batch_size=batch_size, size=size, batch_size_given=given
    )


def test_smoke_clamps_batch_unless_given() -> None:
    assert _ctx(size="smoke", batch_size=64).batch_size == SMOKE_BATCH_SIZE
    assert _ctx(size="smoke", batch_size=64, given=True).batch_size == 64
    assert _ctx(size="full", batch_size=64).batch_size == 64
    assert _ctx(size="smoke").pick(224, 32) == 32 and _ctx().pick(224, 32) == 224


def test_context_randomness_is_seeded_per_name() -> None:
    a, b = _ctx(), _ctx()
    assert torch.equal(a.randn(3, 4), b.randn(3, 4))
    x = a.randint(0, 5, (100,))
    assert x.dtype == torch.long and int(x.min()) >= 0 and int(x.max()) < 5
    other = BuildContext(name="u", mode="train", device=torch.device("cpu"), batch_size=4, size="full")
    assert not torch.equal(_ctx().randn(8), other.randn(8))


def test_finish_sets_mode_and_default_optimizer() -> None:
    ctx = _ctx()
    w = ctx.finish(Workload(ctx, nn.Linear(3, 2), (ctx.randn(4, 3),), ctx.randn(4, 2), loss_fn=nn.functional.mse_loss))
    assert isinstance(w.optimizer, torch.optim.SGD) and w.module.training
    with pytest.raises(TypeError, match="expected a Workload"):
        ctx.finish(nn.Linear(1, 1))


def test_train_step_updates_and_returns_detached_loss() -> None:
    ctx = _ctx()
    w = ctx.finish(
        image_classification(ctx, nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 5)), image_size=8, num_classes=5)
    )
    before = [p.clone() for p in w.module.parameters()]
    loss = w.step()
    assert not loss.requires_grad
    assert any(not torch.equal(a, b) for a, b in zip(before, w.module.parameters()))


def test_eval_grad_modes() -> None:
    ctx = _ctx(mode="eval")

    class NoGrad(Workload):
        eval_grad_mode = "no_grad"

    class WithGrad(Workload):
        eval_grad_mode = "enable_grad"

    x = (ctx.randn(2, 3),)
    lin = nn.Linear(3, 1)
    assert ctx.finish(Workload(ctx, lin, x)).step().is_inference()
    out = ctx.finish(NoGrad(ctx, lin, x)).step()
    assert not out.is_inference() and not out.requires_grad
    assert ctx.finish(WithGrad(ctx, lin, x)).step().requires_grad


def test_map_inputs_casts_every_tensor() -> None:
    ctx = _ctx()
    w = Workload(ctx, nn.Linear(3, 1), {"x": ctx.randn(2, 3), "n": 3}, [ctx.randn(2, 1)])
    w.map_inputs(lambda t: t.double())
    assert w.inputs["x"].dtype == torch.float64 and w.inputs["n"] == 3 and w.targets[0].dtype == torch.float64
    assert len(list(w.input_tensors())) == 2


def test_language_modeling_shifts_targets() -> None:
    ctx = _ctx()

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(11, 11)

        def forward(self, ids):
            return self.emb(ids)

    w = ctx.finish(language_modeling(ctx, Tiny(), vocab_size=11, seq_len=6))
    ids, targets = w.inputs[0], w.targets
    assert ids.shape == targets.shape == (4, 6)
    assert torch.isfinite(w.step())


def test_optimizer_kinds() -> None:
    ctx = _ctx()
    params = list(nn.Linear(2, 2).parameters())
    assert isinstance(ctx.optimizer(params, "adamw"), torch.optim.AdamW)
    with pytest.raises(ValueError, match="accepted: sgd, adam, adamw"):
        ctx.optimizer(params, "lamb")


def test_backends_attach_a_declared_compile_probe() -> None:
    from torchgauge.backends import CompileProbe, apply_backend

    ctx = _ctx(mode="eval")
    w = ctx.finish(Workload(ctx, nn.Linear(3, 1), (ctx.randn(2, 3),)))
    assert "compile_probe" in vars(w) and w.compile_probe is None  # declared by the constructor, not attached later
    apply_backend(w, "aot_eager", warmup=1)
    assert isinstance(w.compile_probe, CompileProbe) and w.compile_probe.backend == "aot_eager"
    apply_backend(w, "eager")
    assert w.compile_probe is None


def test_a_probe_the_model_brought_survives_an_eager_backend() -> None:
    # sam_fast compiles its image encoder when built: its compile cost is measured under any backend
    from torchgauge.backends import CompileProbe, apply_backend

    ctx = _ctx(mode="eval")
    w = ctx.finish(Workload(ctx, nn.Linear(3, 1), (ctx.randn(2, 3),)))
    own = CompileProbe("inductor", notes="the model compiles part of itself", from_model=True)
    w.compile_probe = own
    apply_backend(w, "eager")
    assert w.compile_probe is own
    apply_backend(w, "aot_eager", warmup=1)  # a compiling backend brings its own probe
    assert w.compile_probe is not own and w.compile_probe.backend == "aot_eager"
