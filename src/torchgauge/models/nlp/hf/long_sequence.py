"""Long-sequence transformers: BigBird (block-sparse), Longformer (sliding window), Reformer (LSH), YOSO.

Papers: Zaheer et al., Big Bird, 2020; Beltagy et al., Longformer, 2020; Kitaev et al.,
Reformer, 2020; Zeng et al., You Only Sample (Almost) Once (YOSO), ICML 2021.
Implementation: Hugging Face transformers (Apache-2.0), random-initialised from the named
checkpoints' configs. Sequence lengths are TorchBench's: 1024 train / 4096 eval for BigBird
and Longformer, 4096 for Reformer. YOSO has no TorchBench entry: it runs at 4096 tokens,
the length of its checkpoint, with the checkpoint's expectation mode (``use_expectation``):
attention weights are the LSH collision probability ``(1 - arccos(cos(q, k)) / pi)^tau``
computed in closed form, plain PyTorch on every device (the sampled-hash mode needs
YOSO's custom CUDA extension).
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

_SOURCE_HF = "Hugging Face transformers (Apache-2.0)"

_SMOKE_ENCODER = {
    "vocab_size": 512,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}

BIGBIRD_ROBERTA_BASE = HFModelSpec(
    checkpoint="google/bigbird-roberta-base",
    config_class="BigBirdConfig",
    model_class="BigBirdForMaskedLM",
    config={
        "vocab_size": 50358,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu_new",
        "max_position_embeddings": 4096,
        "type_vocab_size": 2,
        "attention_type": "block_sparse",
        "block_size": 64,
        "num_random_blocks": 3,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "sep_token_id": 66,
    },
    seq_len=(1024, 4096),
    cpu_eval_seq_len=819,  # TorchBench: int(4096 / 5) on CPU; > (5 + 2 * 3) * 64 keeps block-sparse attention
    # Block-sparse attention needs T > (5 + 2 * num_random_blocks) * block_size, else
    # BigBird falls back to full attention: 64 > 44 keeps the block-sparse path.
    smoke_seq_len=64,
    smoke_config={**_SMOKE_ENCODER, "block_size": 4},
)

LONGFORMER_BASE_4096 = HFModelSpec(
    checkpoint="allenai/longformer-base-4096",
    config_class="LongformerConfig",
    model_class="LongformerForMaskedLM",
    config={
        "vocab_size": 50265,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "attention_window": 512,  # every layer: 256 tokens each side
        "max_position_embeddings": 4098,  # 4096 positions + the padding offset of 2
        "type_vocab_size": 1,
        "layer_norm_eps": 1e-5,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "sep_token_id": 2,
    },
    seq_len=(1024, 4096),
    cpu_eval_seq_len=512,  # TorchBench: 4096 / 8 on CPU
    smoke_seq_len=32,  # four windows of 8: sliding-chunk attention, not one block
    smoke_config={**_SMOKE_ENCODER, "attention_window": 8},
)

# TorchBench's hf_Reformer: ReformerConfig(num_buckets=128), every other field the config's
# default, through AutoModelForMaskedLM (an encoder: is_decoder False, 12 heads of 64).
REFORMER_TORCHBENCH = HFModelSpec(
    checkpoint="ReformerConfig(num_buckets=128)",
    config_class="ReformerConfig",
    model_class="ReformerForMaskedLM",
    config={
        "vocab_size": 320,
        "hidden_size": 256,
        "attn_layers": ["local", "lsh", "local", "lsh", "local", "lsh"],
        "num_attention_heads": 12,
        "attention_head_size": 64,
        "feed_forward_size": 512,
        "hidden_act": "relu",
        "is_decoder": False,
        "axial_pos_embds": True,
        "axial_pos_embds_dim": [64, 192],
        "axial_pos_shape": [64, 64],
        "max_position_embeddings": 4096,
        "num_buckets": 128,
        "num_hashes": 1,
        "lsh_attn_chunk_length": 64,
        "local_attn_chunk_length": 64,
        "hidden_dropout_prob": 0.05,
        "local_attention_probs_dropout_prob": 0.05,
        "lsh_attention_probs_dropout_prob": 0.0,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "eos_token_id": 2,
    },
    seq_len=(4096, 4096),
    cpu_eval_seq_len=2048,  # TorchBench: 4096 / 2 on CPU
    smoke_seq_len=32,
    smoke_config={
        "hidden_size": 64,
        "attn_layers": ["local", "lsh"],
        "attention_head_size": 32,
        "feed_forward_size": 128,
        "num_attention_heads": 2,
        "axial_pos_embds_dim": [16, 48],  # sums to hidden_size
        "axial_pos_shape": [4, 8],
        "max_position_embeddings": 32,
        "num_buckets": 8,
        "lsh_attn_chunk_length": 8,
        "local_attn_chunk_length": 8,
    },
)


YOSO_4096 = HFModelSpec(
    checkpoint="uw-madison/yoso-4096",
    config_class="YosoConfig",
    model_class="YosoForMaskedLM",
    config={
        "vocab_size": 50265,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "max_position_embeddings": 4098,
        "type_vocab_size": 1,
        "use_expectation": True,
        "hash_code_len": 9,
        "num_hash": 64,
        "conv_window": None,
        "use_fast_hash": True,
        "lsh_backward": True,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
    },
    seq_len=(4096, 4096),
    smoke_config=_SMOKE_ENCODER,
)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Zaheer et al., Big Bird, 2020; {_SOURCE_HF}",
    batch_size=(2, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=128_111_286,
    hf_spec=BIGBIRD_ROBERTA_BASE,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_BigBird(ctx: BuildContext, **kwargs: Any) -> Workload:
    """BigBird-RoBERTa-base (BigBirdForMaskedLM), block-sparse attention, 1024 / 4096 tokens."""
    return create_hf_workload(ctx, BIGBIRD_ROBERTA_BASE, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Beltagy et al., Longformer, 2020; {_SOURCE_HF}",
    batch_size=(2, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=148_711_257,
    hf_spec=LONGFORMER_BASE_4096,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_Longformer(ctx: BuildContext, **kwargs: Any) -> Workload:
    """Longformer-base-4096 (LongformerForMaskedLM), 512-token windows, 1024 / 4096 tokens."""
    return create_hf_workload(ctx, LONGFORMER_BASE_4096, **kwargs)


@register_model(
    domain="nlp",
    task="language_modeling",
    source=f"Kitaev et al., Reformer, 2020; {_SOURCE_HF}",
    batch_size=(8, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=5_976_192,
    hf_spec=REFORMER_TORCHBENCH,
    notes="TorchBench's ReformerConfig(num_buckets=128) defaults: axial positions (64, 64) for 4096 tokens",
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_Reformer(ctx: BuildContext, **kwargs: Any) -> Workload:
    """TorchBench's Reformer (ReformerForMaskedLM, config defaults, 128 buckets), LSH + local attention, 4096 tokens."""
    return create_hf_workload(ctx, REFORMER_TORCHBENCH, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Zeng et al., YOSO, ICML 2021; {_SOURCE_HF}",
    batch_size=(1, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=127_451_481,
    hf_spec=YOSO_4096,
    notes="expectation mode: softmax-free O(T^2) attention from arccos collision probabilities",
)
def hf_Yoso(ctx: BuildContext, **kwargs: Any) -> Workload:
    """YOSO-4096 (YosoForMaskedLM), Bernoulli-LSH attention in expectation, 4096 tokens."""
    return create_hf_workload(ctx, YOSO_4096, **kwargs)
