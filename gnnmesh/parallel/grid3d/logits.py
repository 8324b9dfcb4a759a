"""How the last grid3d layer's output reaches the ranks that score it (the one all-to-all of
an epoch, ``collectives.ToLossRows``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ...layout.grid import roles
from ...layout.ranges import cut, sizes
from .blocks import GridBlocks


@dataclass
class LogitRoute:
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

    def to(self, device) -> "LogitRoute":
        """The same route with its index arrays as int64 tensors on ``device``."""
        index = (lambda a: torch.as_tensor(np.asarray(a), dtype=torch.int64, device=device))
        return replace(self, send_order=index(self.send_order), recv_index=index(self.recv_index))


def logit_route(blocks: GridBlocks, layers: int, classes: int, everyone: list, rank: int) -> LogitRoute:
    """``everyone[q]``: the grid coordinates of world rank ``q``; ``rank``: this one's."""
    world = len(everyone)
    last = roles(layers - 1)
    owner = np.repeat(np.arange(world), sizes(blocks.num_nodes, world))
    start = cut(blocks.num_nodes, world, rank).start

    def shares(coords):
        block = blocks.nodes(layers, last.rows, coords)
        split = blocks.dims[last.feats]
        share = cut(len(block), split, coords[last.feats])
        return block, share, sizes(len(block), split), blocks.width(classes, last.cols, coords)

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
    return LogitRoute(share, share_sizes, columns, np.argsort(dest, kind="stable"), send_counts,
                      recv_counts, np.concatenate(recv_index).astype(np.int64))
