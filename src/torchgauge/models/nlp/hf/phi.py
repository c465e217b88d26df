"""moondream as TorchBench times it: ``PhiForCausalLM`` with ``PhiConfig``'s defaults.

Paper: Li et al., Textbooks Are All You Need II: phi-1.5 technical report, 2023 (moondream1's
text model is phi-1.5). Implementation: Hugging Face transformers ``PhiForCausalLM`` (Apache-2.0).

TorchBench's entry (``basic_configs.py``: ``PhiConfig.from_pretrained("vikhyatk/moondream1")``)
reads moondream1's top-level config, whose fields are not Phi's, so every architecture field
takes ``PhiConfig``'s defaults: 24 layers of width 2048, 32 heads, MLP 8192, partial rotary
embeddings on half of each head, a 51,200-token vocabulary: 1,418,270,720 parameters (the
phi-1/phi-1.5 size). The image encoder of moondream is not part of it. Eval only (TorchBench
implements no training), batch 1, 512 random tokens, KV cache off.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

MOONDREAM1_PHI = HFModelSpec(
    checkpoint="vikhyatk/moondream1 (as read by PhiConfig: PhiConfig defaults)",
    config_class="PhiConfig",
    model_class="PhiForCausalLM",
    config={},
    seq_len=(512, 512),
    smoke_config={
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    },
)


@register_model(
    domain="nlp", task="language_modeling",
    source="Li et al., phi-1.5, 2023 (moondream1's text model); Hugging Face transformers (Apache-2.0)",
    batch_size=1, modes=("eval",), preload=HF_PRELOAD, tags=("hf", "llm"), param_count=1_418_270_720,
    hf_spec=MOONDREAM1_PHI, full_memory_gib=(24, 6),
    notes="1.4B parameters: full-size eval needs ~6 GiB (fp32); TorchBench implements no training",
    torchbench_precision=HUGGINGFACE_FACTORY,
)  # fmt: skip
def moondream(ctx: BuildContext, **kwargs: Any) -> Workload:
    """PhiForCausalLM (PhiConfig defaults: phi-1.5 size), forward on 512 tokens."""
    return create_hf_workload(ctx, MOONDREAM1_PHI, **kwargs)
