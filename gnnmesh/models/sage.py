"""GraphSAGE with mean aggregation (Hamilton et al., 2017): ``H' = H W_self + mean_N(H) W_neigh + b``."""

from __future__ import annotations

from torch import nn

from .base import SELF, GraphLayer, LayerStack, Maths, Term, layer_dims


class SAGELayer(GraphLayer):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim, bias=True)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def maths(self) -> Maths:
        return Maths((Term("mean", self.lin_neigh.weight), Term(SELF, self.lin_self.weight)), self.lin_self.bias)


class SAGE(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 16, layers: int = 2,
                 dropout: float = 0.5):
        super().__init__(dropout)
        self.layers.extend(SAGELayer(i, o) for i, o in layer_dims(in_dim, hidden, num_classes, layers))
