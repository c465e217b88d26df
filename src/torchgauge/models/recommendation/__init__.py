"""Recommendation models: one file per architecture family, imported here to register them."""

from . import deep_recommender, dlrm, knowledge_graph  # noqa: F401  (registers models)
