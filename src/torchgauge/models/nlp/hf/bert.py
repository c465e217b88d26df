"""BERT and its derivatives (ALBERT, DistilBERT, RoBERTa, XLM-R, ConvBERT) as masked language models.

Papers: Devlin et al., BERT, 2018; Lan et al., ALBERT, 2019; Sanh et al., DistilBERT, 2019;
Liu et al., RoBERTa, 2019; Conneau et al., XLM-R, 2019; Jiang et al., ConvBERT: Improving
BERT with Span-based Dynamic Convolution, NeurIPS 2020 (half of each layer's heads are
span-based dynamic convolutions whose kernels are generated per token, applied through
``F.unfold``). Implementation: Hugging Face
transformers ``*ForMaskedLM`` classes (Apache-2.0), random-initialised from the named
checkpoints' configs. TorchBench trains them on random token labels (Adam, lr 1e-3) at
sequence length 512; fambench_xlmr follows FAMBench's XLM-R run (sequence 64, batch 96,
SGD lr 0.01).
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_workload

_SOURCE_HF = "Hugging Face transformers (Apache-2.0)"

# size="smoke": two narrow layers and a 512-token vocabulary, same classes.
_SMOKE_BERT = {
    "vocab_size": 512,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}

BERT_BASE_UNCASED = HFModelSpec(
    checkpoint="bert-base-uncased",
    config_class="BertConfig",
    model_class="BertForMaskedLM",
    config={
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    },
    seq_len=(512, 512),
    smoke_config=_SMOKE_BERT,
)

BERT_LARGE_CASED = HFModelSpec(
    checkpoint="bert-large-cased",
    config_class="BertConfig",
    model_class="BertForMaskedLM",
    config={
        "vocab_size": 28996,
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    },
    seq_len=(512, 512),
    smoke_config=_SMOKE_BERT,
)

# TorchBench's hf_Bert_large: BertConfig(hidden_size=1024, num_hidden_layers=24,
# num_attention_heads=16), every other field BertConfig's default (30522-token uncased
# vocabulary, intermediate 3072: narrower than the published BERT-large's 4096).
BERT_LARGE_TORCHBENCH = HFModelSpec(
    checkpoint="BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16)",
    config_class="BertConfig",
    model_class="BertForMaskedLM",
    config={**BERT_BASE_UNCASED.config, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16},
    seq_len=(512, 512),
    smoke_config=_SMOKE_BERT,
)
ALBERT_BASE_V2 = HFModelSpec(
    checkpoint="albert-base-v2",
    config_class="AlbertConfig",
    model_class="AlbertForMaskedLM",
    config={
        "vocab_size": 30000,
        "embedding_size": 128,  # factorised embedding: 128 wide, projected to 768
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_hidden_groups": 1,  # all 12 layers share one set of weights
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.0,  # v2 checkpoints train without dropout
        "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
    },
    seq_len=(512, 512),
    smoke_config={**_SMOKE_BERT, "embedding_size": 16},
)

DISTILBERT_BASE_UNCASED = HFModelSpec(
    checkpoint="distilbert-base-uncased",
    config_class="DistilBertConfig",
    model_class="DistilBertForMaskedLM",
    config={
        "vocab_size": 30522,
        "dim": 768,
        "n_layers": 6,
        "n_heads": 12,
        "hidden_dim": 3072,
        "max_position_embeddings": 512,
        "activation": "gelu",
        "sinusoidal_pos_embds": False,
    },
    seq_len=(512, 512),
    smoke_config={"vocab_size": 512, "dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64},
)

# RoBERTa and XLM-R differ only in the vocabulary (BPE 50k vs SentencePiece 250k).
_ROBERTA_BASE_FIELDS = {
    "vocab_size": 50265,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 514,  # 512 positions + the padding offset of 2
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-5,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}

ROBERTA_BASE = HFModelSpec(
    checkpoint="roberta-base",
    config_class="RobertaConfig",
    model_class="RobertaForMaskedLM",
    config=_ROBERTA_BASE_FIELDS,
    seq_len=(512, 512),
    smoke_config=_SMOKE_BERT,
)

XLM_ROBERTA_BASE_TORCHBENCH = HFModelSpec(  # TorchBench's hf_Roberta_base: xlm-roberta-base at 512 tokens
    checkpoint="xlm-roberta-base",
    config_class="XLMRobertaConfig",
    model_class="XLMRobertaForMaskedLM",
    config={**_ROBERTA_BASE_FIELDS, "vocab_size": 250002},
    seq_len=(512, 512),
    smoke_config=_SMOKE_BERT,
)
XLM_ROBERTA_BASE = HFModelSpec(
    checkpoint="xlm-roberta-base",
    config_class="XLMRobertaConfig",
    model_class="XLMRobertaForMaskedLM",
    config={**_ROBERTA_BASE_FIELDS, "vocab_size": 250002},
    seq_len=(64, 64),  # FAMBench XLM-R default --sequence-length
    smoke_config=_SMOKE_BERT,
    optimizer="sgd",  # FAMBench trains with SGD, lr 0.01
    lr=0.01,
)

CONVBERT_BASE = HFModelSpec(
    checkpoint="YituTech/conv-bert-base",
    config_class="ConvBertConfig",
    model_class="ConvBertForMaskedLM",
    config={
        "vocab_size": 30522,
        "hidden_size": 768,
        "embedding_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "head_ratio": 2,
        "conv_kernel_size": 9,
        "num_groups": 1,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
    },
    seq_len=(512, 512),
    smoke_config={**_SMOKE_BERT, "embedding_size": 32},
)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Devlin et al., BERT, 2018; {_SOURCE_HF}",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=109_514_298,
    hf_spec=BERT_BASE_UNCASED,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_Bert(ctx: BuildContext, **kwargs: Any) -> Workload:
    """BERT-base uncased (BertForMaskedLM), sequence 512."""
    return create_hf_workload(ctx, BERT_BASE_UNCASED, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Devlin et al., BERT, 2018; {_SOURCE_HF}; TorchBench hf_Bert_large",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=284_818_234,
    hf_spec=BERT_LARGE_TORCHBENCH,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_Bert_large(ctx: BuildContext, **kwargs: Any) -> Workload:
    """TorchBench's BERT-large (BertForMaskedLM: 24 x 1024, intermediate 3072, uncased vocabulary), sequence 512."""
    return create_hf_workload(ctx, BERT_LARGE_TORCHBENCH, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Devlin et al., BERT, 2018; {_SOURCE_HF}",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf", "mlperf"),
    param_count=333_610_308,
    hf_spec=BERT_LARGE_CASED,
)
def bert_large_cased(ctx: BuildContext, **kwargs: Any) -> Workload:
    """BERT-large cased (BertForMaskedLM), sequence 512; MLPerf's language model."""
    return create_hf_workload(ctx, BERT_LARGE_CASED, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Lan et al., ALBERT, 2019; {_SOURCE_HF}",
    batch_size=(8, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=11_221_680,
    hf_spec=ALBERT_BASE_V2,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_Albert(ctx: BuildContext, **kwargs: Any) -> Workload:
    """ALBERT-base v2 (AlbertForMaskedLM), sequence 512."""
    return create_hf_workload(ctx, ALBERT_BASE_V2, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Sanh et al., DistilBERT, 2019; {_SOURCE_HF}",
    batch_size=(8, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=66_985_530,
    hf_spec=DISTILBERT_BASE_UNCASED,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_DistilBert(ctx: BuildContext, **kwargs: Any) -> Workload:
    """DistilBERT-base uncased (DistilBertForMaskedLM), sequence 512."""
    return create_hf_workload(ctx, DISTILBERT_BASE_UNCASED, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Conneau et al., XLM-R, 2019; {_SOURCE_HF}; TorchBench hf_Roberta_base",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=278_295_186,
    hf_spec=XLM_ROBERTA_BASE_TORCHBENCH,
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_Roberta_base(ctx: BuildContext, **kwargs: Any) -> Workload:
    """TorchBench's: xlm-roberta-base (XLMRobertaForMaskedLM), sequence 512."""
    return create_hf_workload(ctx, XLM_ROBERTA_BASE_TORCHBENCH, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Conneau et al., XLM-R, 2019; FAMBench; {_SOURCE_HF}",
    batch_size=(96, 96),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=278_295_186,
    hf_spec=XLM_ROBERTA_BASE,
)
def fambench_xlmr(ctx: BuildContext, **kwargs: Any) -> Workload:
    """XLM-R base (XLMRobertaForMaskedLM), FAMBench's sequence 64 and batch 96."""
    return create_hf_workload(ctx, XLM_ROBERTA_BASE, **kwargs)


@register_model(
    domain="nlp",
    task="masked_language_modeling",
    source=f"Jiang et al., ConvBERT, NeurIPS 2020; {_SOURCE_HF}",
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=106_303_170,
    hf_spec=CONVBERT_BASE,
)
def hf_ConvBert(ctx: BuildContext, **kwargs: Any) -> Workload:
    """ConvBERT-base (ConvBertForMaskedLM): mixed attention and span-based dynamic convolution, sequence 512."""
    return create_hf_workload(ctx, CONVBERT_BASE, **kwargs)
