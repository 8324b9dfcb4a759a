"""A graph known by its size alone (``gnnmesh plan --nodes N --edges E``), as the models of
``partition`` and ``tensor`` take it: each operator's entries, and the halos a random
partition (``rp``) would give it in expectation.

The expectation assumes the stored entries land on columns uniformly at random (an
Erdős–Rényi graph with the same size). A block of n_p rows holding E n_p / N of the E
off-diagonal entries needs a given row of another rank when at least one of them falls on
its column: probability 1 - exp(-E n_p / N²). With a skewed degree distribution the same
number of entries covers fewer distinct columns (that probability is concave in a row's
degree), so a real graph's random partition has at most these halos: an upper bound on
bytes. The partitioners that follow the graph's structure (gp, hp) cannot be priced
without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..layout.ranges import even_bounds


@dataclass(frozen=True)
class OperatorSize:
    """One operator's stored entries, and whether it stores values."""
    nnz: int
    valued: bool


@dataclass(frozen=True)
class SizedGraph:
    """``entries``: the stored adjacency entries (an undirected edge counts twice), without
    self-loops; the operators that add them (``gcn``, ``loop``) hold ``nodes`` more."""
    nodes: int
    entries: int
    name: str = "graph"

    def operator(self, name: str) -> OperatorSize:
        loops = name in ("gcn", "loop")
        return OperatorSize(self.entries + (self.nodes if loops else 0), valued=name in ("gcn", "mean"))

    def rows(self, parts: int) -> np.ndarray:
        """Rows per part of a random partition (a permutation dealt round-robin: sizes differ by
        at most one)."""
        bounds = even_bounds(self.nodes, parts)
        return np.diff(np.asarray(bounds, dtype=np.int64))

    def random_halos(self, name: str, parts: int) -> tuple:
        """(send, nnz): the expected rows rank r sends rank p in one exchange of operator
        ``name`` under a random partition, ``[parts, parts]``, and each rank's block entries."""
        rows = self.rows(parts).astype(np.float64)
        needed = -np.expm1(-self.entries * rows / float(self.nodes) ** 2)   # by the receiving rank
        send = np.rint(rows[:, None] * needed[None, :]).astype(np.int64)
        np.fill_diagonal(send, 0)
        nnz = np.rint(self.operator(name).nnz * rows / self.nodes).astype(np.int64)
        return send, nnz
