"""GNN models written once on the GraphView primitives (spmm, sddmm, edge_softmax, dropout)."""

from __future__ import annotations

from .decoupled import Decoupled
from .gat import GAT
from .gcn import GCN
from .gin import GIN
from .sage import SAGE

MODELS = {"gcn": GCN, "sage": SAGE, "gat": GAT, "gin": GIN, "decoupled": Decoupled}


def build_model(name: str, in_dim: int, num_classes: int, **options):
    """Instantiate a model by name; ``options`` are its constructor's keyword arguments."""
    key = name.lower()
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    return MODELS[key](in_dim, num_classes, **options)


__all__ = ["MODELS", "build_model", "GCN", "SAGE", "GAT", "GIN", "Decoupled"]
