"""FAIR's WMT19 English-German translation transformer (FSMT).

Paper: Ng et al., Facebook FAIR's WMT19 News Translation Task Submission, WMT 2019 (a
fairseq "transformer big" with 8192-wide feed-forward layers and separate source and target
vocabularies). Implementation: Hugging Face transformers ``FSMTForConditionalGeneration``
(Apache-2.0), a port of the fairseq model, random-initialised from the facebook/wmt19-en-de
config: post-norm layers, sinusoidal positions, scaled and untied embeddings. Training is
teacher-forced cross-entropy on random target tokens (as hf_T5); eval is one forward pass
over the source and a target prefix.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload, seq2seq_inputs

WMT19_EN_DE = HFModelSpec(
    checkpoint="facebook/wmt19-en-de",
    config_class="FSMTConfig",
    model_class="FSMTForConditionalGeneration",
    config={
        "langs": ["en", "de"],
        "src_vocab_size": 42024,
        "tgt_vocab_size": 42024,
        "d_model": 1024,
        "encoder_layers": 6,
        "decoder_layers": 6,
        "encoder_attention_heads": 16,
        "decoder_attention_heads": 16,
        "encoder_ffn_dim": 8192,
        "decoder_ffn_dim": 8192,
        "activation_function": "relu",
        "max_position_embeddings": 1024,
        "dropout": 0.2,
        "attention_dropout": 0.1,
        "activation_dropout": 0.0,
        "scale_embedding": True,
        "tie_word_embeddings": False,
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
    },
    seq_len=(256, 256),
    inputs=seq2seq_inputs,
    smoke_config={
        "src_vocab_size": 512,
        "tgt_vocab_size": 512,
        "d_model": 32,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
    },
)


@register_model(
    domain="nlp",
    task="translation",
    batch_size=(8, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    source="Ng et al., FAIR WMT19, 2019; Hugging Face transformers (Apache-2.0)",
    param_count=408_268_800,  # counted from the config (FAIR reports no total)
    hf_spec=WMT19_EN_DE,
)
def hf_FSMT(ctx: BuildContext, **kwargs: Any) -> Workload:
    """FAIR WMT19 en-de (FSMTForConditionalGeneration), transformer big with 8192-wide FFN, 256 tokens."""
    return create_hf_workload(ctx, WMT19_EN_DE, **kwargs)
