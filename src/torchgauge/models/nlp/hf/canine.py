"""CANINE-S: a tokenizer-free encoder over Unicode code points.

Paper: Clark et al., CANINE: Pre-training an Efficient Tokenization-Free Encoder for Language
Representation, TACL 2022. Implementation: Hugging Face transformers
``CanineForSequenceClassification`` (Apache-2.0), random-initialised from the google/canine-s
config. The model hashes each code point with 8 hash functions into 16,384 buckets, runs a
local (blockwise) transformer over the characters, downsamples 4x with a strided conv, runs
the deep transformer over the shorter sequence, and upsamples back (a conv over the
repeated molecules) for per-character outputs; the classifier reads the [CLS] position.

Inputs are code points, not token ids: 2,048 characters (the paper's maximum input length)
drawn uniformly from the Basic Multilingual Plane, as multilingual text would be. Training
is two-way sequence classification with cross-entropy on random labels.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

# Code points of the Basic Multilingual Plane (the hash embedding accepts any code point).
BMP_CODE_POINTS = 0x10000
NUM_LABELS = 2


def code_point_inputs(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Code points ``(B, T)``, plus class ``labels (B,)`` in training."""
    inputs = {"input_ids": ctx.randint(0, BMP_CODE_POINTS, (ctx.batch_size, seq_len))}
    if ctx.train:
        inputs["labels"] = ctx.randint(0, NUM_LABELS, (ctx.batch_size,))
    return inputs


CANINE_S = HFModelSpec(
    checkpoint="google/canine-s",
    config_class="CanineConfig",
    model_class="CanineForSequenceClassification",
    config={
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 16384,
        "type_vocab_size": 16,
        "layer_norm_eps": 1e-12,
        "downsampling_rate": 4,
        "upsampling_kernel_size": 4,
        "num_hash_functions": 8,
        "num_hash_buckets": 16384,
        "local_transformer_stride": 128,
        "pad_token_id": 0,
        "bos_token_id": 57344,
        "eos_token_id": 57345,
        "num_labels": NUM_LABELS,
    },
    seq_len=(2048, 2048),
    inputs=code_point_inputs,
    smoke_seq_len=32,
    smoke_config={
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_hash_buckets": 64,
        "local_transformer_stride": 8,
    },
)


@register_model(
    domain="nlp",
    task="text_classification",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    source="Clark et al., CANINE, TACL 2022; Hugging Face transformers (Apache-2.0)",
    # transformers' CanineForSequenceClassification at the canine-s config (encoder 132,082,944)
    param_count=132_084_482,
    hf_spec=CANINE_S,
    notes="Inputs are 2,048 random code points of the Basic Multilingual Plane; two-way classification.",
)
def hf_Canine(ctx: BuildContext, **kwargs: Any) -> Workload:
    """CANINE-S (character-level, hashed code-point embeddings, 4x downsampling), 2,048 characters."""
    return create_hf_workload(ctx, CANINE_S, **kwargs)
