"""RWKV-4 169M: a recurrent language model trained like a transformer (linear attention "WKV").

Paper: Peng et al., RWKV: Reinventing RNNs for the Transformer Era, Findings of EMNLP 2023.
Implementation: Hugging Face transformers ``RwkvForCausalLM`` (Apache-2.0), random-initialised
from the RWKV/rwkv-4-169m-pile config. Each block mixes time with token shift (a zero-pad
by one step) and the WKV recurrence ``wkv_t = (sum_i e^{-(t-1-i)w + k_i} v_i + e^{u + k_t} v_t) /
(same without v)``, kept numerically stable with a running maximum, then mixes channels with
a squared-ReLU feed-forward. transformers runs WKV as a Python loop over time on CPU and
would use a hub kernel on CUDA; that kernel needs the ``kernels`` package and network access,
so here the loop runs on every device (a host-bound recurrence, which is what this model adds).
Causal-LM training on random labels at the checkpoint's 1024-token context.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

RWKV_4_169M = HFModelSpec(
    checkpoint="RWKV/rwkv-4-169m-pile",
    config_class="RwkvConfig",
    model_class="RwkvForCausalLM",
    config={
        "vocab_size": 50277,
        "context_length": 1024,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "attention_hidden_size": 768,
        "intermediate_size": 3072,
        "layer_norm_epsilon": 1e-5,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "rescale_every": 6,
        "tie_word_embeddings": False,
    },
    seq_len=(1024, 1024),
    smoke_config={
        "vocab_size": 512,
        "hidden_size": 32,
        "attention_hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
    },
)


@register_model(
    domain="nlp",
    task="language_modeling",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf", "rnn"),
    source="Peng et al., RWKV, 2023; Hugging Face transformers (Apache-2.0)",
    param_count=169_342_464,
    hf_spec=RWKV_4_169M,
    notes="WKV runs as transformers' per-timestep loop on every device (its CUDA kernel comes "
    "from the hub); eval halves the weights of every 6th block once (rescale_every) as transformers does",
)
def hf_Rwkv(ctx: BuildContext, **kwargs: Any) -> Workload:
    """RWKV-4 169M (RwkvForCausalLM), WKV recurrence over 1024 tokens."""
    return create_hf_workload(ctx, RWKV_4_169M, **kwargs)
