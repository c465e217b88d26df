"""NLP models: our own transformers here; Hugging Face models (from configs) in ``hf``."""

from . import hf  # noqa: F401  (registers models)
from . import bert, cm3leon, convs2s, gpt, gpt_fast, llama, modded_nanogpt, transformer, word2vec, word_language_model  # noqa: F401  (registers models)
