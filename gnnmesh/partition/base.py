"""The Partition record and the small helpers every partitioner shares."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import ConfigError
from ..graph import Adjacency
from ..transforms import row_blocks
from ..view import keyed_hash
from .registry import names



class MissingExtraError(ConfigError, ImportError):
    """An optional partitioner package is not installed. Both a ConfigError (the CLI prints
    one line) and an ImportError (what callers probing for optional features expect)."""


@dataclass
class Partition:
    """A vertex -> part assignment and how it was made.

    ``graph_key`` identifies the adjacency structure it was computed for (see ``graph_key``);
    ``path`` is where it is stored on disk, if it is; ``from_cache`` tells whether
    ``partition()`` reused a stored result (``seconds`` is then the original time).
    ``preset`` is the Mt-KaHyPar preset that made an ``hp`` or ``shp`` partition (None for
    the others); ``sampling``, for ``shp``, its sampling settings and how many batches and
    nets it drew (see ``stochastic.stochastic_partition``).
    """

    assignment: np.ndarray
    parts: int
    method: str
    epsilon: float
    seed: int
    seconds: float
    graph_key: str
    path: Optional[str] = None
    from_cache: bool = False
    preset: Optional[str] = None
    sampling: Optional[dict] = None

    @property
    def num_nodes(self) -> int:
        return int(self.assignment.shape[0])

    def owned(self, rank: int) -> np.ndarray:
        """Sorted ids of the vertices of part ``rank``."""
        return np.flatnonzero(self.assignment == rank)

    def sizes(self) -> np.ndarray:
        """Vertices per part."""
        return np.bincount(self.assignment, minlength=self.parts)


def as_adjacency(graph) -> Adjacency:
    """Accept a Graph or an Adjacency."""
    adj = getattr(graph, "adj", graph)
    if not isinstance(adj, Adjacency):
        raise TypeError(f"expected a gnnmesh Graph or Adjacency, got {type(graph).__name__}")
    return adj


def csr_arrays(adj: Adjacency) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` as int64 numpy arrays (views when already int64)."""
    indptr = np.ascontiguousarray(adj.indptr.numpy(), dtype=np.int64)
    indices = np.ascontiguousarray(adj.indices.numpy(), dtype=np.int64)
    return indptr, indices


def graph_key(graph) -> str:
    """Content hash of the adjacency structure (its shape and the (row, column) of every
    entry; not the values).

    Partitions depend only on the structure, so a weighted graph and its pattern share a
    key. The entries are hashed one by one and the hashes summed, so processes that
    each hold some rows compute the same key with one sum over them (``structure_key`` of the
    summed ``entry_sums``). About 0.3 s for 10M edges.
    """
    adj = as_adjacency(graph)
    indptr, indices = csr_arrays(adj)
    sums = np.zeros(2, dtype=np.uint64)
    for lo, hi in row_blocks(indptr):
        rows = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
        add_sums(sums, entry_sums(rows, indices[indptr[lo]:indptr[hi]], adj.shape[1]))
    return structure_key(adj.shape, int(indptr[-1]), sums)


_KEY_SALTS = (0x6B65792D6F6E65, 0x6B65792D74776F)  # two independent 64-bit lanes


def entry_sums(rows: np.ndarray, cols: np.ndarray, num_cols: int) -> np.ndarray:
    """Per lane, the wrapping sum of the hashes of entries (rows[k], cols[k]): uint64 [2]."""
    out = np.zeros(2, dtype=np.uint64)
    for lane, salt in enumerate(_KEY_SALTS):
        with np.errstate(over="ignore"):
            counters = rows.astype(np.uint64) * np.uint64(num_cols) + cols.astype(np.uint64)
        out[lane] = np.sum(keyed_hash(salt, counters), dtype=np.uint64)
    return out


def add_sums(total: np.ndarray, more: np.ndarray) -> np.ndarray:
    """``total += more``, wrapping (uint64 lanes of ``entry_sums``)."""
    with np.errstate(over="ignore"):
        total += more
    return total


def structure_key(shape, nnz: int, sums: np.ndarray) -> str:
    """The key of a structure of ``shape`` with ``nnz`` entries whose ``entry_sums`` are ``sums``."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.asarray([*shape, nnz], dtype=np.int64).tobytes())
    h.update(np.asarray(sums, dtype="<u8").tobytes())
    return h.hexdigest()


def vertex_weights(adj: Adjacency) -> np.ndarray:
    """Compute load of each row: its nonzeros, plus one so that empty rows weigh something."""
    indptr, _ = csr_arrays(adj)
    return np.diff(indptr) + 1


def check_parts(parts, num_nodes: int) -> int:
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)):
        raise ConfigError(f"parts must be an integer, got {parts!r}")
    parts = int(parts)
    if parts < 1:
        raise ConfigError(f"parts must be at least 1, got {parts}")
    if parts > num_nodes:
        raise ConfigError(f"cannot split a graph of {num_nodes} nodes into {parts} parts: "
                          "every part needs at least one node")
    return parts


def check_method(method: str) -> str:
    methods = names(sampled=False)   # the ones partition() runs; a sampled one needs sampling settings
    if method not in methods:
        raise ConfigError(f"unknown partitioning method {method!r}; choose from {', '.join(methods)}")
    return method


def fill_empty_parts(assignment: np.ndarray, parts: int) -> np.ndarray:
    """Give every empty part one vertex, taken deterministically from the currently largest
    part (its highest id). Tools may return empty parts for tiny or very skewed graphs."""
    assignment = np.asarray(assignment, dtype=np.int64).copy()
    sizes = np.bincount(assignment, minlength=parts)
    for empty in np.flatnonzero(sizes == 0):  # loop over parts, not vertices
        donor = int(np.argmax(sizes))
        vertex = np.flatnonzero(assignment == donor)[-1]
        assignment[vertex] = empty
        sizes[donor] -= 1
        sizes[empty] += 1
    return assignment


def imbalance(assignment: np.ndarray, parts: int, weights: np.ndarray) -> float:
    """``max part weight / average part weight - 1`` (0 is perfect balance)."""
    loads = np.bincount(assignment, weights=weights, minlength=parts)
    return float(loads.max() / loads.mean() - 1.0)
