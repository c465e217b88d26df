"""Compiler microbenchmarks: not models, single patterns a compiler must handle."""

from . import unbacked_tolist  # noqa: F401  (registers models)
