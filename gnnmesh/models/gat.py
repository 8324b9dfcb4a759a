"""GAT (Velickovic et al., 2018): multi-head attention over in-edges plus a self-loop.

``e_ij = LeakyReLU(a_dst . W h_i + a_src . W h_j)``, ``alpha = softmax_j(e_ij)``,
``h'_i = ||_heads sum_j alpha_ij W h_j`` (the last layer averages its heads).

With ``edge_dim = D`` (a graph's edge features, ``view.edge_features``), each edge's features
``f_ij`` add ``a_edge . W_e f_ij`` to its logit, as PyG's ``GATConv(edge_dim=D)``; the loop on
each node carries the mean of its in-edges' features (``gnnmesh.edge_features``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import LayerStack


class GATLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, heads: int, concat: bool,
                 attn_dropout: float, negative_slope: float = 0.2, edge_dim: int = 0):
        super().__init__()
        self.heads, self.out_dim, self.concat = heads, out_dim, concat
        self.attn_dropout, self.negative_slope, self.edge_dim = attn_dropout, negative_slope, edge_dim
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        for p in (self.lin.weight, self.att_src, self.att_dst):
            nn.init.xavier_uniform_(p)
        self.edge_logits = EdgeLogits(edge_dim, heads, out_dim) if edge_dim else None

    @property
    def out_features(self) -> int:
        return self.heads * self.out_dim if self.concat else self.out_dim

    @property
    def projected_features(self) -> int:
        """The width of ``project``'s rows."""
        return self.heads * self.out_dim

    def forward(self, view, h):
        return self.attend(view, self.project(h))

    def project(self, h):
        """The row-wise half of the layer: every head's projection of each row, side by side."""
        return self.lin(h)

    def attend(self, view, z):
        """The rest, on the projected rows ``z`` (attention scores come from them too)."""
        z = z.view(-1, self.heads, self.out_dim)
        s_dst, s_src = (z * self.att_dst).sum(-1), (z * self.att_src).sum(-1)
        if self.edge_logits is None:  # one op: fused on CUDA (``view.attention``)
            out = view.attention(z, s_dst, s_src, "loop", self.negative_slope, self.attn_dropout, self.training)
        else:
            scores = view.sddmm(s_dst, s_src, "loop", "add") + self.edge_logits(view, "loop")
            alpha = view.edge_softmax(F.leaky_relu(scores, self.negative_slope), "loop")
            alpha = view.edge_dropout(alpha, self.attn_dropout, self.training, "loop")
            out = view.spmm(z, "loop", values=alpha)
        out = out.reshape(-1, self.heads * self.out_dim) if self.concat else out.mean(dim=1)
        return out + self.bias


class EdgeLogits(nn.Module):
    """Every head's attention logit from an edge's features: ``a_edge . W_e f_ij``
    (PyG's ``lin_edge`` and ``att_edge``), ``[entries, heads]`` of operator ``op``."""

    def __init__(self, edge_dim: int, heads: int, out_dim: int):
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.lin = nn.Linear(edge_dim, heads * out_dim, bias=False)
        self.att = nn.Parameter(torch.empty(heads, out_dim))
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.xavier_uniform_(self.att)

    def forward(self, view, op: str):
        return self.lin(view.edge_features(op)).view(-1, self.heads, self.out_dim).mul(self.att).sum(-1)


class GAT(LayerStack):
    layer = GATLayer  # what each layer is (GATv2 stacks its own the same way)

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 8, layers: int = 2,
                 heads: int = 8, dropout: float = 0.6, attn_dropout: float = 0.6,
                 out_heads: int = 1, edge_dim: int = 0):
        super().__init__(dropout, activation=F.elu)
        dim = in_dim
        for _ in range(layers - 1):
            self.layers.append(self.layer(dim, hidden, heads, True, attn_dropout, edge_dim=edge_dim))
            dim = hidden * heads
        self.layers.append(self.layer(dim, num_classes, out_heads, False, attn_dropout, edge_dim=edge_dim))
