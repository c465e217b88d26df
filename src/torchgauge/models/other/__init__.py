"""Models outside the five main domains, one subpackage per field, one file per architecture family.

Every model here is registered with ``domain="other"``; the subpackage only says where its file lives.
"""

from . import (  # noqa: F401  (registers models)
    graph,
    implicit,
    meta_learning,
    microbench,
    privacy,
    probabilistic,
    scientific,
    self_supervised,
    sequence,
    timeseries,
)
