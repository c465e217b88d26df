"""T5 encoder-decoder (small, base, large) and its greedy generation loop.

Paper: Raffel et al., Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer (T5), 2019. Implementation: Hugging Face transformers
``T5ForConditionalGeneration`` (Apache-2.0), random-initialised from the t5-small / t5-base /
t5-large configs (the original v1.0 checkpoints: ReLU feed-forward, tied embeddings).
Sequence lengths are TorchBench's: 1024 train / 2048 eval (512 / 512 for t5-large).
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_generation, create_hf_workload, seq2seq_inputs

_SOURCE = "Raffel et al., T5, 2019; Hugging Face transformers (Apache-2.0)"

_SMOKE_T5 = {
    "vocab_size": 512,
    "d_model": 32,
    "d_kv": 16,
    "d_ff": 64,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "num_heads": 2,
}


def _t5_spec(
    checkpoint: str,
    *,
    d_model: int,
    d_ff: int,
    num_layers: int,
    num_heads: int,
    seq_len: tuple[int, int],
    cpu_eval_seq_len: int | None = None,
) -> HFModelSpec:
    # The three sizes share every field but width, depth and heads (d_kv is 64 in all).
    config = {
        "vocab_size": 32128,
        "d_model": d_model,
        "d_kv": 64,
        "d_ff": d_ff,
        "num_layers": num_layers,
        "num_decoder_layers": num_layers,
        "num_heads": num_heads,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "feed_forward_proj": "relu",
        "dropout_rate": 0.1,
        "layer_norm_epsilon": 1e-6,
        "tie_word_embeddings": True,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,  # decoding starts from the pad token
    }
    return HFModelSpec(
        checkpoint=checkpoint,
        config_class="T5Config",
        model_class="T5ForConditionalGeneration",
        config=config,
        seq_len=seq_len,
        cpu_eval_seq_len=cpu_eval_seq_len,
        inputs=seq2seq_inputs,
        smoke_config=_SMOKE_T5,
    )


T5_SMALL = _t5_spec(
    "t5-small", d_model=512, d_ff=2048, num_layers=6, num_heads=8, seq_len=(1024, 2048), cpu_eval_seq_len=512
)  # TorchBench: 2048 / 4 on CPU
T5_BASE = _t5_spec("t5-base", d_model=768, d_ff=3072, num_layers=12, num_heads=12, seq_len=(1024, 2048))
T5_LARGE = _t5_spec("t5-large", d_model=1024, d_ff=4096, num_layers=24, num_heads=16, seq_len=(512, 512))


@register_model(
    domain="nlp",
    task="seq2seq_language_modeling",
    source=_SOURCE,
    batch_size=(8, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=60_506_624,
    hf_spec=T5_SMALL,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_T5(ctx: BuildContext, **kwargs: Any) -> Workload:
    """t5-small (T5ForConditionalGeneration), 1024 / 2048 tokens."""
    return create_hf_workload(ctx, T5_SMALL, **kwargs)


@register_model(
    domain="nlp",
    task="seq2seq_language_modeling",
    source=_SOURCE,
    batch_size=(8, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=222_903_552,
    hf_spec=T5_BASE,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_T5_base(ctx: BuildContext, **kwargs: Any) -> Workload:
    """t5-base (T5ForConditionalGeneration), 1024 / 2048 tokens."""
    return create_hf_workload(ctx, T5_BASE, **kwargs)


@register_model(
    domain="nlp",
    task="seq2seq_language_modeling",
    source=_SOURCE,
    batch_size=(2, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=737_668_096,
    hf_spec=T5_LARGE,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_T5_large(ctx: BuildContext, **kwargs: Any) -> Workload:
    """t5-large (T5ForConditionalGeneration), 512 tokens."""
    return create_hf_workload(ctx, T5_LARGE, **kwargs)


@register_model(
    domain="nlp",
    task="text_generation",
    source=_SOURCE,
    batch_size=1,
    modes=("eval",),
    preload=HF_PRELOAD,
    tags=("hf", "generation"),
    param_count=60_506_624,
    hf_spec=T5_SMALL,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_T5_generate(ctx: BuildContext, **kwargs: Any) -> Workload:
    """t5-small generate(): 2048-token input (512 on CPU), 256 greedy new tokens, dynamic cache as TorchBench."""
    return create_hf_generation(
        ctx,
        T5_SMALL,
        prompt_len=2048,
        cpu_prompt_len=512,
        new_tokens=256,
        static_cache=False,
        attention_mask=False,
        **kwargs,
    )
