"""Registry-driven smoke test: every model, every mode, CPU, smoke size (timm's test_models)."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import torchgauge
from torchgauge.registry import get_spec, list_models
from torchgauge.workload import UnsupportedError

CASES = [(name, mode) for name in list_models() for mode in get_spec(name).modes]
# Training steps of a default run (measure's warmup 3 + repeat 10): parameters must still be
# finite after them, or the run would time NaN arithmetic (a degenerate smoke shape can do it).
DEFAULT_RUN_STEPS = 13


def _float_leaves(out):
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            if leaf.is_quantized:
                leaf = leaf.dequantize()
            if leaf.is_floating_point() or leaf.is_complex():
                yield leaf
        elif isinstance(leaf, float):
            yield torch.tensor(leaf)


def _check_devices(w, device: torch.device):
    for p in w.module.parameters():
        assert p.device.type == device.type, f"parameter on {p.device}, expected {device}"
    for t in w.input_tensors():
        assert t.device.type == device.type, f"input on {t.device}, expected {device}"


def _run_and_check(name: str, mode: str, device: str) -> None:
    try:
        w = torchgauge.create(name, mode=mode, device=device, size="smoke")
    except UnsupportedError as exc:
        pytest.skip(f"unsupported: {exc}")
    _check_devices(w, torch.device(device))
    if mode == "train":
        before = [p.detach().clone() for p in w.module.parameters() if p.requires_grad]
        assert before, f"{name} has no trainable parameters"
        out = w.step()
        after = [p.detach() for p in w.module.parameters() if p.requires_grad]
        if getattr(w, "updates_parameters", True):
            changed = sum(not torch.equal(a, b) for a, b in zip(before, after))
            assert changed > 0, f"{name}: no parameter changed after a training step"
        elif getattr(w, "computes_gradients", True):  # the reference's step accumulates gradients only
            grads = [p.grad for p in w.module.parameters() if p.requires_grad]
            assert any(g is not None and g.abs().sum() > 0 for g in grads), f"{name}: no gradient after a step"
        else:  # the reference's training step only acts (LearningToPaint): weights stay as they are
            assert all(torch.equal(a, b) for a, b in zip(before, after)), f"{name}: a rollout step changed weights"
    else:
        out = w.step()
    leaves = list(_float_leaves(out))
    assert leaves, f"{name} {mode}: step() returned no floating tensor"
    for leaf in leaves:
        assert torch.isfinite(leaf).all(), f"{name} {mode}: non-finite output"
    out2 = w.step()  # a second iteration must work too (state, caches, optimizer)
    for leaf in _float_leaves(out2):
        assert torch.isfinite(leaf).all(), f"{name} {mode}: non-finite output on second step"
    if mode == "train" and device == "cpu":
        for _ in range(DEFAULT_RUN_STEPS - 2):
            w.step()
        bad = [n for n, p in w.module.named_parameters() if not torch.isfinite(p).all()]
        assert not bad, f"{name}: {len(bad)} non-finite parameters after {DEFAULT_RUN_STEPS} steps, e.g. {bad[0]}"


@pytest.mark.parametrize("name,mode", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_smoke_cpu(name: str, mode: str) -> None:
    _run_and_check(name, mode, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("name,mode", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_smoke_cuda(name: str, mode: str) -> None:
    if "cuda" not in get_spec(name).devices:
        pytest.skip("model does not support cuda")
    _run_and_check(name, mode, "cuda")


def test_every_domain_has_models() -> None:
    from torchgauge.registry import DOMAINS

    for domain in DOMAINS:
        assert list_models(domain=domain), f"no models in domain {domain}"


def test_metadata_complete() -> None:
    for name in list_models():
        spec = get_spec(name)
        assert spec.task and spec.source, f"{name}: task and source are required"
        assert spec.train_batch_size >= 1 and spec.eval_batch_size >= 1


def test_every_model_package_imports() -> None:
    from torchgauge.models import IMPORT_ERRORS, import_all

    import_all()
    assert not IMPORT_ERRORS, "\n\n".join(f"{pkg}:\n{tb}" for pkg, tb in IMPORT_ERRORS.items())
