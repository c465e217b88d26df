"""Private training: DP-SGD with per-sample gradient clipping and noise."""

from . import differential_privacy  # noqa: F401  (registers models)
