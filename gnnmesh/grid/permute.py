"""Double permutation (Plexus §5.1): separate random permutations of rows and columns.

A 2D block decomposition of ``A`` is as balanced as its nonzeros are spread; graphs with
communities pile them up near the diagonal. Renumbering rows with ``P_r`` and columns with
``P_c`` (and alternating the two per layer, so one layer's output rows are the next
layer's input columns) scatters them.

Blocks are the ``R x C`` pieces cut by ``block_bounds``: rows in ``R`` contiguous ranges of
near-equal size, columns in ``C``. ``block_nnz`` counts the nonzeros each block would hold
under a renumbering without building the renumbered matrix, and ``balance`` compares the
original order, one permutation (``P A P^T``) and two (``P_r A P_c^T``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError
from ..graph import Adjacency
from ..transforms import add_self_loops

# Entries counted per step in block_nnz: bounds the temporaries (a few int64 arrays of
# this length) whatever the graph size.
_CHUNK = 1 << 22


def permutations(num_nodes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(row_perm, col_perm): ``perm[old_id] = new_id``, two independent random permutations."""
    rng = np.random.default_rng(seed)
    return rng.permutation(num_nodes), rng.permutation(num_nodes)


def block_bounds(size: int, parts: int) -> np.ndarray:
    """``parts + 1`` cut points splitting ``range(size)`` into contiguous ranges whose
    sizes differ by at most one, the larger ones first (``numpy.array_split``'s rule)."""
    base, extra = divmod(int(size), int(parts))
    sizes = np.full(int(parts), base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def check_grid(grid, shape, what: str = "grid") -> tuple[int, int]:
    """``(R, C)`` as ints, each at least 1 and at most the rows/columns it cuts, so that no
    block is empty by construction. ``what`` names the setting in the error message."""
    try:
        rows, cols = (int(v) for v in grid)
        ok = all(float(v) == int(v) for v in grid)
    except (TypeError, ValueError):
        ok = False
    if not ok or rows < 1 or cols < 1:
        raise ConfigError(f"{what} must be two positive integers R,C, got {grid!r}")
    if rows > shape[0] or cols > shape[1]:
        raise ConfigError(f"{what} {rows},{cols} cuts a {shape[0]} x {shape[1]} matrix into "
                          "more blocks than it has rows or columns")
    return rows, cols


def _check_perm(perm, size: int, what: str) -> Optional[np.ndarray]:
    if perm is None:
        return None
    perm = np.asarray(perm, dtype=np.int64)
    if perm.shape != (size,) or (size and (perm.min() < 0 or perm.max() >= size
                                           or np.bincount(perm, minlength=size).max() != 1)):
        raise ValueError(f"{what} must be a permutation of {size} ids")
    return perm


def inverse(perm) -> np.ndarray:
    """``order`` with ``order[new_id] = old_id`` for ``perm[old_id] = new_id``."""
    perm = np.asarray(perm, dtype=np.int64)
    order = np.empty_like(perm)
    order[perm] = np.arange(perm.shape[0], dtype=np.int64)
    return order


def _block_of(size: int, parts: int, perm: Optional[np.ndarray]) -> np.ndarray:
    """Block index (int32) of every old id once renumbered by ``perm``."""
    new_ids = np.arange(size, dtype=np.int64) if perm is None else perm
    return (np.searchsorted(block_bounds(size, parts), new_ids, side="right") - 1).astype(np.int32)


def block_nnz(adj: Adjacency, grid, row_perm=None, col_perm=None) -> np.ndarray:
    """``[R, C]`` int64 counts of the nonzeros in each block of ``P_r A P_c^T`` (a ``None``
    permutation keeps that side's order). Streams over the entries in chunks, so memory
    stays at the per-node arrays plus a fixed-size buffer."""
    rows, cols = check_grid(grid, adj.shape)
    row_block = _block_of(adj.shape[0], rows, _check_perm(row_perm, adj.shape[0], "row_perm"))
    col_block = _block_of(adj.shape[1], cols, _check_perm(col_perm, adj.shape[1], "col_perm"))
    indptr, indices = adj.indptr.numpy(), adj.indices.numpy()
    counts = np.zeros(rows * cols, dtype=np.int64)
    # Row ranges of about _CHUNK entries each (a row longer than that is a chunk of its own).
    starts = np.unique(np.searchsorted(indptr, np.arange(0, adj.nnz, _CHUNK), side="right") - 1)
    for lo, hi in zip(starts, np.append(starts[1:], adj.shape[0])):
        first, last = indptr[lo], indptr[hi]
        key = np.repeat(row_block[lo:hi].astype(np.int64) * cols, np.diff(indptr[lo:hi + 1]))
        key += col_block[indices[first:last]]
        counts += np.bincount(key, minlength=rows * cols)
    return counts.reshape(rows, cols)


def max_over_mean(counts) -> float:
    """Load imbalance of a block decomposition: largest block over the average (1 is perfect)."""
    counts = np.asarray(counts)
    mean = counts.mean()
    return float(counts.max() / mean) if mean > 0 else 1.0


def balance(adj: Adjacency, grid, seed: int = 0, self_loops: bool = False) -> dict:
    """Block counts for the original order (``"original"``), one permutation applied to rows
    and columns (``"one"``: ``P_r A P_r^T``) and the double permutation (``"two"``:
    ``P_r A P_c^T``), with ``P_r, P_c = permutations(n, seed)``.

    ``self_loops`` counts ``A + I``, the pattern GCN multiplies with. One permutation keeps
    the diagonal inside the diagonal blocks, so on sparse graphs (a few nonzeros per row)
    those blocks stay heavy; only separate row and column permutations scatter it.
    """
    if adj.shape[0] != adj.shape[1]:
        raise ValueError(f"balance needs a square adjacency, got {adj.shape}")
    if self_loops:
        adj = add_self_loops(adj)
    row_perm, col_perm = permutations(adj.shape[0], seed)
    return {"original": block_nnz(adj, grid),
            "one": block_nnz(adj, grid, row_perm, row_perm),
            "two": block_nnz(adj, grid, row_perm, col_perm)}


def permute_adjacency(adj: Adjacency, row_perm=None, col_perm=None) -> Adjacency:
    """``P_r A P_c^T`` as a new Adjacency: entry ``(i, j)`` moves to
    ``(row_perm[i], col_perm[j])``; values (if any) follow their entries."""
    row_perm = _check_perm(row_perm, adj.shape[0], "row_perm")
    col_perm = _check_perm(col_perm, adj.shape[1], "col_perm")
    mat = adj.to_scipy()
    if row_perm is not None:
        mat = mat[inverse(row_perm)]
    if col_perm is not None:
        mat = sp.csr_matrix((mat.data, col_perm[mat.indices], mat.indptr), shape=mat.shape)
        mat.sort_indices()
    return Adjacency.from_scipy(mat, weighted=adj.values is not None)
