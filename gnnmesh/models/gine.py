"""GINE (Hu et al., 2020, "Strategies for pre-training graph neural networks"): GIN with edge
features in its messages, as PyG's ``GINEConv``:

``h'_i = MLP((1 + eps) h_i + sum_j ReLU(h_j + W_e f_ji))``, with a learnable ``eps`` and
``W_e`` the linear map of the edge features to the input width (PyG's ``lin``, present when
``edge_dim`` is given). The ReLU is per edge, so the sum is not a product of the adjacency
with a matrix: each edge's message is made (``view.sddmm``) and summed into its destination
(``view.edge_sum``) over the graph's own entries (``"sum"``, no self-loops).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .base import LayerStack, layer_dims


class GINELayer(nn.Module):
    operators = ("sum",)  # what a mini-batch samples for it (``gnnmesh.models.contract``)

    def __init__(self, in_dim: int, out_dim: int, edge_dim: int):
        super().__init__()
        self.edge_dim = edge_dim
        self.eps = nn.Parameter(torch.zeros(1))
        self.lin = nn.Linear(edge_dim, in_dim)
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))
        self.out_features = out_dim

    def forward(self, view, h):
        edges = self.lin(view.edge_features("sum"))
        sources = view.sddmm(h.new_zeros(h.shape), h, "sum", "add")  # h_j on each of the view's entries
        messages = view.edge_sum(F.relu(sources + edges), "sum")
        return self.mlp((1 + self.eps) * view.destinations(h) + messages)


class GINE(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64, layers: int = 2,
                 dropout: float = 0.5, edge_dim: int = 0):
        super().__init__(dropout)
        if not edge_dim:
            raise ConfigError("model gine needs edge features (edge_dim >= 1): load a graph that has them, "
                              "e.g. a PyG Data with a 2-D edge_attr, or train gin")
        self.layers.extend(GINELayer(i, o, edge_dim) for i, o in layer_dims(in_dim, hidden, num_classes, layers))
