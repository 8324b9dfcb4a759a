"""A rank's backward products ``A^T @ g`` without A's transpose in memory.

``multiply(adj, values, g, transpose=True)`` builds A's transpose structure on first use and
keeps it for the run: its indices, the permutation of A's entries onto it (int64 each) and
their int32 copies, 20 bytes an entry beside A's own. On a rank training from parts that was
more than the operator itself. Where the compiled CPU kernels run, the product is taken from
A's rows instead (``_scatter``), with the same sums in the same order: the same numbers. Any
other product (torch's kernels, the GPU's) multiplies by the stored transpose, as before.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...graph import Adjacency, fits_int32
from ...ops import buffers, compiled
from ...ops.spmm import multiply


def by_rows(adj: Adjacency, x: torch.Tensor) -> bool:
    """Whether ``A^T @ x`` is taken from A's rows: where ``multiply`` would run the compiled
    CPU kernels on ``x``."""
    return (x.dim() in (2, 3) and compiled.choice() != "triton" and compiled.available(adj, x)
            and fits_int32(adj.shape[1]))


def multiply_transposed(adj: Adjacency, values: torch.Tensor, x: torch.Tensor, pooled: bool = True,
                        columns: Optional[slice] = None) -> torch.Tensor:
    """``A^T @ x`` for values ``[E]`` and x ``[N, F]`` (or ``[E, H]`` and ``[N, H, F]``), as
    ``multiply(adj, values, x, transpose=True, pooled=pooled)`` computes it; ``columns``: only
    the rows of the product of those columns of A (where ``by_rows``; a slice with a start
    and a stop), the numbers of the whole product's rows."""
    if not by_rows(adj, x):
        whole = multiply(adj, values, x, transpose=True, pooled=pooled)
        return whole if columns is None else whole[columns]
    from . import _scatter
    lo, hi = (0, adj.shape[1]) if columns is None else (columns.start, columns.stop)
    shape = (hi - lo,) + tuple(x.shape[1:])
    out = buffers.empty(shape, x.dtype) if pooled else x.new_empty(shape)
    heads = x.contiguous()
    heads = heads.unsqueeze(1) if heads.dim() == 2 else heads
    columns_of_values = values.to(x.dtype).contiguous()
    columns_of_values = columns_of_values.unsqueeze(1) if columns_of_values.dim() == 1 else columns_of_values
    tasks = max(1, min(torch.get_num_threads(), hi - lo))
    bounds = np.linspace(lo, hi, tasks + 1).astype(np.int64)
    # a task reads every row of A: one task a thread (the compiled kernels' threads)
    compiled._run(_scatter.spmm_transposed, adj.indptr, adj.indices, columns_of_values, heads,
                  out.view((shape[0],) + tuple(heads.shape[1:])), bounds, lo, adj.shape[1])
    return out
