"""Row-parallel CPU kernels over a CSR structure, compiled by numba.

Every kernel takes ``bounds``: row ranges of about equal work (entries plus rows, see
``_index.bounds``), one per parallel task, so that a few rows holding most entries (power-law
graphs) do not leave threads idle. A task owns its rows' outputs, so no kernel needs atomics.
Per-edge data is ``[E, H]`` and vertex data ``[N, H, F]`` (``H`` heads; 1 for plain inputs):
every head is handled in the same pass over the entries. Sums over a row's entries run in
storage order; results match torch's implementation to float rounding.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

_jit = njit(parallel=True, cache=True, nogil=True)
# Sums over a row's columns may be reordered (summed in vector lanes, as torch's sum does):
# without it the compiler keeps one sequential chain and the dot products run scalar.
_jit_sums = njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "nsz"})


@_jit
def spmm(indptr, indices, values, perm, x, out, bounds):
    """``out[r, h] = sum_e values[perm[e], h] * x[indices[e], h]`` over row ``r``'s entries
    (``perm`` None: ``values[e, h]``; a transpose reads A's values through its entry order)."""
    heads, width = x.shape[1], x.shape[2]
    for task in prange(bounds.shape[0] - 1):
        for r in range(bounds[task], bounds[task + 1]):
            acc = out[r]
            acc[:] = 0
            for e in range(indptr[r], indptr[r + 1]):
                src = x[indices[e]]
                at = e if perm is None else perm[e]
                for h in range(heads):
                    v = values[at, h]
                    for f in range(width):
                        acc[h, f] += v * src[h, f]


@_jit_sums
def edge_dot(indptr, indices, a, b, out, bounds):
    """``out[e, h] = <a[row(e), h], b[indices[e], h]>``."""
    heads, width = a.shape[1], a.shape[2]
    for task in prange(bounds.shape[0] - 1):
        for r in range(bounds[task], bounds[task + 1]):
            dst = a[r]
            for e in range(indptr[r], indptr[r + 1]):
                src = b[indices[e]]
                for h in range(heads):
                    total = out.dtype.type(0)
                    for f in range(width):
                        total += dst[h, f] * src[h, f]
                    out[e, h] = total


@_jit
def edge_add(indptr, indices, a, b, out, bounds):
    """``out[e] = a[row(e)] + b[indices[e]]`` (rows of ``[*, H]``)."""
    heads = a.shape[1]
    for task in prange(bounds.shape[0] - 1):
        for r in range(bounds[task], bounds[task + 1]):
            for e in range(indptr[r], indptr[r + 1]):
                c = indices[e]
                for h in range(heads):
                    out[e, h] = a[r, h] + b[c, h]


@_jit
def row_sum(indptr, values, perm, out, bounds):
    """``out[r] = sum of values[perm[e]]`` over row ``r``'s entries (``values`` ``[E, H]``;
    ``perm`` None: ``values[e]``)."""
    heads = values.shape[1]
    for task in prange(bounds.shape[0] - 1):
        for r in range(bounds[task], bounds[task + 1]):
            out[r, :] = 0
            for e in range(indptr[r], indptr[r + 1]):
                at = e if perm is None else perm[e]
                for h in range(heads):
                    out[r, h] += values[at, h]


@_jit
def softmax(indptr, scores, out, bounds):
    """Softmax of ``scores`` ``[E, H]`` over each row's entries, per head: max, exp, sum, scale."""
    heads = scores.shape[1]
    for task in prange(bounds.shape[0] - 1):
        for r in range(bounds[task], bounds[task + 1]):
            lo, hi = indptr[r], indptr[r + 1]
            if hi == lo:
                continue
            for h in range(heads):
                top = scores[lo, h]  # the input's own type, so exp rounds as in torch
                for e in range(lo + 1, hi):
                    if scores[e, h] > top:
                        top = scores[e, h]
                total = out.dtype.type(0)
                for e in range(lo, hi):
                    out[e, h] = np.exp(scores[e, h] - top)
                    total += out[e, h]
                for e in range(lo, hi):
                    out[e, h] /= total


@_jit
def softmax_backward(indptr, out, grad, result, bounds):
    """Gradient of the edge softmax: ``out * (grad - sum over the row of grad * out)``."""
    heads = out.shape[1]
    for task in prange(bounds.shape[0] - 1):
        for r in range(bounds[task], bounds[task + 1]):
            lo, hi = indptr[r], indptr[r + 1]
            for h in range(heads):
                total = out.dtype.type(0)
                for e in range(lo, hi):
                    total += grad[e, h] * out[e, h]
                for e in range(lo, hi):
                    result[e, h] = out[e, h] * (grad[e, h] - total)


@_jit_sums
def pair_dot(table, a, b, out, chunk):
    """``out[i] = <table[a[i]], table[b[i]]>``, ``chunk`` pairs per parallel task."""
    width = table.shape[1]
    for task in prange((a.shape[0] + chunk - 1) // chunk):
        for i in range(task * chunk, min(a.shape[0], (task + 1) * chunk)):
            u, v = table[a[i]], table[b[i]]
            total = out.dtype.type(0)
            for f in range(width):
                total += u[f] * v[f]
            out[i] = total


@_jit
def pair_dot_backward(table, a, b, grad, out, bounds):
    """``out[a[i]] += grad[i] * table[b[i]]`` and ``out[b[i]] += grad[i] * table[a[i]]``. Task
    ``t`` owns the rows ``bounds[t]`` to ``bounds[t + 1]``: it reads every pair and adds to its
    own rows alone, so no two tasks write one row and none needs atomics."""
    width = table.shape[1]
    for task in prange(bounds.shape[0] - 1):
        lo, hi = bounds[task], bounds[task + 1]
        for i in range(a.shape[0]):
            g = grad[i]
            if lo <= a[i] < hi:
                du, v = out[a[i]], table[b[i]]
                for f in range(width):
                    du[f] += g * v[f]
            if lo <= b[i] < hi:
                dv, u = out[b[i]], table[a[i]]
                for f in range(width):
                    dv[f] += g * u[f]


def configure(threads: int) -> None:
    """Run the next kernels on ``threads`` threads, each taking the next task when done with
    one (one task at a time: a thread slowed by other work on the machine takes fewer)."""
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    numba.set_parallel_chunksize(1)
