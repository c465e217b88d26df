"""Time-series forecasting: Autoformer, DeepAR, PatchTST, Temporal Fusion Transformer.

``synthetic_series`` holds the seeded series they share and registers no model.
"""

from . import (  # noqa: F401  (registers models)
    autoformer,
    deepar,
    patchtst,
    temporal_fusion_transformer,
)
