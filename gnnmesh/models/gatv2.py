"""GATv2 (Brody, Alon and Yahav, 2022): attention scored after the non-linearity, so that a
node's ranking of its neighbours can depend on the node itself:

``e_ij = a . LeakyReLU(W_r h_i + W_l h_j [+ W_e f_ij])``, ``alpha = softmax_j(e_ij)``,
``h'_i = ||_heads sum_j alpha_ij W_l h_j`` over in-edges plus a self-loop (the last layer
averages its heads). As PyG's ``GATv2Conv`` (``share_weights=False``, biased ``lin_l`` and
``lin_r``); with ``edge_dim = D``, ``GATv2Conv(edge_dim=D)``: the loop on each node carries
the mean of its in-edges' features (``gnnmesh.edge_features``).

Each edge's score needs a ``[heads, out]`` vector of its own (``view.sddmm`` of 3-D rows), so
GATv2 holds ``out`` times GAT's per-edge memory while it scores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .gat import GAT


class GATv2Layer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int, concat: bool,
                 attn_dropout: float, negative_slope: float = 0.2, edge_dim: int = 0):
        super().__init__()
        self.heads, self.out_dim, self.concat = heads, out_dim, concat
        self.attn_dropout, self.negative_slope, self.edge_dim = attn_dropout, negative_slope, edge_dim
        self.lin_l = nn.Linear(in_dim, heads * out_dim)  # sources: their messages and their half of the score
        self.lin_r = nn.Linear(in_dim, heads * out_dim)  # destinations: their half of the score
        self.att = nn.Parameter(torch.empty(heads, out_dim))
        self.lin_edge = nn.Linear(edge_dim, heads * out_dim, bias=False) if edge_dim else None
        self.bias = nn.Parameter(torch.zeros(self.out_features))
        for p in (self.lin_l.weight, self.lin_r.weight, self.att) + ((self.lin_edge.weight,) if edge_dim else ()):
            nn.init.xavier_uniform_(p)
        nn.init.zeros_(self.lin_l.bias)
        nn.init.zeros_(self.lin_r.bias)

    @property
    def out_features(self) -> int:
        return self.heads * self.out_dim if self.concat else self.out_dim

    def forward(self, view, h):
        shape = (-1, self.heads, self.out_dim)
        src, dst = self.lin_l(h).view(shape), self.lin_r(h).view(shape)
        pair = view.sddmm(dst, src, "loop", "add")  # W_r h_i + W_l h_j, [entries, heads, out]
        if self.lin_edge is not None:
            pair = pair + self.lin_edge(view.edge_features("loop")).view(shape)
        scores = (F.leaky_relu(pair, self.negative_slope) * self.att).sum(-1)
        alpha = view.edge_softmax(scores, "loop")
        alpha = view.edge_dropout(alpha, self.attn_dropout, self.training, "loop")
        out = view.spmm(src, "loop", values=alpha)
        out = out.reshape(-1, self.heads * self.out_dim) if self.concat else out.mean(dim=1)
        return out + self.bias


class GATv2(GAT):
    """GAT's stack of GATv2 layers (its hidden heads concatenated, the last averaged)."""

    layer = GATv2Layer
