"""Self-supervised learning: momentum contrast (MoCo v1, v2)."""

from . import moco  # noqa: F401  (registers models)
