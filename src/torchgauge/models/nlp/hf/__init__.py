"""Hugging Face transformers models, random-initialised from configs built in code."""

from . import bart, bert, bloom, canine, clip, fnet, fsmt, gpt2, long_sequence, olmoe, rwkv, t5, whisper  # noqa: F401  (registers models)
