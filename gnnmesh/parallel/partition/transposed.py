"""A rank's backward products ``A^T @ g`` without A's transpose in memory.

``multiply(adj, values, g, transpose=True)`` builds A's transpose structure on first use and
keeps it for the run: its indices, the permutation of A's entries onto it (int64 each) and
their int32 copies, 20 bytes an entry beside A's own. On a rank training from parts that was
more than the operator itself. Where the compiled CPU kernels run, the product is taken from
A's rows instead (``_scatter``), with the same sums in the same order: the same numbers. Any
other product (torch's kernels, the GPU's) multiplies by the stored transpose, as before.
"""

from __future__ import annotations

import numpy as np
import torch

from ...graph import Adjacency
from ...ops import buffers, compiled
from ...ops.spmm import multiply


def by_rows(adj: Adjacency, x: torch.Tensor) -> bool:
    """Whether ``A^T @ x`` is taken from A's rows: where ``multiply`` would run the compiled
    CPU kernels on ``x``."""
    return (x.dim() in (2, 3) and compiled.choice() != "triton" and compiled.available(adj, x)
            and adj.shape[1] < 2**31)


def multiply_transposed(adj: Adjacency, values: torch.Tensor, x: torch.Tensor, pooled: bool = True) -> torch.Tensor:
    """``A^T @ x`` for values ``[E]`` and x ``[N, F]`` (or ``[E, H]`` and ``[N, H, F]``), as
    ``multiply(adj, values, x, transpose=True, pooled=pooled)`` computes it."""
    if not by_rows(adj, x):
        return multiply(adj, values, x, transpose=True, pooled=pooled)
    from . import _scatter
    shape = (adj.shape[1],) + tuple(x.shape[1:])
    out = buffers.empty(shape, x.dtype) if pooled else x.new_empty(shape)
    heads = x.contiguous()
    heads = heads.unsqueeze(1) if heads.dim() == 2 else heads
    columns = values.to(x.dtype).contiguous()
    columns = columns.unsqueeze(1) if columns.dim() == 1 else columns
    tasks = max(1, min(torch.get_num_threads(), adj.shape[1]))
    bounds = np.linspace(0, adj.shape[1], tasks + 1).astype(np.int64)
    # a task reads every row of A: one task a thread (the compiled kernels' threads)
    compiled._run(_scatter.spmm_transposed, adj.indptr, adj.indices, columns, heads,
                  out.view((shape[0],) + tuple(heads.shape[1:])), bounds)
    return out
