"""GIN (Xu et al., 2019): ``H' = MLP((1 + eps) H + A H)`` with a learnable ``eps``."""

from __future__ import annotations

import torch
from torch import nn

from .base import LayerStack, layer_dims


class GINLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))

    def forward(self, view, h):
        first = self.mlp[0]
        # The first linear map commutes with the sum aggregation: aggregate the narrower side.
        if first.out_features < first.in_features:
            z = h @ first.weight.t()
            z = (1 + self.eps) * z + view.spmm(z, "sum") + first.bias
        else:
            z = first((1 + self.eps) * h + view.spmm(h, "sum"))
        return self.mlp[2](self.mlp[1](z))


class GIN(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64, layers: int = 2,
                 dropout: float = 0.5):
        super().__init__(dropout)
        self.layers.extend(GINLayer(i, o) for i, o in layer_dims(in_dim, hidden, num_classes, layers))
