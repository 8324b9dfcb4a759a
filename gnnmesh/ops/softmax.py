"""Edge softmax: normalize edge scores over the in-edges of each destination row."""

from __future__ import annotations

import torch

from ..graph import Adjacency
from . import compiled
from ._index import csr, rows
from .precision import in_float32
from .profile import phase


def _row_sum(adj: Adjacency, edge_values: torch.Tensor) -> torch.Tensor:
    """Each row's sum of its entries' values, added in entry order: a segmented reduction over
    the CSR rows, the same sums on every run (``index_add_`` adds with atomics on CUDA, in
    whatever order they land), and bit for bit the CPU's ``index_add_``."""
    return torch.segment_reduce(edge_values, "sum", offsets=csr(adj, False, edge_values.device)[0], axis=0)


def _softmax(adj: Adjacency, scores: torch.Tensor) -> torch.Tensor:
    if scores.dim() <= 2 and compiled.available(adj, scores):
        return compiled.edge_softmax(adj, scores)
    row = rows(adj, scores.device)
    shape = (adj.shape[0],) + tuple(scores.shape[1:])
    index = row.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    row_max = scores.new_full(shape, float("-inf")).scatter_reduce(
        0, index, scores, reduce="amax", include_self=True)
    exp = (scores - row_max[row]).exp()
    return exp / _row_sum(adj, exp)[row]


def _softmax_backward(adj: Adjacency, out: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    if out.dim() <= 2 and compiled.available(adj, out, grad):
        return compiled.edge_softmax_backward(adj, out, grad)
    weighted = grad * out
    return weighted - out * _row_sum(adj, weighted)[rows(adj, grad.device)]


class _EdgeSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, adj, scores):
        with phase("aggregate"):
            out = _softmax(adj, scores)
            ctx.adj = adj
            ctx.save_for_backward(out)
            return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        with phase("aggregate"):
            return None, _softmax_backward(ctx.adj, out, grad)


@in_float32
def edge_softmax(adj: Adjacency, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores`` ([E] or [E, H]) over the stored entries of each row of ``A``."""
    if scores.shape[0] != adj.nnz:
        raise ValueError(f"edge_softmax: {scores.shape[0]} scores for {adj.nnz} edges")
    return _EdgeSoftmax.apply(adj, scores)
