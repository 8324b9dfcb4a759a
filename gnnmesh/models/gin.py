"""GIN (Xu et al., 2019): ``H' = MLP((1 + eps) H + A H)`` with a learnable ``eps``."""

from __future__ import annotations

import torch
from torch import nn

from .base import SELF, GraphLayer, LayerStack, Maths, Term, layer_dims


class GINLayer(GraphLayer):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))

    def maths(self) -> Maths:
        # The MLP's first linear map commutes with the sum aggregation: ``(A H + (1 + eps) H) W_1^T``.
        first = self.mlp[0]
        return Maths((Term("sum", first.weight), Term(SELF, first.weight, self.eps)), first.bias,
                     act=self.mlp[1], out=self.mlp[2])


class GIN(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64, layers: int = 2,
                 dropout: float = 0.5):
        super().__init__(dropout)
        self.layers.extend(GINLayer(i, o) for i, o in layer_dims(in_dim, hidden, num_classes, layers))
