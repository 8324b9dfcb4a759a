"""GNN models written once on the GraphView primitives (spmm, sddmm, edge_softmax, dropout),
and the pieces a user's model is built from: ``LayerStack``, ``GraphLayer``, ``Maths``, ``Term``
(``SELF``: a term on the layer's input itself). What each strategy needs of a model:
``gnnmesh.models.contract``."""

from __future__ import annotations

from .base import SELF, GraphLayer, LayerStack, Maths, Term
from .decoupled import Decoupled
from .gat import GAT
from .gcn import GCN
from .gin import GIN
from .sage import SAGE

MODELS = {"gcn": GCN, "sage": SAGE, "gat": GAT, "gin": GIN}


# The decoupled form of each model that has one (Decoupled's keyword arguments).
DECOUPLED = {"gcn": {}, "sage": {"op": "mean"}, "gat": {"attention": True}}


def build_model(name: str, in_dim: int, num_classes: int, decoupled: bool = False, **options):
    """Instantiate a model by name; ``options`` are its constructor's keyword arguments.
    ``decoupled`` builds the model's decoupled form (its NN layers, then propagation)."""
    key = name.lower()
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    if decoupled:
        if key not in DECOUPLED:
            raise ValueError(f"model {name!r} has no decoupled form; choose from gcn, sage, gat")
        return Decoupled(in_dim, num_classes, **DECOUPLED[key], **options)
    return MODELS[key](in_dim, num_classes, **options)


__all__ = ["MODELS", "DECOUPLED", "build_model", "GCN", "SAGE", "GAT", "GIN", "Decoupled", "LayerStack",
           "GraphLayer", "Maths", "Term", "SELF"]
