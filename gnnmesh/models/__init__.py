"""GNN models written once on the GraphView primitives (spmm, sddmm, edge_softmax, dropout),
and the pieces a user's model is built from: ``LayerStack``, ``GraphLayer``, ``Maths``, ``Term``
(``SELF``: a term on the layer's input itself). What each strategy needs of a model:
``gnnmesh.models.contract``. The models are named once, in ``registry``."""

from __future__ import annotations

import inspect

from .base import SELF, GraphLayer, LayerStack, Maths, Term
from .decoupled import Decoupled
from .gat import GAT
from .gatv2 import GATv2
from .gcn import GCN
from .gin import GIN
from .gine import GINE
from .per_relation import per_relation
from .registry import ModelSpec, is_built_in, names, register, spec
from .row_wise import BatchNorm, Dropout
from .sage import SAGE



def build_model(name: str, in_dim: int, num_classes: int, decoupled: bool = False, **options):
    """Instantiate a registered model by name; ``options`` are its constructor's keyword
    arguments. ``decoupled`` builds the model's decoupled form (its NN layers, then propagation)."""
    key = name.lower()
    if not is_built_in(key):
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(names())}")
    model = spec(key)
    if decoupled:
        if model.decoupled is None:
            raise ValueError(f"model {name!r} has no decoupled form; choose from {', '.join(names(decoupled=True))}")
        return Decoupled(in_dim, num_classes, **model.decoupled, **options)
    return model.model(in_dim, num_classes, **options)


def options_of(name: str, decoupled: bool = False) -> tuple:
    """The constructor options the registered model ``name`` (its ``decoupled`` form) takes, as
    its class declares them in its signature: what a setting such as ``--heads`` must be one
    of to apply. The decoupled form's fixed arguments (``op``, ``attention``) are not options,
    nor are its attention options without attention."""
    key = name.lower()
    if not is_built_in(key) or (decoupled and spec(key).decoupled is None):
        raise ValueError(f"unknown model {name!r}{' (decoupled)' if decoupled else ''}")
    model = spec(key)
    skipped = {"self", "in_dim", "num_classes"}
    if decoupled:
        skipped |= {"op", "attention"}
        if not model.decoupled.get("attention"):
            skipped |= set(Decoupled.ATTENTION_OPTIONS)
    return tuple(p for p in inspect.signature(model.form(decoupled).__init__).parameters if p not in skipped)


__all__ = ["ModelSpec", "register", "names", "spec", "is_built_in", "build_model", "options_of", "GCN", "SAGE", "GAT", "GATv2", "GIN", "GINE", "Decoupled", "LayerStack",
           "GraphLayer", "Maths", "Term", "SELF", "BatchNorm", "Dropout", "per_relation"]
