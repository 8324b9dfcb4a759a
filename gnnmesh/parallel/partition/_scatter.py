"""``A^T @ x`` straight from A's rows, compiled by numba (imported only where the compiled
kernels run: ``transposed.py`` decides).

Task ``t`` owns the output rows (A's columns) ``bounds[t]`` to ``bounds[t + 1]``: it reads
every row of A and adds the entries whose column it owns, so no two tasks write one output
row. An output row's sum runs over A's rows in ascending order, the order of the entries of
its row in A's stable transpose, with the same ``acc += v * x`` steps as ``_numba.spmm``:
the same numbers as multiplying by the stored transpose, bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True, nogil=True)
def spmm_transposed(indptr, indices, values, x, out, bounds, first_column, columns):
    """``out[c - first_column, h] = sum over A's rows r of values[e, h] * x[r, h]``, ``e`` the
    entry (r, c), for the columns ``c`` from ``bounds[0]`` to ``bounds[-1]`` of A's
    ``columns``."""
    heads, width = x.shape[1], x.shape[2]
    rows = indptr.shape[0] - 1
    for task in prange(bounds.shape[0] - 1):
        lo, hi = bounds[task], bounds[task + 1]
        out[lo - first_column:hi - first_column] = 0
        whole = lo == 0 and hi == columns  # every entry is this task's
        for r in range(rows):
            first, last = indptr[r], indptr[r + 1]
            if not whole:  # a row's columns ascend: the entries this task owns are a run of them
                first = first + np.searchsorted(indices[first:last], lo)
                last = indptr[r] + np.searchsorted(indices[indptr[r]:last], hi)
            src = x[r]
            for e in range(first, last):
                acc = out[indices[e] - first_column]
                for h in range(heads):
                    v = values[e, h]
                    for f in range(width):
                        acc[h, f] += v * src[h, f]
