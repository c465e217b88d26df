"""FNet-base: a BERT-shaped encoder whose self-attention is replaced by a Fourier transform.

Paper: Lee-Thorp et al., FNet: Mixing Tokens with Fourier Transforms, NAACL 2022.
Implementation: Hugging Face transformers ``FNetForMaskedLM`` (Apache-2.0), random-initialised
from the google/fnet-base config. Each layer mixes tokens with the real part of a 2-D DFT over
(sequence, hidden) (``torch.fft.fftn``; the TPU matrix-multiplication path is off, as on GPU),
then a feed-forward block. Masked-LM training on random labels at 512 tokens, as hf_Bert.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

FNET_BASE = HFModelSpec(
    checkpoint="google/fnet-base",
    config_class="FNetConfig",
    model_class="FNetForMaskedLM",
    config={
        "vocab_size": 32000,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 4,
        "layer_norm_eps": 1e-12,
        "use_tpu_fourier_optimizations": False,
        "tpu_short_seq_length": 512,
        "pad_token_id": 3,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    seq_len=(512, 512),
    smoke_config={"vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64},
)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf", "fft"),
    source="Lee-Thorp et al., FNet, NAACL 2022; Hugging Face transformers (Apache-2.0)",
    param_count=83_485_184,  # the paper's FNet-Base: 83M
    unsupported_precisions=("fp16", "bf16"),
    hf_spec=FNET_BASE,
    notes="fp16/bf16: no half-precision fftn on CPU (cuFFT half needs power-of-two sizes; 768 is not).",
)
def hf_FNet(ctx: BuildContext, **kwargs: Any) -> Workload:
    """FNet-base (FNetForMaskedLM): Fourier token mixing, sequence 512."""
    return create_hf_workload(ctx, FNET_BASE, **kwargs)
