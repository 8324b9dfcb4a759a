"""GCN (Kipf & Welling, 2017): ``H' = D^-1/2 (A+I) D^-1/2 H W + b``."""

from __future__ import annotations

import torch
from torch import nn

from .base import GraphLayer, LayerStack, Maths, Term, layer_dims


class GCNLayer(GraphLayer):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        nn.init.xavier_uniform_(self.lin.weight)

    def maths(self) -> Maths:
        return Maths((Term("gcn", self.lin.weight),), self.bias)


class GCN(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 16, layers: int = 2,
                 dropout: float = 0.5):
        super().__init__(dropout)
        self.layers.extend(GCNLayer(i, o) for i, o in layer_dims(in_dim, hidden, num_classes, layers))
