"""Implicit-layer models: a deep equilibrium network solved for its fixed point."""

from . import deq_mdeq  # noqa: F401  (registers models)
