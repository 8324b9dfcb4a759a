"""SDDMM: a value per stored entry of ``A`` from the rows of two dense matrices."""

from __future__ import annotations

import torch

from ..graph import Adjacency
from ._index import cols, rows, transpose_perm
from .profile import phase
from .spmm import edge_dot


class _EdgeDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, adj, a, b):
        with phase("aggregate"):
            ctx.adj = adj
            ctx.save_for_backward(a, b)
            return edge_dot(adj, a, b)

    @staticmethod
    def backward(ctx, grad):
        # d out[e] / d a[row(e)] = b[col(e)]: a weighted SpMM with the edge gradients as values.
        from .spmm import spmm
        a, b = ctx.saved_tensors
        adj = ctx.adj
        grad_a = grad_b = None
        with phase("aggregate"):
            if ctx.needs_input_grad[1]:
                grad_a = spmm(adj, b.detach(), values=grad.detach())
            if ctx.needs_input_grad[2]:
                grad_b = spmm(adj.t(), a.detach(), values=grad.detach()[transpose_perm(adj, grad.device)])
        return None, grad_a, grad_b


def sddmm(adj: Adjacency, a: torch.Tensor, b: torch.Tensor, op: str = "dot") -> torch.Tensor:
    """Per stored entry ``(i, j)`` of ``A``: ``<a[i], b[j]>`` (``op="dot"``, over the last dim)
    or ``a[i] + b[j]`` (``op="add"``, elementwise: GAT's attention logits)."""
    if op == "dot":
        return _EdgeDot.apply(adj, a, b)
    if op == "add":
        with phase("aggregate"):
            return a[rows(adj, a.device)] + b[cols(adj, b.device)]
    raise ValueError(f"sddmm: unknown op {op!r} (use 'dot' or 'add')")
