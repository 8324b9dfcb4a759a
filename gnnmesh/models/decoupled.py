"""Decoupled models: the NN layers first, then k propagation steps (APPNP, Gasteiger et al., 2019).

``H_0 = MLP(X)``, ``H_{k+1} = (1 - alpha) Â H_k + alpha H_0``. ``Â`` is the GCN operator by
default (the mean operator for the decoupled GraphSAGE). With ``attention`` (decoupled GAT,
NeutronTP §4.1.1) ``Â`` has edge weights computed once from ``H_0`` by GAT attention over
in-edges plus a self-loop, averaged over heads, before any propagation.

All dense work happens before any graph work, which is what tensor-parallel training
exploits: the MLP (and the attention) run on vertex rows, the propagation on feature
columns. A strategy may run the pieces itself: ``transform``, ``edge_weights``, then
``propagate`` with its own aggregation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import layer_dims


class Decoupled(nn.Module):
    # The options only the attention form (``attention=True``) reads.
    ATTENTION_OPTIONS = ("heads", "attn_dropout", "negative_slope")

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 64, layers: int = 2,
                 dropout: float = 0.5, k: int = 10, alpha: float = 0.1, op: str = "gcn",
                 attention: bool = False, heads: int = 1, attn_dropout: float = 0.0,
                 negative_slope: float = 0.2):
        super().__init__()
        self.dropout, self.k, self.alpha = dropout, k, alpha
        self.mlp = nn.ModuleList(nn.Linear(i, o) for i, o in layer_dims(in_dim, hidden, num_classes, layers))
        self.attention = attention
        self.op = "loop" if attention else op
        if attention:
            self.attn_dropout, self.negative_slope = attn_dropout, negative_slope
            self.att_src = nn.Parameter(torch.empty(heads, num_classes))
            self.att_dst = nn.Parameter(torch.empty(heads, num_classes))
            nn.init.xavier_uniform_(self.att_src)
            nn.init.xavier_uniform_(self.att_dst)

    def transform(self, view, x: torch.Tensor) -> torch.Tensor:
        h = x
        for i, lin in enumerate(self.mlp):
            h = lin(view.dropout(h, self.dropout, self.training))
            if i < len(self.mlp) - 1:
                h = torch.relu(h)
        return h

    def edge_weights(self, view, h0: torch.Tensor):
        """Per-edge weights of ``op`` (attention), or None to use the operator's own values."""
        if not self.attention:
            return None
        z = h0.unsqueeze(1)
        scores = view.sddmm((z * self.att_dst).sum(-1), (z * self.att_src).sum(-1), "loop", "add")
        alpha = view.edge_softmax(F.leaky_relu(scores, self.negative_slope), "loop")
        alpha = view.edge_dropout(alpha, self.attn_dropout, self.training, "loop")
        return alpha.mean(dim=1)

    def combine(self, aggregated: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        """One propagation step given ``Â H_k`` (row-wise, so any row or column layout works)."""
        return (1 - self.alpha) * aggregated + self.alpha * h0

    def propagate(self, h0: torch.Tensor, aggregate) -> torch.Tensor:
        """The k propagation steps. ``aggregate(h, step)`` returns ``Â h`` and ``H_0`` in the
        layout of ``Â h``: on one process both are plain rows; a strategy that runs the steps
        on another layout (tensor parallelism: column slices) switches in the first and last
        steps."""
        h = h0
        for step in range(self.k):
            h = self.combine(*aggregate(h, step))
        return h

    def forward(self, view, x):
        h0 = self.transform(view, x)
        weights = self.edge_weights(view, h0)
        return self.propagate(h0, lambda h, step: (view.spmm(h, self.op, weights), h0))
