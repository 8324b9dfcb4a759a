"""R-GAT on a typed graph, as MLPerf's model for IGBH builds it: GAT attention within each
relation, summed over relations, plus a root (self) weight and bias:

``h'_i = h_i W_0 + b + sum_r ||_heads sum_{j in N_r(i)} alpha^r_ij W_r h_j``, with
``alpha^r_ij = softmax_{j in N_r(i)}(LeakyReLU(a^r_dst . W_r h_i + a^r_src . W_r h_j))``.

That is PyG's ``HeteroConv({r: GATConv(..., add_self_loops=False, bias=False)}, aggr="sum")``
plus a ``Linear`` root. Each relation attends over its own operator ``"sum@r"`` (its edges
alone, no self-loops: a bipartite relation has none), so a node without in-edges of a
relation gets nothing from it. Hidden layers concatenate their heads, the last averages them,
as GAT's do (``gnnmesh.models.gat``).

With ``edge_dim = D`` each relation has its own map of the edge features into its logits
(``GATConv(edge_dim=D)`` per relation): an edge of relation r adds ``a^r_edge . W^r_e f_ij``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..relations import SEPARATOR
from .base import LayerStack
from .gat import EdgeLogits
from .rgcn import relation_names


class RGATLayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, relations: tuple, heads: int, concat: bool,
                 attn_dropout: float, negative_slope: float = 0.2, edge_dim: int = 0):
        super().__init__()
        self.relations, self.heads, self.out_dim, self.concat = relations, heads, out_dim, concat
        self.attn_dropout, self.negative_slope, self.edge_dim = attn_dropout, negative_slope, edge_dim
        self.weight = nn.Parameter(torch.empty(len(relations), heads * out_dim, in_dim))
        self.att_src = nn.Parameter(torch.empty(len(relations), heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(len(relations), heads, out_dim))
        self.root = nn.Linear(in_dim, self.out_features, bias=True)
        for p in (self.weight, self.att_src, self.att_dst):
            for per_relation in p:  # each relation's matrices initialised as GAT's are
                nn.init.xavier_uniform_(per_relation)
        self.edge_logits = nn.ModuleList(EdgeLogits(edge_dim, heads, out_dim) for _ in relations) \
            if edge_dim else None

    @property
    def operators(self) -> tuple:
        """The operators it aggregates with: each relation's ``sum@r`` (mini-batches sample them)."""
        return tuple(f"sum{SEPARATOR}{r}" for r in self.relations)

    @property
    def out_features(self) -> int:
        return self.heads * self.out_dim if self.concat else self.out_dim

    def forward(self, view, h):
        # every relation's projection of every row in one product: [rows, relations, heads, out]
        projected = (h @ self.weight.reshape(-1, h.shape[1]).t()).view(-1, len(self.relations), self.heads,
                                                                        self.out_dim)
        out = self.root(view.destinations(h))
        # unbind, not projected[:, i]: its backward stacks the relations' gradients once, where
        # each selection's would fill a zero tensor as large as all of them
        for i, (relation, z) in enumerate(zip(self.relations, projected.unbind(1))):
            out = out + self.attend(view, z, i, f"sum{SEPARATOR}{relation}")
        return out

    def attend(self, view, z, i: int, op: str):
        """Relation ``i``'s attention over its operator ``op`` on its projected rows ``z``
        (``[rows, heads, out]``), heads concatenated or averaged."""
        scores = view.sddmm((z * self.att_dst[i]).sum(-1), (z * self.att_src[i]).sum(-1), op, "add")
        if self.edge_logits is not None:
            scores = scores + self.edge_logits[i](view, op)
        alpha = view.edge_softmax(F.leaky_relu(scores, self.negative_slope), op)
        alpha = view.edge_dropout(alpha, self.attn_dropout, self.training, op)
        out = view.spmm(z, op, values=alpha)
        return out.reshape(-1, self.heads * self.out_dim) if self.concat else out.mean(dim=1)


class RGAT(LayerStack):
    def __init__(self, in_dim: int, num_classes: int, hidden: int = 16, layers: int = 2, heads: int = 4,
                 dropout: float = 0.2, attn_dropout: float = 0.0, out_heads: int = 1, relations=(),
                 edge_dim: int = 0):
        super().__init__(dropout, activation=F.elu)
        names = relation_names(relations, "rgat")
        dim = in_dim
        for _ in range(layers - 1):
            self.layers.append(RGATLayer(dim, hidden, names, heads, True, attn_dropout, edge_dim=edge_dim))
            dim = hidden * heads
        self.layers.append(RGATLayer(dim, num_classes, names, out_heads, False, attn_dropout, edge_dim=edge_dim))
