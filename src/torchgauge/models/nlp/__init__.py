"""NLP models: our own transformers here; Hugging Face models (from configs) in ``hf``."""

from . import (  # noqa: F401  (registers models)
    bert,
    cm3leon,
    convs2s,
    gpt,
    gpt_fast,
    hf,
    llama,
    modded_nanogpt,
    transformer,
    word2vec,
    word_language_model,
)
