"""Llama 2 7B, cut to 16 layers: TorchBench's ``llama_v2_7b_16h``.

Paper: Touvron et al., Llama 2: Open Foundation and Fine-Tuned Chat Models, 2023.
Implementation: Hugging Face transformers ``LlamaForCausalLM`` (Apache-2.0), random-initialised
from ``LlamaConfig(num_hidden_layers=16)`` exactly as TorchBench builds it
(``torchbenchmark/util/framework/huggingface/basic_configs.py``, HUGGINGFACE_MODELS): the
config's defaults are Llama-2-7B's widths (hidden 4096, MLP 11008, 32 heads, 32k vocabulary),
with half of its 32 layers. Training feeds 128 tokens with labels and steps plain SGD (lr 1e-3,
no momentum: ``HUGGINGFACE_MODELS_SGD_OPTIMIZER``); eval is a 512-token forward with the KV
cache off, both at batch 1.

At fp32 the 3.5B weights take 13 GiB: a full-size run declares its need (``full_memory_gib``)
and is ``unsupported`` on a machine with less memory; smoke size runs everywhere.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

LLAMA_V2_7B_16H = HFModelSpec(
    checkpoint="meta-llama/Llama-2-7b-hf (LlamaConfig defaults, 16 layers)",
    config_class="LlamaConfig",
    model_class="LlamaForCausalLM",
    config={"num_hidden_layers": 16},  # every other field: LlamaConfig's defaults (Llama-2-7B)
    seq_len=(128, 512),
    smoke_config={
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 172,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
    },
    optimizer="sgd",
    optimizer_kwargs={"momentum": 0.0},  # torch.optim.SGD(lr=0.001): no momentum
)


@register_model(
    domain="nlp", task="language_modeling",
    source="Touvron et al., Llama 2, 2023; Hugging Face transformers (Apache-2.0); TorchBench llama_v2_7b_16h",
    batch_size=(1, 1), preload=HF_PRELOAD, tags=("hf", "llm"), param_count=3_500_281_856,
    hf_spec=LLAMA_V2_7B_16H,
    # fp32 weights 13.0 GiB; training adds as much again in gradients, plus activations.
    full_memory_gib=(28, 15),
    notes="3.5B parameters: full size needs ~28 GiB to train and ~15 GiB to evaluate (fp32)",
    torchbench_precision=HUGGINGFACE_FACTORY,
)  # fmt: skip
def llama_v2_7b_16h(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Llama-2-7B widths with 16 layers (LlamaForCausalLM), 128 tokens to train, 512 to evaluate."""
    return create_hf_workload(ctx, LLAMA_V2_7B_16H, **kwargs)
