"""CLIP ViT-B/32: contrastive image-text pre-training.

Paper: Radford et al., Learning Transferable Visual Models From Natural Language
Supervision, 2021. Implementation: Hugging Face transformers ``CLIPModel`` (Apache-2.0),
random-initialised from the openai/clip-vit-base-patch32 config. Inputs are TorchBench's
shapes: 224x224 images and the 6-token caption its processor makes of "the dog is here"
(start, four words, end) with an all-ones attention mask; training uses the model's own
symmetric contrastive loss (``return_loss=True``; TorchBench uses torchmultimodal's
``ContrastiveLossWithTemperature``, the same loss with its own temperature parameter) with
TorchBench's AdamW settings.

Registered under "vision": TorchBench files hf_clip with the computer-vision models, the
image tower is the larger half of its compute, and its main use is zero-shot image
classification.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload


def image_text_inputs(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Images ``(B, 3, S, S)`` and captions ``(B, seq_len)``; ``return_loss`` in training."""
    size = config.vision_config.image_size
    inputs = {
        "pixel_values": ctx.randn(ctx.batch_size, config.vision_config.num_channels, size, size),
        "input_ids": ctx.randint(0, config.text_config.vocab_size, (ctx.batch_size, seq_len)),
        "attention_mask": ctx.randint(1, 2, (ctx.batch_size, seq_len)),  # no padding: all ones
    }
    if ctx.train:
        inputs["return_loss"] = True
    return inputs


CLIP_VIT_BASE_PATCH32 = HFModelSpec(
    checkpoint="openai/clip-vit-base-patch32",
    config_class="CLIPConfig",
    model_class="CLIPModel",
    config={
        "text_config": {
            "vocab_size": 49408,
            "hidden_size": 512,
            "intermediate_size": 2048,
            "num_hidden_layers": 12,
            "num_attention_heads": 8,
            "max_position_embeddings": 77,
            "hidden_act": "quick_gelu",
            "pad_token_id": 1,
            "bos_token_id": 49406,
            "eos_token_id": 49407,
        },
        "vision_config": {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "image_size": 224,
            "patch_size": 32,
            "hidden_act": "quick_gelu",
        },
        "projection_dim": 512,
        "logit_scale_init_value": 2.6592,  # log(1 / 0.07)
    },
    seq_len=(6, 6),  # TorchBench's tokenised caption "the dog is here"
    inputs=image_text_inputs,
    smoke_seq_len=6,
    smoke_config={
        "text_config": {
            "vocab_size": 512,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
            "bos_token_id": 510,
            "eos_token_id": 511,
        },
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 64,
        },  # 2x2 patches of 32
        "projection_dim": 16,
    },
    optimizer="adamw",  # TorchBench hf_clip: AdamW(lr=5e-4, weight_decay=1e-4, eps=1e-6)
    lr=5e-4,
    optimizer_kwargs={"weight_decay": 1e-4, "eps": 1e-6},
)


@register_model(
    domain="vision",
    task="contrastive_image_text",
    source="Radford et al., CLIP, 2021; Hugging Face transformers (Apache-2.0)",
    batch_size=(32, 32),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=151_277_313,
    hf_spec=CLIP_VIT_BASE_PATCH32,
)
def hf_clip(ctx: BuildContext, **kwargs: Any) -> Workload:
    """CLIP ViT-B/32 (CLIPModel), 224x224 images and 6-token captions, as TorchBench."""
    return create_hf_workload(ctx, CLIP_VIT_BASE_PATCH32, **kwargs)


def prompt_tokens(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Token ids ``(B, seq_len)`` below 32,000, as TorchBench draws them for this encoder."""
    return {"input_ids": ctx.randint(0, min(32000, config.vocab_size), (ctx.batch_size, seq_len))}


# Stable Diffusion 2's text encoder (stabilityai/stable-diffusion-2, text_encoder/config.json):
# OpenCLIP ViT-H/14's text tower, 23 of its 24 layers (SD2 takes the penultimate layer).
# TorchBench's get_module() times it on (1, 10) random token ids.
SD2_TEXT_ENCODER = HFModelSpec(
    checkpoint="stabilityai/stable-diffusion-2 (text_encoder)",
    config_class="CLIPTextConfig",
    model_class="CLIPTextModel",
    config={
        "vocab_size": 49408,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 23,
        "num_attention_heads": 16,
        "max_position_embeddings": 77,
        "hidden_act": "gelu",
        "projection_dim": 512,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
    },
    seq_len=(10, 10),
    inputs=prompt_tokens,
    smoke_seq_len=10,
    smoke_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2},
)


# No torchbench_precision: TorchBench's stable_diffusion_text_encoder/__init__.py:21 declares fp16
# for CUDA eval, but its enable_fp16 is a no-op (:38-41) and the pipeline loads without torch_dtype (:32-34), so
# run.py's default run computes in fp32 (docs/torchbench-fidelity.md).
@register_model(
    domain="vision", task="generation",
    source="Rombach et al., Stable Diffusion 2, 2022; Hugging Face transformers CLIPTextModel (Apache-2.0)",
    batch_size=1, modes=("eval",), preload=HF_PRELOAD, tags=("hf",), param_count=340_387_840,
    hf_spec=SD2_TEXT_ENCODER,
    notes="TorchBench times the text encoder alone on 10 tokens and implements no training",
)  # fmt: skip
def stable_diffusion_text_encoder(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Stable Diffusion 2's CLIP text encoder (CLIPTextModel) on 10 prompt tokens."""
    return create_hf_workload(ctx, SD2_TEXT_ENCODER, **kwargs)
