"""Sequence models outside NLP: orthogonal and state-space RNNs, a sequential VAE of neural spikes and a
linear-chain CRF.
"""

from . import (  # noqa: F401  (registers models)
    exprnn,
    lfads,
    linear_chain_crf,
    s4d,
)
