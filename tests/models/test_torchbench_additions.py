"""TorchBench's models added under their own names: the workload TorchBench times, checked piece by piece."""

from __future__ import annotations

import pytest
import torch

import torchgauge
from torchgauge.registry import get_spec
from torchgauge.workload import BuildContext


def _meta(name: str, mode: str):
    """The full-size workload built on the meta device: shapes and wiring without the memory."""
    spec = get_spec(name)
    ctx = BuildContext(name, mode, torch.device("meta"), spec.batch_size(mode), "full")
    return spec.builder(ctx)


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
