"""NLP models: our own transformers here; Hugging Face models (from configs) in ``hf``."""

from . import hf  # noqa: F401  (registers models)
from . import bert, gpt, llama, transformer  # noqa: F401  (registers models)
