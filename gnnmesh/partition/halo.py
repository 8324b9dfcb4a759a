"""Halo exchanges for 1D row partitioning (Demirci et al. §4.1, the sets S_m and R_m).

Rank m owns rows ``owned`` of the operator A and of every vertex-data matrix. Its block of
A has columns ``[owned..., halo...]``: owned columns first (ascending id), then the halo,
the columns it references but does not own, grouped by owner rank and ascending id within
an owner. Each peer n sends m the rows ``send_index`` of n lists for m, in ascending id
order, which is exactly the order of m's halo slice from n.

Everything is vectorized: one rank's halo touches only its own rows of A and its own
columns of A (rows of the cached transpose), so all P halos together cost O(nnz log nnz).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import scipy.sparse as sp

from ..errors import GraphError
from ..graph import Adjacency
from .base import csr_arrays


@dataclass
class RankHalo:
    """What rank ``rank`` owns, needs, receives and sends; see the module docstring."""

    rank: int
    parts: int
    owned: np.ndarray         # global ids, ascending
    halo: np.ndarray          # global ids, by (owner, id)
    recv_counts: np.ndarray   # [parts] halo rows arriving from each rank (0 for itself)
    send_index: list          # [parts] local positions into owned rows to send to each rank
    block: Adjacency          # owned rows x [owned, halo] columns, A's values
    entry_ids: np.ndarray     # position in A's entries of every block entry (A.values[entry_ids])

    @property
    def num_owned(self) -> int:
        return int(self.owned.shape[0])

    @property
    def num_halo(self) -> int:
        return int(self.halo.shape[0])

    @property
    def send_counts(self) -> np.ndarray:
        return np.array([idx.shape[0] for idx in self.send_index], dtype=np.int64)

    @property
    def recv_offsets(self) -> np.ndarray:
        """Start of each owner's slice in ``halo`` (length parts + 1)."""
        return np.concatenate([[0], np.cumsum(self.recv_counts)])

    def send_peers(self) -> list:
        return [n for n, idx in enumerate(self.send_index) if idx.shape[0]]

    def recv_peers(self) -> list:
        return [int(n) for n in np.flatnonzero(self.recv_counts)]


class _Arrays:
    """Numpy views of an operator's CSR arrays and, on first use, of its (cached) transpose."""

    def __init__(self, adj: Adjacency):
        if adj.shape[0] != adj.shape[1]:
            raise GraphError(f"a halo exchange needs a square operator, got shape {adj.shape}")
        self.adj = adj
        self.indptr, self.indices = csr_arrays(adj)
        self.values = None if adj.values is None else adj.values.detach().cpu().numpy()

    @property
    def transpose(self) -> tuple[np.ndarray, np.ndarray]:
        indptr_t, indices_t, _ = self.adj.transpose_structure()
        return indptr_t.numpy(), indices_t.numpy()


def rank_halo(adj: Adjacency, assignment, parts: Optional[int], rank: int) -> RankHalo:
    """The halo of one rank. ``assignment``: part of every vertex (numpy, torch or Partition)."""
    assignment, parts = check_assignment(assignment, parts, adj.shape[0])
    if not 0 <= rank < parts:
        raise ValueError(f"rank {rank} out of range for {parts} parts")
    return _rank_halo(_Arrays(adj), assignment, parts, rank, np.flatnonzero(assignment == rank))


def halos(adj: Adjacency, assignment, parts: Optional[int] = None) -> list:
    """``[rank_halo(adj, assignment, parts, m) for m in range(parts)]``, sharing the work."""
    return list(rank_halos(adj, assignment, parts))


def rank_halos(adj: Adjacency, assignment, parts: Optional[int] = None):
    """The halos of ranks 0, 1, ... one at a time, holding one at once. Needs no transpose
    of ``adj``: what rank m sends rank n is m's slice of n's halo, so a first pass collects
    every rank's halo (the communication volume, not the graph) from its own rows."""
    assignment, parts = check_assignment(assignment, parts, adj.shape[0])
    arrays = _Arrays(adj)
    order = np.argsort(assignment, kind="stable")  # vertices grouped by part, ascending ids
    bounds = np.concatenate([[0], np.cumsum(np.bincount(assignment, minlength=parts))])
    owned = [order[bounds[m]:bounds[m + 1]] for m in range(parts)]
    halos = []
    for m in range(parts):
        cols = np.unique(arrays.indices[_ranges(arrays.indptr[owned[m]], np.diff(arrays.indptr)[owned[m]])])
        _, _, halo, counts = _halo(cols, assignment, parts, m)
        halos.append(np.split(halo, np.cumsum(counts)[:-1]))
    for m in range(parts):
        send_index = [np.searchsorted(owned[m], halos[n][m]) for n in range(parts)]
        yield _rank_halo(arrays, assignment, parts, m, owned[m], send_index)


def _halo(cols: np.ndarray, assignment: np.ndarray, parts: int, rank: int):
    """Of ascending column ids ``cols``: which are foreign, the order that groups those by
    owner (ascending ids within an owner), the halo in that order, and rows per owner."""
    owner = assignment[cols]
    foreign = owner != rank
    by_owner = np.argsort(owner[foreign], kind="stable")
    return foreign, by_owner, cols[foreign][by_owner], np.bincount(owner[foreign], minlength=parts)


def check_assignment(assignment, parts: Optional[int], num_nodes: int) -> tuple[np.ndarray, int]:
    assignment = getattr(assignment, "assignment", assignment)  # a Partition
    if hasattr(assignment, "detach"):
        assignment = assignment.detach().cpu().numpy()
    assignment = np.asarray(assignment)
    if assignment.shape != (num_nodes,) or not np.issubdtype(assignment.dtype, np.integer):
        raise GraphError(f"assignment must be an integer vector of length {num_nodes}, got "
                         f"{assignment.dtype} with shape {list(assignment.shape)}")
    assignment = assignment.astype(np.int64, copy=False)
    parts = int(assignment.max()) + 1 if parts is None else int(parts)
    if num_nodes and (assignment.min() < 0 or assignment.max() >= parts):
        raise GraphError(f"assignment values must lie in [0, {parts})")
    return assignment, parts


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every (s, c), without a Python loop."""
    ends = np.cumsum(counts)
    return np.repeat(starts - (ends - counts), counts) + np.arange(int(ends[-1]) if len(ends) else 0)


def _rank_halo(a: _Arrays, assignment: np.ndarray, parts: int, rank: int, owned: np.ndarray,
               send_index: Optional[list] = None) -> RankHalo:
    """``send_index``: what this rank sends, when the caller knows; else from the transpose."""
    row_counts = a.indptr[owned + 1] - a.indptr[owned]
    entries = _ranges(a.indptr[owned], row_counts)
    if send_index is None:
        send_index = _send_index(a, assignment, parts, rank, owned)
    values = None if a.values is None else a.values[entries]
    return local_halo(owned, row_counts, a.indices[entries], entries, values, assignment, parts, rank, send_index)


def local_halo(owned: np.ndarray, row_counts: np.ndarray, cols: np.ndarray, entry_ids: np.ndarray,
               values: Optional[np.ndarray], assignment: np.ndarray, parts: int, rank: int,
               send_index: list) -> RankHalo:
    """The halo of rank ``rank`` from its own rows alone: ``owned`` (ascending global ids), the
    entries of those rows in CSR order (``cols``: global column ids; ``entry_ids``: positions
    among the whole operator's entries; ``values``: None when unweighted) and what it sends
    (``send_index``, from its peers' halos). ``assignment`` gives the part of the columns when
    indexed by an array of them: a vector over all nodes, or a lookup of the columns' parts
    alone. A process holding only these rows builds the same block as one holding the whole
    operator."""
    num_owned = owned.shape[0]
    # the distinct columns my rows reference
    uniq, col_of_entry = np.unique(cols, return_inverse=True)
    foreign, by_owner, halo, recv_counts = _halo(uniq, assignment, parts, rank)

    # local column ids: owned by position among owned rows, halo after them in halo order
    local = np.empty(uniq.shape[0], dtype=np.int64)
    local[~foreign] = np.searchsorted(owned, uniq[~foreign])
    halo_pos = np.empty(halo.shape[0], dtype=np.int64)
    halo_pos[by_owner] = num_owned + np.arange(halo.shape[0])
    local[foreign] = halo_pos
    block, order = _block(row_counts, local[col_of_entry.ravel()], values, num_owned + halo.shape[0])
    return RankHalo(rank, parts, owned, halo, recv_counts, send_index, block, np.asarray(entry_ids)[order])


def _send_index(a: _Arrays, assignment, parts: int, rank: int, owned: np.ndarray) -> list:
    """For each of my columns, the parts of the rows that reference it (from the transpose)."""
    num_owned = owned.shape[0]
    indptr_t, indices_t = a.transpose
    col_counts = indptr_t[owned + 1] - indptr_t[owned]
    readers = assignment[indices_t[_ranges(indptr_t[owned], col_counts)]]
    local_col = np.repeat(np.arange(num_owned, dtype=np.int64), col_counts)
    out = readers != rank
    pairs = np.unique(readers[out] * max(num_owned, 1) + local_col[out])  # sorted by (peer, id)
    peer = pairs // max(num_owned, 1)
    return np.split(pairs - peer * max(num_owned, 1), np.cumsum(np.bincount(peer, minlength=parts))[:-1])


def _block(row_counts, local_cols, values, width) -> tuple[Adjacency, np.ndarray]:
    """Owned rows with renumbered columns, sorted within each row (halo ids broke the order),
    and the order that sorts them (positions among the rows' entries)."""
    rows = np.repeat(np.arange(row_counts.shape[0], dtype=np.int64), row_counts)
    order = np.argsort(rows * width + local_cols, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(row_counts)])
    data = np.ones(order.shape[0], np.float32) if values is None else values[order]
    mat = sp.csr_matrix((data, local_cols[order], indptr), shape=(row_counts.shape[0], width))
    return Adjacency.from_scipy(mat, weighted=values is not None), order
