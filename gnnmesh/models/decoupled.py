"""Decoupled model (APPNP, Gasteiger et al., 2019): an MLP, then K propagation steps.

``H_0 = MLP(X)``, ``H_{k+1} = (1 - alpha) Â H_k + alpha H_0`` with ``Â`` the GCN operator.
All dense work happens before any graph work, which is what tensor-parallel training
exploits: the MLP runs on vertex rows, the propagation on feature columns.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import layer_dims


class Decoupled(nn.Module):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64, layers: int = 2,
                 dropout: float = 0.5, k: int = 10, alpha: float = 0.1):
        super().__init__()
        self.dropout, self.k, self.alpha = dropout, k, alpha
        self.mlp = nn.ModuleList(nn.Linear(i, o) for i, o in layer_dims(in_dim, hidden, num_classes, layers))

    def transform(self, view, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, lin in enumerate(self.mlp):
            h = lin(view.dropout(h, self.dropout, self.training))
            if i < len(self.mlp) - 1:
                h = torch.relu(h)
        return h

    def propagate(self, view, h0: torch.Tensor) -> torch.Tensor:
        h = h0
        for _ in range(self.k):
            h = (1 - self.alpha) * view.spmm(h, "gcn") + self.alpha * h0
        return h

    def forward(self, view, x):
        return self.propagate(view, self.transform(view, x))
