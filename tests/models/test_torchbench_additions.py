"""TorchBench's models added under their own names: the workload TorchBench times, checked piece by piece."""

from __future__ import annotations

import pytest
import torch

import torchgauge
from torchgauge.registry import get_builder, get_spec
from torchgauge.workload import BuildContext


def _meta(name: str, mode: str):
    """The full-size workload built on the meta device: shapes and wiring without the memory."""
    spec = get_spec(name)
    ctx = BuildContext(name, mode, torch.device("meta"), spec.batch_size(mode), "full")
    return get_builder(name)(ctx)  # the index registers lazily: spec.builder is None until imported


def test_unbacked_tolist_sum_is_weight_times_f_times_count() -> None:
    w = torchgauge.create("microbench_unbacked_tolist_sum", mode="eval")
    f, ti, tv = w.inputs
    assert ti.dtype == tv.dtype == torch.int32 and ti.tolist() == list(range(1000))
    out = w.step()
    torch.testing.assert_close(out, f * w.module.weight.detach() * 1000)


def test_fastnlp_bert_step_walks_the_prefetched_set() -> None:
    train = _meta("fastNLP_Bert", "train")
    assert [tuple(words.shape) for words, *_ in train.inputs] == [(6, 474)] * 5  # 5 x 6 samples
    evaluation = _meta("fastNLP_Bert", "eval")
    assert [tuple(words.shape) for words, *_ in evaluation.inputs] == [(1, 474)] * 4
    w = torchgauge.create("fastNLP_Bert", mode="train", size="smoke")
    before = [p.detach().clone() for p in w.module.parameters()]
    w.step()
    # update_every=10 with 5 mini-batches: gradients accumulate, the weights do not move.
    assert all(torch.equal(a, b) for a, b in zip(before, w.module.parameters()))
    assert w.module.qa_classifier.weight.grad.abs().sum() > 0


def test_llama_v2_7b_16h_sequence_lengths_and_plain_sgd() -> None:
    assert _meta("llama_v2_7b_16h", "train").inputs["input_ids"].shape == (1, 128)
    assert _meta("llama_v2_7b_16h", "eval").inputs["input_ids"].shape == (1, 512)
    w = torchgauge.create("llama_v2_7b_16h", mode="train", size="smoke")
    assert isinstance(w.optimizer, torch.optim.SGD) and w.optimizer.param_groups[0]["momentum"] == 0.0
    assert w.module.config.use_cache is False


@pytest.mark.parametrize("name", ["llava", "moondream"])
def test_llm_eval_on_512_text_tokens(name: str) -> None:
    w = _meta(name, "eval")
    assert set(w.inputs) == {"input_ids"} and w.inputs["input_ids"].shape == (1, 512)


def test_stable_diffusion_unet_inputs() -> None:
    sample, timestep, text = _meta("stable_diffusion_unet", "eval").inputs
    assert sample.shape == (1, 4, 128, 128) and timestep.shape == (1,) and text.shape == (1, 1, 1024)


def test_distil_whisper_eval_features() -> None:
    assert _meta("hf_distil_whisper", "eval").inputs["input_features"].shape == (1, 80, 3000)


def test_sam_returns_three_masks_at_the_photo_size() -> None:
    w = torchgauge.create("sam", mode="eval", size="smoke")
    masks, scores, low_res = w.step()
    photo, point, label = w.inputs
    assert masks.dtype == torch.bool and masks.shape == (1, 3, *photo.shape[:2])
    assert scores.shape == (1, 1, 3)
    # SamPredictor's inputs: a uint8 RGB photo and int64 point/label arrays, all on the host
    assert (photo.dtype, point.dtype, label.dtype) == (torch.uint8, torch.int64, torch.int64)
    assert {t.device.type for t in w.inputs} == {"cpu"} and tuple(point.shape) == (1, 2)


def test_torch_multimodal_clip_one_word_captions() -> None:
    w = _meta("torch_multimodal_clip", "train")
    images, ids = w.inputs
    assert images.shape == (32, 3, 224, 224) and ids.shape == (32, 77)
    assert sum(p.numel() for p in w.module.model.parameters()) == 151_277_312  # + the loss's temperature
    assert isinstance(w.optimizer, torch.optim.AdamW) and w.optimizer.param_groups[0]["eps"] == 1e-6
    ids = torchgauge.create("torch_multimodal_clip", mode="eval", size="smoke").inputs[1]
    assert (ids[:, 0] == 49406).all() and (ids[:, 2] == 49407).all() and (ids[:, 3:] == 0).all()


def test_torch_multimodal_clip_loss_uses_the_clamped_learnable_temperature() -> None:
    from torchgauge.models.vision.torch_multimodal_clip import ContrastiveLossWithTemperature

    gen = torch.Generator().manual_seed(0)
    image, text = (torch.nn.functional.normalize(torch.randn(4, 8, generator=gen)) for _ in range(2))
    loss_fn = ContrastiveLossWithTemperature(logit_scale=7.0)  # above ln(100): clamped on the call
    logits = image @ text.T * 100.0
    labels = torch.arange(4)
    want = (torch.nn.functional.cross_entropy(logits, labels) + torch.nn.functional.cross_entropy(logits.T, labels)) / 2
    torch.testing.assert_close(loss_fn(image, text), want, rtol=1e-4, atol=1e-4)
    assert loss_fn.logit_scale.item() == pytest.approx(4.6052)


def test_torch_multimodal_clip_eval_reads_back_each_images_best_caption() -> None:
    w = torchgauge.create("torch_multimodal_clip", mode="eval", size="smoke")
    out = w.step()
    image, text = w.module(*w.inputs)
    torch.testing.assert_close(out["scores"], image @ text.T)
    assert out["best"] == (image @ text.T).argmax(dim=1).tolist()
    train = torchgauge.create("torch_multimodal_clip", mode="train", size="smoke")
    scale = train.module.loss.logit_scale
    train.step()
    assert scale.grad is not None and scale.grad.abs() > 0  # the optimizer trains the temperature too


def test_detectron2_maskrcnn_trains_with_sgd_at_lr_zero() -> None:
    w = torchgauge.create("detectron2_maskrcnn", mode="train", size="smoke")
    group = w.optimizer.param_groups[0]
    assert isinstance(w.optimizer, torch.optim.SGD) and group["lr"] == 0.0 and group["momentum"] == 0


# -- cm3leon_generate ---------------------------------------------------------------------------
def test_cm3leon_generates_64_tokens_through_one_shared_cache() -> None:
    (prompt,) = _meta("cm3leon_generate", "eval").inputs
    assert prompt.shape == (1, 64) and prompt.dtype == torch.long
    w = torchgauge.create("cm3leon_generate", mode="eval", size="smoke")
    (prompt,) = w.inputs
    assert 1 <= int(prompt.min()) and int(prompt.max()) < 128
    tokens, lprobs = w.step()
    assert tokens.shape == (1, 128) and torch.equal(tokens[:, :64], prompt)
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(1))  # the last call's log-probabilities
    # 65 calls (prompt + 64 tokens), every layer appending one key to the same cache.
    n_layers = len(w.module.model.layers)
    assert w.module.last_cache.length == n_layers * 65


def test_cm3leon_prompt_call_embeds_only_the_last_token() -> None:
    w = torchgauge.create("cm3leon_generate", mode="eval", size="smoke")
    (prompt,) = w.inputs
    tokens, _ = w.step()
    other = prompt.clone()
    other[:, :-1] = (prompt[:, :-1] % 100) + 1  # different non-padding ids, same length and last token
    assert not torch.equal(other, prompt)
    with torch.inference_mode():
        tokens_other, _ = w.module(other)
    assert torch.equal(tokens_other[:, 64:], tokens[:, 64:])


# -- simple_gpt, simple_gpt_tp_manual ----------------------------------------------------------
@pytest.mark.parametrize("name", ["simple_gpt", "simple_gpt_tp_manual"])
def test_simple_gpt_prefills_ten_tokens_into_a_bf16_cache(name: str) -> None:
    w = _meta(name, "eval")
    idx, input_pos = w.inputs
    assert idx.shape == (1, 10) and idx.dtype == torch.int32 and input_pos.shape == (10,)
    cache = w.module.kv_caches[0]
    assert cache.k_cache.shape == (1, 32, 2048, 128) and cache.k_cache.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in w.module.parameters())
    w = torchgauge.create(name, mode="eval", size="smoke")
    assert torch.equal(w.inputs[1].cpu(), torch.arange(10))
    logits = w.step()
    assert logits.shape == (1, 10, w.module.config.vocab_size)
    filled = w.module.kv_caches[-1].k_cache.abs().sum(dim=(0, 1, 3)) > 0  # per cache slot
    assert filled[:10].all() and not filled[10:].any()


@pytest.mark.parametrize("name", ["simple_gpt", "simple_gpt_tp_manual"])
def test_simple_gpt_decoding_from_the_cache_matches_a_longer_prefill(name: str) -> None:
    w = torchgauge.create(name, mode="eval", size="smoke")
    model = w.module.float()  # fp32 for a tight comparison; the cache path is the same
    idx = torch.cat([w.inputs[0], torch.tensor([[7]], dtype=torch.int32)], dim=1)  # (1, 11)
    with torch.inference_mode():
        model(idx[:, :10], torch.arange(10))
        step = model(idx[:, 10:], torch.tensor([10]))  # one token at position 10, keys from the cache
        full = model(idx, torch.arange(11))
    torch.testing.assert_close(step[:, 0], full[:, 10], rtol=1e-4, atol=1e-4)


def test_simple_gpt_tp_manual_fused_qkv_equals_simple_gpt_split() -> None:
    split = torchgauge.create("simple_gpt", mode="eval", size="smoke")
    fused = torchgauge.create("simple_gpt_tp_manual", mode="eval", size="smoke")
    state = dict(split.module.state_dict())
    for i, block in enumerate(split.module.blocks):
        a = block.attn
        for n in ("wq", "wk", "wv"):
            del state[f"blocks.{i}.attn.{n}.weight"]
        state[f"blocks.{i}.attn.wqkv.weight"] = torch.cat([a.wq.weight, a.wk.weight, a.wv.weight])
    fused.module.load_state_dict(state)
    torch.testing.assert_close(fused.module(*split.inputs), split.step())


# -- modded_nanogpt -----------------------------------------------------------------------------
def test_modded_nanogpt_trains_on_one_6144_token_sequence() -> None:
    w = _meta("modded_nanogpt", "train")
    input_seq, target_seq, window = w.inputs
    assert input_seq.shape == target_seq.shape == (6144,)
    assert input_seq.dtype == torch.int32 and target_seq.dtype == torch.int64
    assert isinstance(w.optimizer, torch.optim.Adam) and w.optimizer.param_groups[0]["lr"] == 0.01
    assert [b.attn is None for b in w.module.blocks] == [i == 7 for i in range(12)]
    assert w.module.embed.weight.dtype == torch.bfloat16 and w.module.lm_head.weight.dtype == torch.float32
    from torchgauge.models.nlp.modded_nanogpt import window_size_blocks

    assert window_size_blocks(0.5) == 7  # TorchBench's get_window_size_blocks(0.5): 896 tokens


def test_modded_nanogpt_loss_is_summed_in_training() -> None:
    w = torchgauge.create("modded_nanogpt", mode="train", size="smoke")
    model, inputs = w.module, w.inputs
    with torch.no_grad():
        total = model(*inputs)
        model.eval()
        mean = model(*inputs)
    torch.testing.assert_close(total, mean * inputs[0].numel())


def _sliding_window_pattern(seq: torch.Tensor, window: int, block_size: int, eos_token: int = 9) -> torch.Tensor:
    """The (T, T) pattern compiled flex attention applies: the long block mask's kept blocks, document-causal."""
    from torchgauge.models.nlp.modded_nanogpt import document_causal_mask, document_ids, speedrun_block_masks

    docs = document_ids(seq, eos_token)
    long, _ = speedrun_block_masks(docs, torch.tensor(window, dtype=torch.int32), block_size)
    kept = long.to_dense()[0, 0].bool().repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)
    return kept & document_causal_mask(docs)


def test_block_mask_without_documents_is_a_block_window() -> None:
    seq = torch.zeros(16, dtype=torch.int32)  # no end-of-text token: one document
    q, k = torch.arange(16)[:, None], torch.arange(16)[None]
    for window in (1, 2, 3, 8):
        expected = (q >= k) & (q // 4 - k // 4 < window)
        assert torch.equal(_sliding_window_pattern(seq, window, block_size=4), expected)


def test_block_mask_with_a_document_boundary() -> None:
    """Hand-worked BlockMask: blocks of 2, window 2, a document starting at token 3.

    Query block 3 has one full block (2) and two partial ones (1, 3): it keeps window - 1 = 1 full
    block and max(window - 1, 1) = 1 partial, the nearest (3), so token 3 falls out of its view.
    """
    seq = torch.tensor([0, 0, 0, 9, 0, 0, 0, 0])
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0, 0, 0],
            [0, 0, 0, 1, 0, 0, 0, 0],
            [0, 0, 0, 1, 1, 0, 0, 0],
            [0, 0, 0, 1, 1, 1, 0, 0],
            [0, 0, 0, 0, 1, 1, 1, 0],
            [0, 0, 0, 0, 1, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(_sliding_window_pattern(seq, 2, block_size=2), expected)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_cpu_attention_is_eager_flex_attention() -> None:
    """Eager flex_attention (TorchBench's run) ignores the window; the CPU's dense attention is it, bit for bit."""
    from torch.nn.attention.flex_attention import flex_attention

    from torchgauge.models.nlp.modded_nanogpt import DenseDocumentCausalAttention, document_ids, speedrun_block_masks

    gen = torch.Generator().manual_seed(0)
    docs = document_ids(torch.randint(0, 40, (256,), generator=gen), eos_token=3)
    q, k, v = (torch.randn(1, 2, 256, 16, generator=gen).bfloat16() for _ in range(3))
    long, short = speedrun_block_masks(docs, torch.tensor(2, dtype=torch.int32), block_size=128)
    with torch.no_grad():  # FlexAttention has no backward on the CPU
        dense = DenseDocumentCausalAttention.apply(q, k, v, docs, 0.12)
        assert torch.equal(flex_attention(q, k, v, block_mask=long, scale=0.12), dense)
        assert torch.equal(flex_attention(q, k, v, block_mask=short, scale=0.12), dense)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_model_with_flex_attention_gives_the_cpu_loss(monkeypatch) -> None:
    """The path off the CPU (block masks into flex_attention), run forward-only on the CPU."""
    from torchgauge.models.nlp import modded_nanogpt

    w = torchgauge.create("modded_nanogpt", mode="train", size="smoke")
    with torch.no_grad():
        dense = w.module(*w.inputs)
        monkeypatch.setattr(modded_nanogpt, "uses_flex_attention", lambda device: True)
        assert torch.equal(w.module(*w.inputs), dense)


def test_cpu_attention_backward_is_the_attention_gradient() -> None:
    from torchgauge.models.nlp.modded_nanogpt import DenseDocumentCausalAttention, document_causal_mask, document_ids

    gen = torch.Generator().manual_seed(0)
    docs = document_ids(torch.randint(0, 20, (64,), generator=gen), eos_token=3)
    q, k, v = (torch.randn(1, 2, 64, 8, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 2, 64, 8, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(DenseDocumentCausalAttention.apply(q, k, v, docs, 0.12), (q, k, v), grad)
    scores = (q @ k.transpose(-2, -1) * 0.12).masked_fill(~document_causal_mask(docs), float("-inf"))
    want = torch.autograd.grad(scores.softmax(-1) @ v, (q, k, v), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)  # float32 scores inside


def test_fp8_head_approximates_the_matmul_and_its_gradients() -> None:
    from torchgauge.models.nlp.modded_nanogpt import FP8Linear

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=gen).bfloat16().requires_grad_()
    w = (torch.randn(128, 64, generator=gen) * 0.05).requires_grad_()
    out = FP8Linear.apply(x, w, 64**0.5 / 448, 2**-9, 1 / 448)
    assert out.dtype == torch.bfloat16
    grad = torch.randn(64, 128, generator=gen).bfloat16()
    gx, gw = torch.autograd.grad(out, (x, w), grad)
    assert gx.dtype == torch.bfloat16 and gw.dtype == torch.float32
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want = x64 @ w64.T
    wx, ww = torch.autograd.grad(want, (x64, w64), grad.double())
    for got, ref in ((out, want), (gx, wx), (gw, ww)):  # e4m3 / e5m2 keep 3 / 2 mantissa bits
        assert (got.double() - ref).norm() / ref.norm() < 0.1
