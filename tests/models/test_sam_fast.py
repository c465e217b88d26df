"""sam_fast is segment-anything-fast as TorchBench builds it: bfloat16, SDPA, the image encoder compiled.

The CUDA-only model cannot run here, so its builder's choices are checked by capturing what it
asks ``_create_sam`` for, and the same build is run on the CPU at smoke size with dynamo's
``aot_eager`` backend and ``fullgraph=True``: the encoder is captured as one graph (no break)
and gives the eager model's output.
"""

from __future__ import annotations

import pytest
import torch

from torchgauge.backends import apply_backend
from torchgauge.measurement import measure
from torchgauge.workload import BuildContext, UnsupportedError, seed_everything

pytest.importorskip("transformers")

from torchgauge.models.nlp.hf import sam as sam_module  # noqa: E402  (needs transformers)


def _cuda_context() -> BuildContext:
    return BuildContext("sam_fast", "eval", torch.device("cuda"), 32, "smoke")  # a device object, no CUDA needed


def test_sam_fast_asks_for_bfloat16_sdpa_and_a_max_autotune_encoder(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(sam_module, "_create_sam", lambda ctx, *args, **kw: calls.append((args, kw)))
    sam_module.sam_fast(_cuda_context())
    sam_module.sam_fast(_cuda_context(), encoder_compile_mode="none")
    assert calls == [
        ((torch.bfloat16, "sdpa", {"mode": "max-autotune"}), {}),
        ((torch.bfloat16, "sdpa", None), {}),
    ]


def test_sam_fast_refuses_a_bad_compile_mode_and_the_cpu() -> None:
    with pytest.raises(ValueError, match="accepted: none, default, reduce-overhead, max-autotune"):
        sam_module.sam_fast(_cuda_context(), encoder_compile_mode="fast")
    with pytest.raises(UnsupportedError):
        sam_module.sam_fast(BuildContext("sam_fast", "eval", torch.device("cpu"), 32, "smoke"))


def _fast_build(encoder_compile):
    seed_everything(0)
    ctx = BuildContext("sam_fast", "eval", torch.device("cpu"), 32, "smoke")
    w = sam_module._create_sam(ctx, sam_module.FAST_DTYPE, sam_module.FAST_ATTENTION, encoder_compile)
    w.module.eval()
    return w


def test_fast_encoder_compiles_as_one_graph_and_matches_eager() -> None:
    eager = _fast_build(None)
    attention = eager.module.vision_encoder.layers[0].attn
    assert type(attention).__name__ == "SamVisionSdpaAttention" and eager.compile_probe is None
    assert all(p.dtype == torch.bfloat16 for p in eager.module.parameters())
    compiled = _fast_build({"backend": "aot_eager", "fullgraph": True})
    assert type(compiled.module.vision_encoder).__name__ == "OptimizedModule"
    with torch.inference_mode():
        masks, scores, low_res = eager.step()
        masks_c, scores_c, low_res_c = compiled.step()
    assert masks.dtype == torch.bool and low_res.dtype == torch.bfloat16
    assert torch.equal(masks, masks_c) and torch.equal(low_res, low_res_c)


def test_a_model_compiled_encoder_keeps_its_probe_under_the_eager_backend() -> None:
    w = _fast_build({"backend": "aot_eager"})
    probe = w.compile_probe
    assert probe is not None and "compiles its image encoder" in probe.notes
    apply_backend(w, "eager")
    assert w.compile_probe is probe
    with pytest.raises(ValueError, match="warmup >= 1"):
        measure(w, repeat=1, warmup=0)
    record = measure(w, repeat=1, warmup=1)
    assert "compile" in record.metrics and record.metrics["compile"]["notes"] == probe.notes
