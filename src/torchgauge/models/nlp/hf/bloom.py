"""BLOOM-560m: a decoder-only language model with ALiBi position biases.

Paper: BigScience Workshop, BLOOM: A 176B-Parameter Open-Access Multilingual Language Model,
2022. Implementation: Hugging Face transformers ``BloomForCausalLM`` (Apache-2.0),
random-initialised from the bigscience/bloom-560m config. Positions enter only as ALiBi
linear biases added to the attention scores (``baddbmm`` of the bias and Q K^T), with a
LayerNorm after the 250,880-token embedding.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

BLOOM_560M = HFModelSpec(
    checkpoint="bigscience/bloom-560m",
    config_class="BloomConfig",
    model_class="BloomForCausalLM",
    config={
        "vocab_size": 250880,
        "hidden_size": 1024,
        "n_layer": 24,
        "n_head": 16,
        "layer_norm_epsilon": 1e-5,
        "apply_residual_connection_post_layernorm": False,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 3,
    },
    seq_len=(512, 1024),
    smoke_config={"vocab_size": 512, "hidden_size": 32, "n_layer": 2, "n_head": 2},
)


@register_model(
    domain="nlp",
    task="language_modeling",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    source="BigScience, BLOOM, 2022; Hugging Face transformers (Apache-2.0)",
    param_count=559_214_592,
    hf_spec=BLOOM_560M,
)
def hf_Bloom(ctx: BuildContext, **kwargs: Any) -> Workload:
    """BLOOM-560m (BloomForCausalLM, ALiBi attention), 512 / 1024 tokens."""
    return create_hf_workload(ctx, BLOOM_560M, **kwargs)
