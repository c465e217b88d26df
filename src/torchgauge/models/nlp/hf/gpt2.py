"""GPT-2 (124M and large) causal language models and a greedy generation loop.

Paper: Radford et al., Language Models are Unsupervised Multitask Learners, 2019.
Implementation: Hugging Face transformers ``GPT2LMHeadModel`` (Apache-2.0), random-initialised
from the gpt2 / gpt2-large configs. TorchBench trains at 512 tokens and evaluates at 1024
(the full context); the TorchBench paper lists this pair as ``hf_ptg1``.
"""

from __future__ import annotations

from typing import Any

from ....registry import register_model
from ....workload import BuildContext, Workload
from ...common.torchbench_precision import HUGGINGFACE_FACTORY
from .factory import HF_PRELOAD, HFModelSpec, create_hf_generation, create_hf_workload

_SOURCE = "Radford et al., GPT-2, 2019; Hugging Face transformers (Apache-2.0)"

_SMOKE_GPT2 = {
    "vocab_size": 512,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 2,
    "bos_token_id": 511,  # <|endoftext|> is the last id, as in the 50257-token vocabulary
    "eos_token_id": 511,
}


def _gpt2_spec(
    checkpoint: str, *, n_embd: int, n_layer: int, n_head: int, cpu_eval_seq_len: int | None = None
) -> HFModelSpec:
    # gpt2 and gpt2-large share every field but width, depth and heads.
    config = {
        "vocab_size": 50257,
        "n_positions": 1024,
        "n_embd": n_embd,
        "n_layer": n_layer,
        "n_head": n_head,
        "activation_function": "gelu_new",
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
        "attn_pdrop": 0.1,
        "layer_norm_epsilon": 1e-5,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
    }
    return HFModelSpec(
        checkpoint=checkpoint,
        config_class="GPT2Config",
        model_class="GPT2LMHeadModel",
        config=config,
        seq_len=(512, 1024),
        cpu_eval_seq_len=cpu_eval_seq_len,
        smoke_config=_SMOKE_GPT2,
    )


GPT2 = _gpt2_spec("gpt2", n_embd=768, n_layer=12, n_head=12, cpu_eval_seq_len=256)  # TorchBench: 1024 / 4 on CPU
GPT2_LARGE = _gpt2_spec("gpt2-large", n_embd=1280, n_layer=36, n_head=20)


@register_model(
    domain="nlp",
    task="language_modeling",
    source=_SOURCE,
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=124_439_808,
    hf_spec=GPT2,
    torchbench_name="hf_ptg1",
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_GPT2(ctx: BuildContext, **kwargs: Any) -> Workload:
    """GPT-2 124M (GPT2LMHeadModel), 512 / 1024 tokens."""
    return create_hf_workload(ctx, GPT2, **kwargs)


@register_model(
    domain="nlp",
    task="language_modeling",
    source=_SOURCE,
    batch_size=(4, 1),
    preload=HF_PRELOAD,
    tags=("hf",),
    param_count=774_030_080,
    hf_spec=GPT2_LARGE,
    torchbench_name="hf_ptg1",
    torchbench_precision=HUGGINGFACE_FACTORY,
)
def hf_GPT2_large(ctx: BuildContext, **kwargs: Any) -> Workload:
    """GPT-2 large 774M (GPT2LMHeadModel), 512 / 1024 tokens."""
    return create_hf_workload(ctx, GPT2_LARGE, **kwargs)


@register_model(
    domain="nlp",
    task="text_generation",
    source=_SOURCE,
    batch_size=1,
    modes=("eval",),
    preload=HF_PRELOAD,
    tags=("hf", "generation"),
    param_count=124_439_808,
    hf_spec=GPT2,
)
def hf_GPT2_generate(ctx: BuildContext, **kwargs: Any) -> Workload:
    """GPT-2 generate(): 768-token prompt, 256 greedy new tokens (fills the 1024 context), static cache."""
    return create_hf_generation(ctx, GPT2, prompt_len=768, new_tokens=256, **kwargs)
