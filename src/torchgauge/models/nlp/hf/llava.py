"""LLaVA as TorchBench times it: ``LlavaForConditionalGeneration`` on text tokens alone.

Paper: Liu et al., Improved Baselines with Visual Instruction Tuning (LLaVA-1.5), 2023.
Implementation: Hugging Face transformers ``LlavaForConditionalGeneration`` (Apache-2.0).

TorchBench's entry (``basic_configs.py``: ``AutoConfig.from_pretrained("liuhaotian/llava-v1.5-13b")``)
reads a config.json written for the original LLaVA code base: its flat Llama fields do not reach
transformers' nested ``text_config``, so the model TorchBench builds is ``LlavaConfig()``'s defaults:
a CLIP ViT-L/14 tower at 336 px, a two-layer projector and a Llama-2-7B-sized language model,
7,062,902,784 parameters. Its inputs are 512 random token ids and nothing else (no
``pixel_values``), so the timed forward runs the language model; the vision tower is built but
idle. We reproduce exactly that, eval only at batch 1 (TorchBench implements no training).

At fp32 the weights alone take 26 GiB: a full-size run declares its need and is ``unsupported``
on smaller machines (TorchBench marks it not implemented on CPU for the same reason).
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload


def text_tokens(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Token ids ``(B, seq_len)`` from the language model's vocabulary; no image."""
    return {"input_ids": ctx.randint(0, config.text_config.vocab_size, (ctx.batch_size, seq_len))}


LLAVA_V1_5 = HFModelSpec(
    checkpoint="liuhaotian/llava-v1.5-13b (as read by AutoConfig: LlavaConfig defaults)",
    config_class="LlavaConfig",
    model_class="LlavaForConditionalGeneration",
    config={},
    seq_len=(512, 512),
    smoke_config={
        "text_config": {
            "model_type": "llama",
            "vocab_size": 512,
            "hidden_size": 64,
            "intermediate_size": 172,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
        },
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
        },
        "image_token_index": 512,  # outside the smoke vocabulary, as 32000 is outside the full one
    },
    inputs=text_tokens,
)


@register_model(
    domain="nlp", task="language_modeling",
    source="Liu et al., LLaVA-1.5, 2023; Hugging Face transformers (Apache-2.0); TorchBench llava",
    batch_size=1, modes=("eval",), preload=HF_PRELOAD, tags=("hf", "llm", "multimodal"),
    param_count=7_062_902_784, hf_spec=LLAVA_V1_5, full_memory_gib=(112, 27),
    notes="7.1B parameters: full-size eval needs ~27 GiB (fp32); TorchBench implements no training",
    torchbench_precision=HUGGINGFACE_FACTORY,
)  # fmt: skip
def llava(ctx: BuildContext, **kwargs: Any) -> Workload:
    """LlavaForConditionalGeneration (LlavaConfig defaults), forward on 512 text tokens."""
    return create_hf_workload(ctx, LLAVA_V1_5, **kwargs)
