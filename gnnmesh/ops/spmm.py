"""SpMM ``Y = A @ X`` whose backward multiplies with the stored transpose.

torch's own CSR autograd transposes ``A`` on every backward call; here the transpose
structure is built once per graph and kept, and indices are int32 where they fit. On CPU
the compiled kernels split rows between threads by entries and multiply every head in one
pass over the entries; on CUDA the Triton kernels (``fused``) multiply several heads in one
pass, a program per row, and torch's CSR product (cuSPARSE) runs plain ``[N, F]`` products
(and, without triton, every head, one by one).
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from ..graph import Adjacency
from . import compiled, fused
from ._index import cols, csr, rows, transpose_perm
from .precision import in_float32
from .profile import phase

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")

_EDGE_CHUNK_ELEMS = 1 << 24  # bound on the E x F temporaries of the value gradient


def _multiply(adj: Adjacency, values: torch.Tensor, x: torch.Tensor, transpose: bool) -> torch.Tensor:
    """``op(A) @ x`` for 1-D ``values`` and 2-D ``x``."""
    crow, col = csr(adj, transpose, x.device)
    if transpose:
        values = values[transpose_perm(adj, x.device)]
        shape = (adj.shape[1], adj.shape[0])
    else:
        shape = adj.shape
    mat = torch.sparse_csr_tensor(crow, col, values.to(x.dtype), size=shape, check_invariants=False)
    with torch.autocast(x.device.type, enabled=False):  # a backward re-entering autocast: still x's dtype
        return mat @ x


def multiply(adj, values, x, transpose: bool = False, pooled: bool = True):
    """Heads-aware multiply: ``x`` is [N, F] with values [E], or [N, H, F] with values [E, H].
    ``pooled``: whether the compiled kernels' output takes pooled memory (``compiled.spmm``)."""
    # On CUDA a plain [N, F] product stays cuSPARSE's (it runs near the memory's speed there)
    # unless GNNMESH_KERNELS=triton; heads take one Triton pass, not a product per head.
    if (x.dim() == 3 or compiled.choice() == "triton") and fused.available(x) and values.device == x.device:
        try:
            return fused.spmm(adj, values, x, transpose)
        except fused.KernelFailed:
            pass
    if x.dim() in (2, 3) and compiled.available(adj, x):
        return compiled.spmm(adj, values, x, transpose, pooled)
    if x.dim() == 2:
        return _multiply(adj, values, x.contiguous(), transpose)
    heads = [_multiply(adj, values[:, h].contiguous(), x[:, h].contiguous(), transpose)
             for h in range(x.shape[1])]
    return torch.stack(heads, dim=1)


def edge_dot(adj: Adjacency, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``out[e] = <a[row(e)], b[col(e)]>`` over the last dim, in chunks of edges to bound memory."""
    if a.dim() in (2, 3) and a.shape[1:] == b.shape[1:] and fused.available(a, b):
        try:
            return fused.edge_dot(adj, a, b)
        except fused.KernelFailed:
            pass
    if a.dim() in (2, 3) and compiled.available(adj, a, b):
        return compiled.edge_dot(adj, a, b)
    row, col = rows(adj, a.device), cols(adj, a.device)
    width = max(1, a[0].numel())
    step = max(1, _EDGE_CHUNK_ELEMS // width)
    parts = [(a[row[s:s + step]] * b[col[s:s + step]]).sum(-1) for s in range(0, adj.nnz, step)]
    if not parts:
        return a.new_zeros((0,) + tuple(a.shape[1:-1]))
    return torch.cat(parts)


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, adj: Adjacency, values: torch.Tensor, x: torch.Tensor):
        with phase("aggregate"):
            ctx.adj = adj
            # x only serves the values' gradient: unsaved, it is freed once the layer is done with it
            ctx.save_for_backward(values, x if ctx.needs_input_grad[1] else None)
            return multiply(adj, values, x, transpose=False)

    @staticmethod
    def backward(ctx, grad_out):
        values, x = ctx.saved_tensors
        adj = ctx.adj
        grad_values = grad_x = None
        with phase("aggregate"):
            if ctx.needs_input_grad[2]:
                grad_x = multiply(adj, values, grad_out, transpose=True)
            if ctx.needs_input_grad[1]:
                grad_values = edge_dot(adj, grad_out, x)
        return None, grad_values, grad_x


@in_float32
def spmm(adj: Adjacency, x: torch.Tensor, values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``A @ x`` with gradients for ``x`` and (if given and requiring grad) the edge ``values``.

    ``values`` overrides ``adj.values``: shape [E] for ``x`` of shape [N, F], or [E, H] for
    multi-head ``x`` of shape [N, H, F] (each head multiplies with its own edge values).
    """
    if values is None:
        values = adj.values if adj.values is not None else x.new_ones(adj.nnz)
    if x.shape[0] != adj.shape[1]:
        raise ValueError(f"spmm: x has {x.shape[0]} rows, the matrix has {adj.shape[1]} columns")
    return _SpMM.apply(adj, values.to(x.device), x)
