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
    photo = w.inputs[0]
    assert masks.dtype == torch.bool and masks.shape == (1, 3, *photo.shape[:2])
    assert scores.shape == (1, 1, 3)


def test_torch_multimodal_clip_one_word_captions() -> None:
    ids = _meta("torch_multimodal_clip", "train").inputs["input_ids"]
    assert ids.shape == (32, 77)
    w = torchgauge.create("torch_multimodal_clip", mode="eval", size="smoke")
    ids, text = w.inputs["input_ids"], w.module.config.text_config
    assert (ids[:, 0] == text.bos_token_id).all() and (ids[:, 2] == text.eos_token_id).all()
    assert (ids[:, 3:] == 0).all()


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


def test_sliding_window_mask_without_documents_is_a_block_window() -> None:
    from torchgauge.models.nlp.modded_nanogpt import sliding_window_document_mask

    seq = torch.zeros(16, dtype=torch.int32)  # no end-of-text token: one document
    q, k = torch.arange(16)[:, None], torch.arange(16)[None]
    for window in (1, 2, 3, 8):
        expected = (q >= k) & (q // 4 - k // 4 < window)
        assert torch.equal(sliding_window_document_mask(seq, window, block_size=4, eos_token=9), expected)


def test_sliding_window_mask_with_a_document_boundary() -> None:
    """Hand-worked BlockMask: blocks of 2, window 2, a document starting at token 3.

    Query block 3 has one full block (2) and two partial ones (1, 3): it keeps window - 1 = 1 full
    block and max(window - 1, 1) = 1 partial, the nearest (3), so token 3 falls out of its view.
    """
    from torchgauge.models.nlp.modded_nanogpt import sliding_window_document_mask

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
    assert torch.equal(sliding_window_document_mask(seq, 2, block_size=2, eos_token=9), expected)
