"""Which block of every matrix a rank of the 3D grid holds (Plexus §3.1, §3.2, §5.1).

Ranks form an X x Y x Z grid. Each GCN layer gives the three grid axes three roles:
``rows`` cuts the rows of its adjacency block (and of its output), ``cols`` cuts the
adjacency's columns, which are the rows of its input, and ``feats`` cuts the input's
feature columns. Layer 0 takes (Z, X, Y): A over the ZX plane, the input over XY, W over
YX. A layer's output is cut (rows, cols) and replicated along ``feats``, so the next layer
takes (cols, feats) = (this rows, this cols): the roles cycle with period three and no
data moves between layers.

Node axis ``k`` is the node numbering between layer ``k - 1`` and layer ``k`` (axis 0:
the input's rows). With the double permutation, layer ``l`` multiplies with
``P_r A P_c^T`` for even ``l`` and ``P_c A P_r^T`` for odd ``l``, so axis ``k`` is numbered
by ``P_c`` for even ``k`` and by ``P_r`` for odd ``k``; without it every axis keeps the
original ids.

Blocks are contiguous ranges of near-equal size, the larger ones first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ..errors import ConfigError
# The cut rule of the 2D shard files, so that a rank's blocks are whole shards where the grids agree.
from ..grid.permute import balanced_permutations, block_bounds as bounds, permutations

AXES = ("x", "y", "z")
_CYCLE = (("z", "x", "y"), ("y", "z", "x"), ("x", "y", "z"))


@dataclass(frozen=True)
class Roles:
    rows: str
    cols: str
    feats: str


def roles(layer: int) -> Roles:
    return Roles(*_CYCLE[layer % 3])


def sizes(size: int, parts: int) -> list:
    return np.diff(bounds(size, parts)).tolist()


def cut(size: int, parts: int, index: int) -> slice:
    b = bounds(size, parts)
    return slice(int(b[index]), int(b[index + 1]))


def default_grid(world_size: int) -> dict:
    """The most cubic X x Y x Z of ``world_size`` ranks (smallest X + Y + Z; ties go to the
    larger X, then Y). The one place a performance model's choice would plug in."""
    shapes = [(x, y, world_size // (x * y)) for x in range(1, world_size + 1) if world_size % x == 0
              for y in range(1, world_size // x + 1) if (world_size // x) % y == 0]
    x, y, z = min(shapes, key=lambda s: (sum(s), -s[0], -s[1]))
    return {"x": x, "y": y, "z": z}


def parse_grid(text, world_size: int) -> dict:
    """``"X,Y,Z"`` as ``{"x": X, "y": Y, "z": Z}``; ``None`` picks ``default_grid``."""
    if text is None:
        return default_grid(world_size)
    try:
        dims = [int(part) for part in str(text).split(",")]
    except ValueError:
        dims = []
    if len(dims) != 3 or min(dims) < 1:
        raise ConfigError(f"config field 'grid': expected three positive integers X,Y,Z, got {text!r}")
    if int(np.prod(dims)) != world_size:
        raise ConfigError(f"config field 'grid': {'x'.join(map(str, dims))} is {int(np.prod(dims))} ranks "
                          f"but the job has {world_size}")
    return dict(zip(AXES, dims))


def coordinates(dims: dict, rank: int) -> dict:
    """Grid coordinates of world rank ``rank``: Y varies fastest, then X, then Z (the order
    of Grid3D's mesh)."""
    y, rest = rank % dims["y"], rank // dims["y"]
    return {"x": rest % dims["x"], "y": y, "z": rest // dims["x"]}


class GridLayout:
    """Block bookkeeping of one grid shape; every method takes the coordinates of the rank
    asked about, so a rank can also work out what its peers hold."""

    def __init__(self, dims: dict, num_nodes: int, permute: bool = True, seed: int = 0, adj=None):
        """With ``adj``, the pair is chosen to balance its blocks on every plane of the grid
        (``balanced_permutations``); without, it is Plexus's random pair."""
        self.dims, self.num_nodes = dict(dims), int(num_nodes)
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
    def from_orders(cls, dims: dict, orders) -> "GridLayout":
        """The layout whose node orders (``orders``) were chosen earlier, e.g. by a parts writer."""
        layout = cls.__new__(cls)
        layout.dims, layout.num_nodes = dict(dims), int(len(orders[0]))
        layout._orders = (np.asarray(orders[0]), np.asarray(orders[1]))
        return layout

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


@dataclass
class OutputPlan:
    """How the last layer's output block reaches the ranks that score it.

    The block (rows along the last layer's rows axis, class columns along its cols axis) is
    replicated along its feats axis; each replica sends one share of its rows (``share``),
    reordered by destination (``send_order``), to the world rank whose ``loss_rows`` hold
    them. ``recv_index`` places what arrives, in arrival order, into the flattened
    ``[len(loss_rows), classes]`` logits."""

    share: slice
    share_sizes: list
    columns: slice
    send_order: np.ndarray
    send_counts: list
    recv_counts: list
    recv_index: np.ndarray

    def to(self, device) -> "OutputPlan":
        """The same plan with its index arrays as int64 tensors on ``device``."""
        index = (lambda a: torch.as_tensor(np.asarray(a), dtype=torch.int64, device=device))
        return replace(self, send_order=index(self.send_order), recv_index=index(self.recv_index))


def output_plan(layout: GridLayout, layers: int, classes: int, everyone: list, rank: int) -> OutputPlan:
    """``everyone[q]``: the grid coordinates of world rank ``q``; ``rank``: this one's."""
    world = len(everyone)
    last = roles(layers - 1)
    owner = np.repeat(np.arange(world), sizes(layout.num_nodes, world))
    start = cut(layout.num_nodes, world, rank).start

    def shares(coords):
        block = layout.nodes(layers, last.rows, coords)
        split = layout.dims[last.feats]
        share = cut(len(block), split, coords[last.feats])
        return block, share, sizes(len(block), split), layout.width(classes, last.cols, coords)

    block, share, share_sizes, columns = shares(everyone[rank])
    dest = owner[block[share]]
    width = columns.stop - columns.start
    send_counts = (np.bincount(dest, minlength=world) * width).tolist()
    recv_counts, recv_index = [], []
    for coords in everyone:
        block_s, share_s, _, cols_s = shares(coords)
        ids = block_s[share_s]
        rows = ids[owner[ids] == rank] - start
        recv_counts.append(len(rows) * (cols_s.stop - cols_s.start))
        recv_index.append((rows[:, None] * classes + np.arange(cols_s.start, cols_s.stop)[None, :]).ravel())
    return OutputPlan(share, share_sizes, columns, np.argsort(dest, kind="stable"), send_counts,
                      recv_counts, np.concatenate(recv_index).astype(np.int64))
