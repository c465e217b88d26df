"""Hugging Face transformers models, random-initialised from configs built in code."""

from . import bart, bert, clip, gpt2, long_sequence, t5, whisper  # noqa: F401  (registers models)
