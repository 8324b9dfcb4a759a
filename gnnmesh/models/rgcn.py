"""R-GCN (Schlichtkrull et al., 2018) on a typed graph:
``H' = H W_0 + sum_r mean_r(H) W_r + b``, one weight per relation, ``mean_r`` the mean over a
node's in-neighbours by relation r (``"mean@r"``, ``gnnmesh.relations``).

Optionally with basis decomposition (``bases = B``): every ``W_r`` is a learned mix
``sum_b a_rb V_b`` of B shared matrices, so the weights grow with B, not with the relations.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import ConfigError
from ..relations import SEPARATOR
from .base import SELF, GraphLayer, LayerStack, Maths, Term, layer_dims


def relation_names(relations, model: str = "rgcn") -> tuple:
    """The relations ``model`` is built for, from a tuple or their comma-separated names."""
    names = tuple(r for r in relations.split(",") if r) if isinstance(relations, str) else tuple(relations or ())
    if not names:
        raise ConfigError(f"model {model} needs a typed graph (its relations name its weights): load one with "
                          "node types and relations, e.g. an OGB heterogeneous directory or HeteroData")
    return names


class RGCNLayer(GraphLayer):
    def __init__(self, in_dim: int, out_dim: int, relations: tuple, bases: int = 0):
        super().__init__()
        self.relations = relations
        self.root = nn.Linear(in_dim, out_dim, bias=True)
        if bases:
            self.basis = nn.Parameter(torch.empty(bases, out_dim, in_dim))
            self.mix = nn.Parameter(torch.empty(len(relations), bases))
            nn.init.xavier_uniform_(self.basis)
            nn.init.xavier_uniform_(self.mix)
        else:
            self.weight = nn.Parameter(torch.empty(len(relations), out_dim, in_dim))
            nn.init.xavier_uniform_(self.weight)
        self.bases = bases

    def relation_weights(self) -> torch.Tensor:
        """``[R, out, in]``: each relation's W_r."""
        if self.bases:
            return torch.einsum("rb,boi->roi", self.mix, self.basis)
        return self.weight

    def maths(self) -> Maths:
        weights = self.relation_weights()
        terms = tuple(Term(f"mean{SEPARATOR}{r}", weights[i]) for i, r in enumerate(self.relations))
        return Maths(terms + (Term(SELF, self.root.weight),), self.root.bias)


class RGCN(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 16, layers: int = 2,
                 dropout: float = 0.5, relations=(), bases: int = 0):
        super().__init__(dropout)
        names = relation_names(relations)
        self.layers.extend(RGCNLayer(i, o, names, bases) for i, o in layer_dims(in_dim, hidden, num_classes, layers))
