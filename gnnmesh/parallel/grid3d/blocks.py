"""Which block of every matrix a rank of the 3D grid holds (Plexus §3.1, §3.2, §5.1): 2D block
partitioning of the adjacency under a pair of node orders, and the near-equal cuts of vertex
data along the grid's axes.

Node axis ``k`` is the node numbering between layer ``k - 1`` and layer ``k`` (axis 0:
the input's rows). With the double permutation, layer ``l`` multiplies with
``P_r A P_c^T`` for even ``l`` and ``P_c A P_r^T`` for odd ``l``, so axis ``k`` is numbered
by ``P_c`` for even ``k`` and by ``P_r`` for odd ``k``; without it every axis keeps the
original ids. The roles of the grid's axes in each layer are ``gnnmesh.layout.grid.roles``.

Blocks are contiguous ranges of near-equal size, the larger ones first (``block_bounds``,
the rule the 2D block files use too, so a rank's blocks are whole files where grids agree).
"""

from __future__ import annotations

import numpy as np

from ...layout.grid import AXES
from ...layout.ranges import cut
from .permutation import balanced_permutations, permutations


class GridBlocks:
    """Block bookkeeping of one grid shape; every method takes the coordinates of the rank
    asked about, so a rank can also work out what its peers hold."""

    def __init__(self, dims, num_nodes: int, permute: bool = True, seed: int = 0, adj=None):
        """``dims``: the grid (a ``Grid`` or an ``{"x", "y", "z"}`` dict). With ``adj``, the
        pair is chosen to balance its blocks on every plane of the grid
        (``balanced_permutations``); without, it is Plexus's random pair."""
        self.dims, self.num_nodes = {a: int(dims[a]) for a in AXES}, int(num_nodes)
        if not permute:
            ids = np.arange(self.num_nodes)
            self._orders = (ids, ids)
            return
        if adj is not None:  # the planes' row and column cuts: Z x X, X x Y, Y x Z
            x, y, z = (self.dims[a] for a in AXES)
            row_perm, col_perm = balanced_permutations(adj, [(z, x), (x, y), (y, z)], seed)
        else:
            row_perm, col_perm = permutations(self.num_nodes, seed)
        self._orders = (np.argsort(col_perm), np.argsort(row_perm))  # new id -> old id

    @classmethod
    def from_orders(cls, dims, orders) -> "GridBlocks":
        """The blocks under node orders (``orders``) chosen earlier, e.g. by a parts writer."""
        blocks = cls.__new__(cls)
        blocks.dims, blocks.num_nodes = {a: int(dims[a]) for a in AXES}, int(len(orders[0]))
        blocks._orders = (np.asarray(orders[0]), np.asarray(orders[1]))
        return blocks

    @property
    def orders(self) -> tuple:
        """(order of even node axes, order of odd ones): new id -> original id."""
        return self._orders

    def nodes(self, axis_k: int, axis: str, coords: dict) -> np.ndarray:
        """Original ids of the block of node axis ``axis_k`` cut along grid ``axis``."""
        order = self._orders[axis_k % 2]
        return order[cut(self.num_nodes, self.dims[axis], coords[axis])]

    def width(self, width: int, axis: str, coords: dict) -> slice:
        """The feature columns of a ``width``-wide matrix cut along grid ``axis``."""
        return cut(width, self.dims[axis], coords[axis])

    def loss_rows(self, rank: int, world_size: int) -> np.ndarray:
        """Original ids whose logits world rank ``rank`` scores: a contiguous block, so that
        the rows every rank scores are disjoint and independent of the model's depth."""
        return np.arange(self.num_nodes)[cut(self.num_nodes, world_size, rank)]
