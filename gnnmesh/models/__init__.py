"""GNN models written once on the GraphView primitives (spmm, sddmm, edge_softmax, dropout),
and the pieces a user's model is built from: ``LayerStack``, ``GraphLayer``, ``Maths``, ``Term``
(``SELF``: a term on the layer's input itself). What each strategy needs of a model:
``gnnmesh.models.contract``."""

from __future__ import annotations

import inspect

from .base import SELF, GraphLayer, LayerStack, Maths, Term
from .decoupled import Decoupled
from .gat import GAT
from .gcn import GCN
from .gin import GIN
from .row_wise import BatchNorm, Dropout
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


def options_of(name: str, decoupled: bool = False) -> tuple:
    """The constructor options the built-in model ``name`` (its ``decoupled`` form) takes, as
    its class declares them in its signature: what a setting such as ``--heads`` must be one
    of to apply. The decoupled form's fixed arguments (``op``, ``attention``) are not options,
    nor are its attention options without attention."""
    key = name.lower()
    if key not in MODELS or (decoupled and key not in DECOUPLED):
        raise ValueError(f"unknown model {name!r}{' (decoupled)' if decoupled else ''}")
    cls = Decoupled if decoupled else MODELS[key]
    skipped = {"self", "in_dim", "num_classes"}
    if decoupled:
        skipped |= {"op", "attention"}
        if not DECOUPLED[key].get("attention"):
            skipped |= set(Decoupled.ATTENTION_OPTIONS)
    return tuple(p for p in inspect.signature(cls.__init__).parameters if p not in skipped)


__all__ = ["MODELS", "DECOUPLED", "build_model", "options_of", "GCN", "SAGE", "GAT", "GIN", "Decoupled", "LayerStack",
           "GraphLayer", "Maths", "Term", "SELF", "BatchNorm", "Dropout"]
