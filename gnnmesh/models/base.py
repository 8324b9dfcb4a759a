"""Shared structure: a stack of graph layers with activation and dropout between them."""

from __future__ import annotations

import torch
from torch import nn


def layer_dims(in_dim: int, hidden: int, out_dim: int, layers: int) -> list[tuple[int, int]]:
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
    return list(zip(dims[:-1], dims[1:]))


class LayerStack(nn.Module):
    """``dropout -> layer -> activation`` repeated; the last layer has no activation.

    Subclasses fill ``self.layers`` with modules called as ``layer(view, h)``.
    """

    def __init__(self, dropout: float, activation=torch.relu):
        super().__init__()
        self.dropout = dropout
        self.activation = activation
        self.layers = nn.ModuleList()

    def forward(self, view, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, layer in enumerate(self.layers):
            h = view.dropout(h, self.dropout, self.training)
            h = layer(view, h)
            if i < len(self.layers) - 1:
                h = self.activation(h)
        return h


def propagate_linear(view, lin: nn.Linear, h: torch.Tensor, op: str) -> torch.Tensor:
    """``A_op @ (h W)`` computed in the cheaper order: aggregate the narrower of input and
    output (both orders are the same linear map; the choice depends only on the shapes)."""
    if lin.out_features <= lin.in_features:
        return view.spmm(h @ lin.weight.t(), op)
    return view.spmm(h, op) @ lin.weight.t()
