"""One helper that turns (config class, model class, input recipe) into a Workload.

Every model of this package is a Hugging Face ``transformers`` (Apache-2.0) model class,
random-initialised from a config built in code: the architecture fields of a named hub
checkpoint are copied into :class:`HFModelSpec` tables, nothing is downloaded (no hub,
no token, never ``from_pretrained``). Training feeds ``labels`` and uses the model's own
``outputs.loss``; evaluation is a plain forward. The ``*_generate`` models run
``generate()`` instead: greedy decoding of a fixed number of new tokens with a static
KV cache, i.e. a decode loop of small kernels where host overhead matters.

``transformers`` is an optional extra: it is imported inside the builders only, so these
models register without it and their builders raise :class:`UnsupportedError` instead.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from torch import nn

from ....workload import BuildContext, UnsupportedError, Workload

__all__ = [
    "ATTN_IMPLEMENTATION",
    "HF_PRELOAD",
    "TRANSFORMERS_MISSING",
    "HFModelSpec",
    "GenerationWorkload",
    "create_hf_generation",
    "create_hf_workload",
    "import_transformers",
    "seq2seq_inputs",
    "token_inputs",
]

TRANSFORMERS_MISSING = "transformers not installed (pip install torchgauge[hf])"

# transformers' model base (about 6 s to import on a 2-core CPU, most of a smoke run): the
# runner's forkserver imports it once when these models are selected (a no-op without it).
HF_PRELOAD = ("transformers.modeling_utils",)

# One attention implementation for every model: "eager" is the only one that all of
# these classes support (Longformer, BigBird and Reformer have their own attention
# kernels and reject "sdpa"), so numbers compare across models and match TorchBench's.
ATTN_IMPLEMENTATION = "eager"

# Forward-only workloads never decode, so a returned KV cache would be built and dropped.
_FORWARD_ONLY_CONFIG = {"use_cache": False}

# An input recipe makes the model's keyword inputs: (ctx, config, seq_len) -> kwargs.
InputRecipe = Callable[[BuildContext, Any, int], dict]


def import_transformers() -> ModuleType:
    """The ``transformers`` module, or :class:`UnsupportedError` when it is not installed."""
    try:
        return importlib.import_module("transformers")
    except ImportError as exc:
        raise UnsupportedError(TRANSFORMERS_MISSING) from exc


def _transformers_class(transformers: ModuleType, name: str) -> type:
    # Architectures get retired from transformers (Reformer is deprecated): say so, do not fake them.
    try:
        return getattr(transformers, name)
    except AttributeError:
        raise UnsupportedError(f"transformers {transformers.__version__} no longer has {name}") from None


def token_inputs(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Token ids ``(B, T)``, plus random ``labels (B, T)`` in training (as TorchBench does)."""
    inputs = {"input_ids": ctx.randint(0, config.vocab_size, (ctx.batch_size, seq_len))}
    if ctx.train:
        inputs["labels"] = ctx.randint(0, config.vocab_size, (ctx.batch_size, seq_len))
    return inputs


def seq2seq_inputs(ctx: BuildContext, config: Any, seq_len: int) -> dict:
    """Encoder ids ``(B, T)`` and decoder ``labels`` (train) or ``decoder_input_ids`` (eval) of length T."""
    inputs = {"input_ids": ctx.randint(0, config.vocab_size, (ctx.batch_size, seq_len))}
    decoder_key = "labels" if ctx.train else "decoder_input_ids"
    inputs[decoder_key] = ctx.randint(0, config.vocab_size, (ctx.batch_size, seq_len))
    return inputs


def _merge(base: Mapping[str, Any], *updates: Mapping[str, Any]) -> dict:
    # Nested sub-configs (CLIP's text_config / vision_config) merge key by key.
    merged = dict(base)
    for update in updates:
        for key, value in update.items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged


@dataclass(frozen=True)
class HFModelSpec:
    """A hub checkpoint's architecture as data, plus how TorchBench feeds it."""

    checkpoint: str  # hub name whose config.json these fields copy (never downloaded)
    config_class: str  # transformers config class, e.g. "BertConfig"
    model_class: str  # head class; its parameter count is the registered one
    config: Mapping[str, Any]  # the checkpoint's architecture fields
    seq_len: tuple[int, int]  # (train, eval) sequence length at size="full" (TorchBench's)
    # Eval sequence length on CPU where TorchBench shortens it (its CPU_INPUT_SLICE divisor
    # of the eval length, e.g. GPT-2 1024 / 4); None: the same as on any other device.
    cpu_eval_seq_len: int | None = None
    inputs: InputRecipe = token_inputs
    smoke_seq_len: int = 16
    # size="smoke": same classes, fewer layers and narrower, with a small vocabulary,
    # so that creating the model and two steps stay well under 2 s on one CPU core.
    smoke_config: Mapping[str, Any] = field(default_factory=dict)
    optimizer: str = "adam"  # TorchBench's HF models train with Adam(lr=1e-3)
    lr: float = 1e-3
    optimizer_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def build_config(self, transformers: ModuleType, *, smoke: bool = False, **overrides: Any) -> Any:
        """The config object: checkpoint fields, smoke shrinkage, then caller overrides."""
        fields = _merge(self.config, self.smoke_config if smoke else {}, overrides)
        config_class = _transformers_class(transformers, self.config_class)
        return config_class(**fields, attn_implementation=ATTN_IMPLEMENTATION)

    def build_model(self, transformers: ModuleType, config: Any, device: torch.device) -> nn.Module:
        """Random-initialised model, created directly on ``device`` (fast init on GPU)."""
        with torch.device(device):
            return _transformers_class(transformers, self.model_class)(config)


def _model_loss(outputs: Any, targets: Any) -> torch.Tensor:
    # The model computed its own loss from the `labels` among its inputs.
    return outputs.loss


def _eval_seq_len(ctx: BuildContext, spec: HFModelSpec, length: int) -> int:
    # TorchBench cuts eval inputs on CPU to ``spec.cpu_eval_seq_len`` (its CPU_INPUT_SLICE).
    if ctx.device.type == "cpu" and spec.cpu_eval_seq_len is not None:
        return spec.cpu_eval_seq_len
    return length


def create_hf_workload(ctx: BuildContext, spec: HFModelSpec, **overrides: Any) -> Workload:
    """Workload for ``spec``: train on ``outputs.loss``, eval a forward pass.

    Args:
        ctx: the build context.
        spec: checkpoint config, model class and input recipe.
        overrides: config fields merged over the checkpoint's (e.g. ``num_hidden_layers=4``).
    """
    transformers = import_transformers()
    config = spec.build_config(transformers, smoke=ctx.smoke, **_merge(_FORWARD_ONLY_CONFIG, overrides))
    model = spec.build_model(transformers, config, ctx.device)
    seq_len = ctx.pick(spec.seq_len[0] if ctx.train else _eval_seq_len(ctx, spec, spec.seq_len[1]), spec.smoke_seq_len)
    inputs = spec.inputs(ctx, config, seq_len)
    optimizer = None
    if ctx.train:
        optimizer = ctx.optimizer(model.parameters(), spec.optimizer, lr=spec.lr, **spec.optimizer_kwargs)
    return Workload(ctx, model, inputs, loss_fn=_model_loss, optimizer=optimizer)


class GenerationWorkload(Workload):
    """Eval only: ``generate()`` greedy decoding of exactly ``new_tokens`` tokens per prompt.

    ``step()`` returns the generate output: ``sequences`` (token ids) and ``logits``, a
    tuple with one ``(B, V)`` tensor of raw logits per generated token.
    """

    needs_optimizer = False

    def __init__(self, ctx: BuildContext, module: nn.Module, inputs: dict, generation_config: Any) -> None:
        super().__init__(ctx, module, inputs)
        self.generation_config = generation_config

    def forward(self) -> Any:
        return self.module.generate(**self.inputs, generation_config=self.generation_config)


def create_hf_generation(
    ctx: BuildContext,
    spec: HFModelSpec,
    *,
    prompt_len: int,
    new_tokens: int,
    cpu_prompt_len: int | None = None,
    static_cache: bool = True,
    attention_mask: bool = True,
    **overrides: Any,
) -> Workload:
    """Greedy ``generate()`` of ``new_tokens`` tokens after a random prompt of ``prompt_len``.

    ``min_new_tokens = max_new_tokens`` fixes the decode length; ``static_cache`` preallocates
    the KV cache (``cache_implementation="static"``) for models that support it. Both lengths
    are the full-size values, ``cpu_prompt_len`` the prompt on CPU where it differs (TorchBench
    shortens it); smoke size uses ``spec.smoke_seq_len`` and 4 new tokens. ``attention_mask=False``
    passes the prompt alone, as TorchBench's generate models do.
    """
    transformers = import_transformers()
    config = spec.build_config(transformers, smoke=ctx.smoke, **overrides)
    model = spec.build_model(transformers, config, ctx.device)
    if ctx.device.type == "cpu" and cpu_prompt_len is not None:
        prompt_len = cpu_prompt_len
    prompt_len, new_tokens = ctx.pick((prompt_len, new_tokens), (spec.smoke_seq_len, 4))
    prompt = ctx.randint(0, config.vocab_size, (ctx.batch_size, prompt_len))
    inputs = {"input_ids": prompt}
    if attention_mask:  # the tokenizer's mask: every prompt token is real (no padding in a synthetic batch)
        inputs["attention_mask"] = torch.ones_like(prompt)
    generation_config = transformers.GenerationConfig(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        num_beams=1,
        use_cache=True,
        cache_implementation="static" if static_cache else None,
        pad_token_id=config.pad_token_id if config.pad_token_id is not None else config.eos_token_id,
        output_logits=True,  # raw logits: floating outputs to check, unlike token ids
        return_dict_in_generate=True,
    )
    return GenerationWorkload(ctx, model, inputs, generation_config)
