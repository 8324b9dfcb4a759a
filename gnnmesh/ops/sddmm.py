"""SDDMM: a value per stored entry of ``A`` from the rows of two dense matrices."""

from __future__ import annotations

import torch

from ..graph import Adjacency
from . import compiled
from ._index import cols, rows
from .precision import in_float32
from .profile import phase
from .spmm import edge_dot, multiply


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
        a, b = ctx.saved_tensors
        adj = ctx.adj
        grad_a = grad_b = None
        with phase("aggregate"):
            if ctx.needs_input_grad[1]:
                grad_a = multiply(adj, grad, b)
            if ctx.needs_input_grad[2]:
                grad_b = multiply(adj, grad, a, transpose=True)
        return None, grad_a, grad_b


class _EdgeAdd(torch.autograd.Function):
    """``a[row(e)] + b[col(e)]`` in one pass; the gradients are row sums of A and of A^T."""

    @staticmethod
    def forward(ctx, adj, a, b):
        with phase("aggregate"):
            ctx.adj = adj
            return compiled.edge_add(adj, a, b)

    @staticmethod
    def backward(ctx, grad):
        adj, needs = ctx.adj, ctx.needs_input_grad
        with phase("aggregate"):
            grad_a = compiled.row_sum(adj, grad, transpose=False) if needs[1] else None
            grad_b = compiled.row_sum(adj, grad, transpose=True) if needs[2] else None
        return None, grad_a, grad_b


def _edge_add(adj: Adjacency, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() <= 2 and a.shape[1:] == b.shape[1:] and compiled.available(adj, a, b):
        return _EdgeAdd.apply(adj, a, b)
    with phase("aggregate"):
        return a[rows(adj, a.device)] + b[cols(adj, b.device)]


@in_float32
def sddmm(adj: Adjacency, a: torch.Tensor, b: torch.Tensor, op: str = "dot") -> torch.Tensor:
    """Per stored entry ``(i, j)`` of ``A``: ``<a[i], b[j]>`` (``op="dot"``, over the last dim)
    or ``a[i] + b[j]`` (``op="add"``, elementwise: GAT's attention logits)."""
    if op == "dot":
        return _EdgeDot.apply(adj, a, b)
    if op == "add":
        return _edge_add(adj, a, b)
    raise ValueError(f"sddmm: unknown op {op!r} (use 'dot' or 'add')")
