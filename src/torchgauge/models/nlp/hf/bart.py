"""BART-base denoising sequence-to-sequence transformer.

Paper: Lewis et al., BART: Denoising Sequence-to-Sequence Pre-training, 2019.
Implementation: Hugging Face transformers ``BartForConditionalGeneration`` (Apache-2.0),
random-initialised from the facebook/bart-base config. TorchBench feeds 512 tokens to the
encoder and 512 labels (train) or decoder tokens (eval).
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload, seq2seq_inputs

BART_BASE = HFModelSpec(
    checkpoint="facebook/bart-base",
    config_class="BartConfig",
    model_class="BartForConditionalGeneration",
    config={
        "vocab_size": 50265,
        "d_model": 768,
        "encoder_layers": 6,
        "decoder_layers": 6,
        "encoder_attention_heads": 12,
        "decoder_attention_heads": 12,
        "encoder_ffn_dim": 3072,
        "decoder_ffn_dim": 3072,
        "max_position_embeddings": 1024,
        "activation_function": "gelu",
        "dropout": 0.1,
        "attention_dropout": 0.1,
        "activation_dropout": 0.1,
        "scale_embedding": False,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        "forced_bos_token_id": 0,
        "forced_eos_token_id": 2,
    },
    seq_len=(512, 512),
    inputs=seq2seq_inputs,
    smoke_config={
        "vocab_size": 512,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
    },
)


@register_model(
    domain="nlp",
    task="seq2seq_language_modeling",
    source="Lewis et al., BART, 2019; Hugging Face transformers (Apache-2.0)",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=139_420_416,
    hf_spec=BART_BASE,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_Bart(ctx: BuildContext, **kwargs: Any) -> Workload:
    """BART-base (BartForConditionalGeneration), 512 tokens."""
    return create_hf_workload(ctx, BART_BASE, **kwargs)
