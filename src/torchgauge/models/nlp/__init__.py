"""NLP models: our own transformers here; Hugging Face models (from configs) in ``hf``."""

from . import (  # noqa: F401  (registers models)
    bert,
    cm3leon,
    convs2s,
    gpt,
    gpt_fast,
    hf,  # noqa: F401  (registers models)
    llama,
    modded_nanogpt,
    transformer,
    word2vec,
    word_language_model,
)
