"""Hugging Face models: checkpoint configs, life without transformers, generation length."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

import torchgauge
from torchgauge.models.nlp.hf import factory
from torchgauge.registry import get_spec, list_models
from torchgauge.workload import UnsupportedError

HF_MODELS = list_models(tags="hf")
# Models built from an HFModelSpec checkpoint table (the rest of the "hf" models build their
# transformers or diffusers classes in their own builders: SAM, fastNLP's BERT, SD2's UNet).
SPEC_MODELS = [name for name in HF_MODELS if "hf_spec" in get_spec(name).extra]
# Builders that need transformers (stable_diffusion_unet needs diffusers; sam_fast needs CUDA first).
NEEDS_TRANSFORMERS = [name for name in HF_MODELS if name not in ("stable_diffusion_unet", "sam_fast")]

# (layers, hidden, heads, vocab) from each hub checkpoint's config.json.
CHECKPOINT_SIZES = {
    "bert-base-uncased": (12, 768, 12, 30522),
    "bert-large-cased": (24, 1024, 16, 28996),
    "albert-base-v2": (12, 768, 12, 30000),
    "distilbert-base-uncased": (6, 768, 12, 30522),
    "roberta-base": (12, 768, 12, 50265),
    "xlm-roberta-base": (12, 768, 12, 250002),
    "facebook/bart-base": (6, 768, 12, 50265),
    "google/bigbird-roberta-base": (12, 768, 12, 50358),
    "allenai/longformer-base-4096": (12, 768, 12, 50265),
    "ReformerConfig(num_buckets=128)": (6, 256, 12, 320),
    "BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16)": (24, 1024, 16, 30522),
    "WhisperConfig()": (4, 384, 6, 51865),
    "t5-small": (6, 512, 8, 32128),
    "t5-base": (12, 768, 12, 32128),
    "t5-large": (24, 1024, 16, 32128),
    "gpt2": (12, 768, 12, 50257),
    "gpt2-large": (36, 1280, 20, 50257),
    "openai/whisper-tiny": (4, 384, 6, 51865),
    "google/canine-s": (12, 768, 12, None),  # code points, hashed: no vocabulary
    "google/fnet-base": (12, 768, None, 32000),  # Fourier mixing: no attention heads
    "bigscience/bloom-560m": (24, 1024, 16, 250880),
    "allenai/OLMoE-1B-7B-0924": (16, 2048, 16, 50304),
    "uw-madison/yoso-4096": (12, 768, 12, 50265),
    "YituTech/conv-bert-base": (12, 768, 12, 30522),
    "RWKV/rwkv-4-169m-pile": (12, 768, None, 50277),  # recurrent: no attention heads
    "facebook/wmt19-en-de": (6, 1024, 16, 42024),
    "meta-llama/Llama-2-7b-hf (LlamaConfig defaults, 16 layers)": (16, 4096, 32, 32000),
    "vikhyatk/moondream1 (as read by PhiConfig: PhiConfig defaults)": (24, 2048, 32, 51200),
    "distil-whisper/distil-medium.en": (24, 1024, 16, 51864),
    "stabilityai/stable-diffusion-2 (text_encoder)": (23, 1024, 16, 49408),
}
# LLaVA as TorchBench reads it (LlavaConfig defaults): the Llama-2-7B text model and CLIP ViT-L/14-336.
LLAVA_TEXT_SIZES = (32, 4096, 32, 32000)
LLAVA_VISION_SIZES = (24, 1024, 16)
# CLIP ViT-B/32: (layers, hidden, heads, vocab) of the text and the image towers.
CLIP_TEXT_SIZES = (12, 512, 8, 49408)
CLIP_VISION_SIZES = (12, 768, 12, None)

EXPECTED_CHECKPOINTS = {
    "hf_Bert": "bert-base-uncased",
    "hf_Bert_large": "BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16)",
    "bert_large_cased": "bert-large-cased",
    "hf_Albert": "albert-base-v2",
    "hf_DistilBert": "distilbert-base-uncased",
    "hf_Roberta_base": "xlm-roberta-base",
    "fambench_xlmr": "xlm-roberta-base",
    "hf_Bart": "facebook/bart-base",
    "hf_BigBird": "google/bigbird-roberta-base",
    "hf_Longformer": "allenai/longformer-base-4096",
    "hf_Reformer": "ReformerConfig(num_buckets=128)",
    "hf_T5": "t5-small",
    "hf_T5_base": "t5-base",
    "hf_T5_large": "t5-large",
    "hf_T5_generate": "t5-small",
    "hf_GPT2": "gpt2",
    "hf_GPT2_large": "gpt2-large",
    "hf_GPT2_generate": "gpt2",
    "hf_Whisper": "WhisperConfig()",
    "whisper_tiny": "openai/whisper-tiny",
    "hf_clip": "openai/clip-vit-base-patch32",
    "hf_Canine": "google/canine-s",
    "hf_FNet": "google/fnet-base",
    "hf_Bloom": "bigscience/bloom-560m",
    "hf_OLMoE": "allenai/OLMoE-1B-7B-0924",
    "hf_Yoso": "uw-madison/yoso-4096",
    "hf_ConvBert": "YituTech/conv-bert-base",
    "hf_Rwkv": "RWKV/rwkv-4-169m-pile",
    "hf_FSMT": "facebook/wmt19-en-de",
    "llama_v2_7b_16h": "meta-llama/Llama-2-7b-hf (LlamaConfig defaults, 16 layers)",
    "llava": "liuhaotian/llava-v1.5-13b (as read by AutoConfig: LlavaConfig defaults)",
    "moondream": "vikhyatk/moondream1 (as read by PhiConfig: PhiConfig defaults)",
    "hf_distil_whisper": "distil-whisper/distil-medium.en",
    "stable_diffusion_text_encoder": "stabilityai/stable-diffusion-2 (text_encoder)",
}


def _sizes(config) -> tuple:
    return (
        config.num_hidden_layers,
        config.hidden_size,
        getattr(config, "num_attention_heads", None),
        getattr(config, "vocab_size", None),
    )


def test_every_model_is_registered() -> None:
    assert sorted(SPEC_MODELS) == sorted(EXPECTED_CHECKPOINTS)
    assert sorted(set(HF_MODELS) - set(SPEC_MODELS)) == ["fastNLP_Bert", "sam", "sam_fast", "stable_diffusion_unet"]
    assert "mlperf" in get_spec("bert_large_cased").tags
    assert get_spec("hf_GPT2").extra["torchbench_name"] == "hf_ptg1"


@pytest.mark.parametrize("name", SPEC_MODELS)
def test_full_config_matches_checkpoint(name: str) -> None:
    transformers = pytest.importorskip("transformers")
    spec = get_spec(name).extra["hf_spec"]
    assert spec.checkpoint == EXPECTED_CHECKPOINTS[name]
    config = spec.build_config(transformers)
    assert config._attn_implementation == factory.ATTN_IMPLEMENTATION
    if name == "llava":
        assert _sizes(config.text_config) == LLAVA_TEXT_SIZES
        assert _sizes(config.vision_config)[:3] == LLAVA_VISION_SIZES
        assert (config.vision_config.image_size, config.vision_config.patch_size) == (336, 14)
    elif name == "hf_clip":
        assert _sizes(config.text_config) == CLIP_TEXT_SIZES
        assert _sizes(config.vision_config)[:3] == CLIP_VISION_SIZES[:3]
        assert (config.vision_config.image_size, config.vision_config.patch_size) == (224, 32)
    else:
        assert _sizes(config) == CHECKPOINT_SIZES[spec.checkpoint]


def test_olmoe_full_size_parameter_count_on_meta_device() -> None:
    # Too large (27.7 GB in fp32) for test_param_counts, which allocates the full model.
    transformers = pytest.importorskip("transformers")
    spec = get_spec("hf_OLMoE").extra["hf_spec"]
    model = spec.build_model(transformers, spec.build_config(transformers), torch.device("meta"))
    assert sum(p.numel() for p in model.parameters()) == 6_919_161_856  # the paper's 6.9B
    experts = model.config.num_experts, model.config.num_experts_per_tok
    assert experts == (64, 8)


def test_smoke_and_overrides_merge_nested_configs() -> None:
    transformers = pytest.importorskip("transformers")
    spec = get_spec("hf_clip").extra["hf_spec"]
    config = spec.build_config(transformers, smoke=True, text_config={"num_hidden_layers": 3})
    assert config.text_config.num_hidden_layers == 3  # caller override wins
    assert config.text_config.hidden_size == 32  # smoke value kept beside it
    assert config.text_config.vocab_size == 512
    assert config.vision_config.hidden_size == 32
    assert config.vision_config.patch_size == 32  # checkpoint value kept where smoke is silent


def test_builder_overrides_reach_the_model() -> None:
    pytest.importorskip("transformers")
    w = torchgauge.create("hf_Bert", mode="eval", size="smoke", num_hidden_layers=1)
    assert w.module.config.num_hidden_layers == 1
    assert len(w.module.bert.encoder.layer) == 1


@pytest.mark.parametrize("name", NEEDS_TRANSFORMERS)
def test_builder_raises_unsupported_without_transformers(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now fails
    with pytest.raises(UnsupportedError, match="transformers not installed"):
        torchgauge.create(name, mode=get_spec(name).modes[0], size="smoke")


def test_unet_builder_raises_unsupported_without_diffusers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "diffusers", None)
    with pytest.raises(UnsupportedError, match="diffusers not installed"):
        torchgauge.create("stable_diffusion_unet", mode="eval", size="smoke")


def test_models_register_without_transformers() -> None:
    # A fresh interpreter where `import transformers` fails: registration must not need it.
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from torchgauge.models import IMPORT_ERRORS, import_all\n"
        "from torchgauge.registry import get_spec, list_models\n"
        "import_all()  # the model files themselves, not only the index\n"
        "assert not IMPORT_ERRORS, IMPORT_ERRORS\n"
        "names = list_models(tags='hf')\n"
        "assert all(get_spec(n).builder is not None for n in names)\n"
        "print(' '.join(names))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted(HF_MODELS)


def test_retired_architecture_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    # A transformers release without Reformer: the builder says so instead of faking it.
    monkeypatch.setattr(factory, "import_transformers", lambda: types.SimpleNamespace(__version__="99.0"))
    with pytest.raises(UnsupportedError, match="no longer has ReformerConfig"):
        torchgauge.create("hf_Reformer", mode="eval", size="smoke")


@pytest.mark.parametrize("name,decoder_prefix", [("hf_GPT2_generate", "prompt"), ("hf_T5_generate", "start")])
def test_generate_emits_exactly_n_new_tokens(name: str, decoder_prefix: str) -> None:
    pytest.importorskip("transformers")
    w = torchgauge.create(name, mode="eval", size="smoke", batch_size=2)
    assert get_spec(name).modes == ("eval",)
    prompt = w.inputs["input_ids"]
    new_tokens = w.generation_config.max_new_tokens
    assert new_tokens == w.generation_config.min_new_tokens == 4
    # TorchBench's hf_T5_generate decodes with the default dynamic cache
    assert w.generation_config.cache_implementation == ("static" if name == "hf_GPT2_generate" else None)
    for _ in range(2):  # a reused static cache must not change the length
        out = w.step()
        # decoder-only models return prompt + new tokens; encoder-decoders the start token + new tokens
        prefix = prompt.shape[1] if decoder_prefix == "prompt" else 1
        assert out.sequences.shape == (2, prefix + new_tokens)
        assert len(out.logits) == new_tokens
        if decoder_prefix == "prompt":
            assert (out.sequences[:, : prompt.shape[1]] == prompt).all()


def test_input_recipes_shapes() -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    from torchgauge.models.nlp.hf.whisper import WHISPER_TINY, speech_inputs
    from torchgauge.workload import BuildContext

    config = WHISPER_TINY.build_config(transformers, smoke=True)
    train = BuildContext("t", "train", torch.device("cpu"), 3, "smoke", batch_size_given=True)
    inputs = speech_inputs(train, config, 5)
    assert inputs["input_features"].shape == (3, 80, 32)  # 2 * max_source_positions (16) frames
    assert inputs["labels"].shape == (3, 5)
    evaluate = BuildContext("t", "eval", torch.device("cpu"), 3, "smoke", batch_size_given=True)
    seq2seq = factory.seq2seq_inputs(evaluate, config, 7)
    assert set(seq2seq) == {"input_ids", "decoder_input_ids"}
    assert seq2seq["decoder_input_ids"].shape == (3, 7)
    assert int(seq2seq["input_ids"].max()) < config.vocab_size
