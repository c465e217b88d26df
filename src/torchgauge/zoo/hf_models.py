"""``hf:MODEL_TYPE``: a Hugging Face ``transformers`` (Apache-2.0) text model, random-initialised
from the model type's default config (``AutoConfig.for_model``; nothing is downloaded).

The head is the first of sequence-to-sequence LM, masked LM and causal LM that the model
type has, so ``hf:t5`` is ``T5ForConditionalGeneration``, ``hf:bert`` ``BertForMaskedLM``
and ``hf:gpt2`` ``GPT2LMHeadModel``; training uses the model's own loss on random labels,
as the built-in ``hf_*`` models (:mod:`torchgauge.models.nlp.hf.factory`) do.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..models.nlp.hf.factory import ATTN_IMPLEMENTATION, HF_PRELOAD, seq2seq_inputs, token_inputs
from ..registry import ModelSpec, UnknownModelError
from ..workload import BuildContext, Workload

__all__ = ["FULL_SEQ_LEN", "SMOKE_CONFIG", "SMOKE_SEQ_LEN", "zoo_spec"]

# (auto class, its mapping in transformers, input recipe), most specific head first.
_HEADS = (
    ("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING", seq2seq_inputs),
    ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING", token_inputs),
    ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING", token_inputs),
)
FULL_SEQ_LEN = 128  # tokens per sequence at size="full" (capped by max_position_embeddings)
SMOKE_SEQ_LEN = 16
# size="smoke": the fields of this table that the config has are shrunk (two narrow layers),
# the other fields keep the model type's defaults.
SMOKE_CONFIG = {
    "num_hidden_layers": 2,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "hidden_size": 64,
    "d_model": 64,
    "num_attention_heads": 2,
    "num_heads": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "intermediate_size": 128,
    "d_ff": 128,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "d_kv": 32,
}


def _head(transformers: ModuleType, config: Any) -> tuple[Any, Any] | None:
    for auto_name, mapping_name, recipe in _HEADS:
        mapping = getattr(transformers, mapping_name, None)
        if mapping is not None and type(config) in mapping:
            return getattr(transformers, auto_name), recipe
    return None


def _config(transformers: ModuleType, model_type: str, smoke: bool, overrides: dict[str, Any]) -> Any:
    defaults = transformers.AutoConfig.for_model(model_type)
    shrink = {k: v for k, v in SMOKE_CONFIG.items() if smoke and hasattr(defaults, k)}
    return transformers.AutoConfig.for_model(model_type, **{**shrink, **overrides})


def _model_loss(outputs: Any, targets: Any) -> Any:
    return outputs.loss  # computed by the model from the `labels` among its inputs


def _build(ctx: BuildContext, *, model_type: str, **overrides: Any) -> Workload:
    import transformers

    config = _config(transformers, model_type, ctx.smoke, {"use_cache": False, **overrides})
    auto_class, recipe = _head(transformers, config)
    if recipe is seq2seq_inputs and getattr(config, "decoder_start_token_id", None) is None:
        # Checkpoints set it (t5-small: 0, the pad id); bare defaults may not, and training
        # shifts the labels right with it into the decoder's inputs.
        config.decoder_start_token_id = getattr(config, "pad_token_id", None) or 0
    module = auto_class.from_config(config, attn_implementation=ATTN_IMPLEMENTATION)
    max_positions = getattr(config, "max_position_embeddings", None) or FULL_SEQ_LEN
    seq_len = ctx.pick(min(FULL_SEQ_LEN, max_positions), SMOKE_SEQ_LEN)
    optimizer = ctx.optimizer(module.parameters(), "adam", lr=1e-3) if ctx.train else None
    return Workload(ctx, module, recipe(ctx, config, seq_len), loss_fn=_model_loss, optimizer=optimizer)


def zoo_spec(model_type: str, transformers: ModuleType) -> ModelSpec:
    """The spec of ``hf:<model_type>``; UnknownModelError for unknown or non-text model types."""
    if model_type not in transformers.CONFIG_MAPPING:
        import difflib

        close = difflib.get_close_matches(model_type, list(transformers.CONFIG_MAPPING.keys()), n=5, cutoff=0.6)
        hint = f"; did you mean: {', '.join(close)}?" if close else "; accepted: a key of transformers.CONFIG_MAPPING"
        raise UnknownModelError(f"transformers has no model type {model_type!r}{hint}")
    config = transformers.AutoConfig.for_model(model_type)
    head = _head(transformers, config)
    if head is None or not hasattr(config, "vocab_size"):
        raise UnknownModelError(
            f"hf:{model_type} has no language-model head (seq2seq, masked or causal LM); "
            "accepted: text model types such as bert, gpt2, t5"
        )
    return ModelSpec(
        name=f"hf:{model_type}",
        builder=lambda ctx, **kwargs: _build(ctx, model_type=model_type, **kwargs),
        domain="nlp",
        task="language_modeling",
        source=f"Hugging Face transformers {transformers.__version__} {type(config).__name__} defaults "
        f"with {head[0].__name__} (Apache-2.0), random weights",
        train_batch_size=8,
        eval_batch_size=8,
        tags=frozenset({"zoo", "hf"}),
        module=__name__,
        preload=HF_PRELOAD,
    )
