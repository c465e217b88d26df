"""Graph neural networks on a full graph (GCN, GIN, GraphSAGE, EdgeCNN, GAT)."""

from . import basic_gnn  # noqa: F401  (registers models)
