"""Row and column layouts of vertex data (NeutronTP §3.1) and the all-to-all exchanges that
switch between them.

In the *row* layout rank r holds the rows ``row_bounds[r]:row_bounds[r+1]`` (all columns),
which is what dense NN operations need. In the *column* layout it holds columns
``col_bounds(D)[r]:col_bounds(D)[r+1]`` of every row, which is what a full-graph
aggregation needs. ``split`` goes from rows to columns, ``gather`` back. Both can move any
subset of rows (one chunk's worth), so the same exchange serves the whole-layer switch and
the per-chunk pipelined one.

Widths that do not divide by the number of ranks are cut into slices differing by at most
one column: nothing is padded, so nothing padded is sent or computed.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ...comm import Comm
from ...layout.ranges import even_bounds


def rank_switch_bytes(row_counts: list, width: int, mid: int = 1, element_size: int = 4) -> tuple:
    """(split, gather): the bytes each rank sends in one split and in one gather of a
    ``[V, mid, width]`` tensor whose rows the ranks own ``row_counts`` of. A split sends the
    rank's rows but its own column slice; a gather sends its column slice of the other ranks'
    rows. Both add up to the same total; what one rank sends differs."""
    world, total = len(row_counts), sum(row_counts)
    bounds = even_bounds(width, world)
    cols = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    split = [element_size * mid * rows * (width - c) for rows, c in zip(row_counts, cols)]
    gather = [element_size * mid * c * (total - rows) for rows, c in zip(row_counts, cols)]
    return split, gather


class LayoutSwitch:
    """One rank's rows and column slices, and the split and gather that move between them."""

    def __init__(self, comm: Comm, num_nodes: int):
        self.comm = comm
        self.rank, self.world = comm.rank, comm.world_size
        self.num_nodes = num_nodes
        self.row_bounds = even_bounds(num_nodes, self.world)
        self.start, self.stop = self.row_bounds[self.rank], self.row_bounds[self.rank + 1]

    @property
    def num_owned(self) -> int:
        return self.stop - self.start

    @property
    def row_counts(self) -> list:
        """Rows each rank owns."""
        return [b - a for a, b in zip(self.row_bounds[:-1], self.row_bounds[1:])]

    def col_bounds(self, width: int) -> list:
        return even_bounds(width, self.world)

    def col_width(self, width: int, rank: Optional[int] = None) -> int:
        bounds = self.col_bounds(width)
        r = self.rank if rank is None else rank
        return bounds[r + 1] - bounds[r]

    def owned_in(self, lo: int, hi: int) -> list:
        """Global rows ``lo:hi`` grouped by owner: one (ascending) LongTensor per rank."""
        out = []
        for a, b in zip(self.row_bounds[:-1], self.row_bounds[1:]):
            first = max(lo, a)
            out.append(torch.arange(first, max(first, min(hi, b))))
        return out

    def switch_bytes(self, width: int, mid: int = 1, element_size: int = 4) -> int:
        """Bytes all ranks together send for one split or one gather of a ``[V, mid, width]``
        tensor: every row leaves its owner once for every other rank's columns."""
        return sum(rank_switch_bytes(self.row_counts, width, mid, element_size)[0])

    # -- rows -> columns ---------------------------------------------------------------------
    def start_split(self, x_rows: torch.Tensor, rows_by_rank: list, first: Optional[int] = None):
        """Send this rank's rows ``rows_by_rank[me]`` (global ids) of ``x_rows`` (its row
        block, ``[num_owned, *mid, D]``, or any run of its rows starting at global id
        ``first``) to every rank, each getting its column slice."""
        width, mid_shape = x_rows.shape[-1], tuple(x_rows.shape[1:-1])
        mid = math.prod(mid_shape)
        cuts = self.col_bounds(width)
        offset = self.start if first is None else first
        block = x_rows.index_select(0, rows_by_rank[self.rank].to(x_rows.device) - offset)
        send = torch.cat([block[..., cuts[c]:cuts[c + 1]].reshape(-1) for c in range(self.world)])
        n_mine = block.shape[0]
        send_counts = [n_mine * mid * (cuts[c + 1] - cuts[c]) for c in range(self.world)]
        mine = cuts[self.rank + 1] - cuts[self.rank]
        recv_counts = [len(rows) * mid * mine for rows in rows_by_rank]
        handle, recv = self.comm.all_to_all(send, send_counts, recv_counts, async_op=True)
        return handle, recv, (sum(len(rows) for rows in rows_by_rank),) + mid_shape + (mine,)

    def finish_split(self, pending) -> torch.Tensor:
        """The column slice of the rows sent, concatenated in rank order of ``rows_by_rank``."""
        handle, recv, shape = pending
        self.comm.wait([handle])
        return recv.view(shape)

    # -- columns -> rows ---------------------------------------------------------------------
    def start_gather(self, x_cols: torch.Tensor, rows_by_rank: list, width: int):
        """Send column slices ``x_cols`` (rows in rank order of ``rows_by_rank``) to the rows'
        owners; ``width`` is the full number of columns."""
        mid_shape = tuple(x_cols.shape[1:-1])
        mid = math.prod(mid_shape)
        mine_cols = x_cols.shape[-1]
        send_counts = [len(rows) * mid * mine_cols for rows in rows_by_rank]
        n_mine = len(rows_by_rank[self.rank])
        cuts = self.col_bounds(width)
        recv_counts = [n_mine * mid * (cuts[c + 1] - cuts[c]) for c in range(self.world)]
        handle, recv = self.comm.all_to_all(x_cols.reshape(-1), send_counts, recv_counts, async_op=True)
        return handle, recv, recv_counts, (n_mine,) + mid_shape, cuts

    def finish_gather(self, pending) -> torch.Tensor:
        """Full-width rows of this rank, in the order of ``rows_by_rank[me]``."""
        handle, recv, counts, lead, cuts = pending
        self.comm.wait([handle])
        pieces = recv.split(counts)
        return torch.cat([p.view(lead + (cuts[c + 1] - cuts[c],)) for c, p in enumerate(pieces)], dim=-1)
