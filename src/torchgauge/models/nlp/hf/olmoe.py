"""OLMoE-1B-7B: a sparse mixture-of-experts decoder (64 experts, 8 routed per token).

Paper: Muennighoff et al., OLMoE: Open Mixture-of-Experts Language Models, ICLR 2025.
Implementation: Hugging Face transformers ``OlmoeForCausalLM`` (Apache-2.0), random-initialised
from the allenai/OLMoE-1B-7B-0924 config: 16 layers of RoPE attention with QK-norm and a
routed MLP (top-8 of 64 SwiGLU experts, softmax router without renormalisation), 6.9B
parameters of which 1.3B are active per token. The MoE layer is the workload this adds to
the suite: router top-k, per-expert token grouping (``histc`` token counts, index gathers)
and expert GEMMs of data-dependent sizes. Training adds the router load-balancing loss
(coefficient 0.01) to the language-model loss, as the reference does.

At full size the fp32 weights are 27.7 GB and Adam training needs about 110 GB, so full-size
training runs report ``oom`` on most machines; eval fits a 64 GB host or an 80 GB GPU.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

OLMOE_1B_7B = HFModelSpec(
    checkpoint="allenai/OLMoE-1B-7B-0924",
    config_class="OlmoeConfig",
    model_class="OlmoeForCausalLM",
    config={
        "vocab_size": 50304,
        "hidden_size": 2048,
        "intermediate_size": 1024,
        "num_hidden_layers": 16,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "norm_topk_prob": False,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "router_aux_loss_coef": 0.01,
        "output_router_logits": True,  # training adds the load-balancing loss
        "tie_word_embeddings": False,
        "pad_token_id": 1,
        "eos_token_id": 50279,
    },
    seq_len=(512, 1024),
    smoke_config={
        "vocab_size": 512,
        "hidden_size": 32,
        "intermediate_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_experts": 8,
        "num_experts_per_tok": 2,
    },
)


# No param_count: the parameter-count test builds the full model, and 27.7 GB of fp32 weights
# do not fit the CI machine. transformers builds 6,919,161,856 parameters at this config (the
# paper's 6.9B); tests/models/test_hf.py checks it on the meta device.
@register_model(
    domain="nlp",
    task="language_modeling",
    batch_size=(1, 1),
    preload=HF_PRELOAD,
    tags=("hf", "moe"),
    source="Muennighoff et al., OLMoE, ICLR 2025; Hugging Face transformers (Apache-2.0)",
    hf_spec=OLMOE_1B_7B,
    notes="6.9B parameters (1.3B active): full-size training needs ~110 GB for fp32 weights and Adam.",
)
def hf_OLMoE(ctx: BuildContext, **kwargs: Any) -> Workload:
    """OLMoE-1B-7B (OlmoeForCausalLM): 64 experts, top-8 routing, 512 / 1024 tokens."""
    return create_hf_workload(ctx, OLMOE_1B_7B, **kwargs)
