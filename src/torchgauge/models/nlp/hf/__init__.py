"""Hugging Face transformers models, random-initialised from configs built in code."""

from . import (  # noqa: F401  (registers models)
    bart,
    bert,
    bloom,
    canine,
    clip,
    fastnlp_bert,
    fnet,
    fsmt,
    gpt2,
    llama2,
    llava,
    long_sequence,
    olmoe,
    phi,
    rwkv,
    sam,
    t5,
    whisper,
)
