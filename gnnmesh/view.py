"""What a model sees of the graph: the primitives it is written with.

A model never touches the adjacency or the process layout; it calls ``view.spmm``,
``view.sddmm``, ``view.edge_softmax`` and ``view.dropout``. ``GraphView`` runs them on one
process; a parallel strategy subclasses it and supplies distributed versions, so the
models stay the same under every strategy.

Operators are named: ``"gcn"`` (D^-1/2 (A+I) D^-1/2), ``"mean"`` (D^-1 A), ``"sum"`` (A) and
``"loop"`` (the pattern of A + I, for attention).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from . import ops
from .graph import Adjacency
from .transforms import add_self_loops, gcn_norm, mean_norm

OPERATORS = {
    "gcn": gcn_norm,
    "mean": mean_norm,
    "sum": lambda adj: adj,
    "loop": lambda adj: add_self_loops(adj).with_values(None),
}


# Masks are drawn in fixed blocks of global rows (or of operator entries, in CSR order), each
# from its own generator keyed by (draw, block): a process draws only the blocks its own ids
# touch, never a mask over all rows, and the mask of any id set is the same however the ids
# are split among processes. Sizes measured with benchmarks/masks.py: from 1024 rows of 16 or
# more values up, seeding a generator per block (~10 us) costs little (the time is flat up
# to 16384 rows), and smaller blocks waste less on scattered ids (a partition's rows).
ROW_BLOCK = 1024
EDGE_BLOCK = 65536


def rows_mask(ids, row_shape, p: float, key: int, device, columns: slice = slice(None)) -> torch.Tensor:
    """Keep-mask (probability ``1 - p``, resolution 2^-16) of the global rows ``ids`` (a
    LongTensor or array in any order, or a ``range``) of a matrix with rows of ``row_shape``,
    for the draw ``key``: ``[len(ids), *row_shape]``, or only ``columns`` of the last axis."""
    return _block_mask(ids, ROW_BLOCK, tuple(row_shape), p, key, device, columns)


def entries_mask(entry_ids, edge_shape, p: float, key: int, device) -> torch.Tensor:
    """``rows_mask`` over global entry ids of an operator (per-edge values of ``edge_shape``)."""
    return _block_mask(entry_ids, EDGE_BLOCK, tuple(edge_shape), p, key, device, slice(None))


def _draw(key: int, block: int, count: int) -> np.ndarray:
    """``count`` uniform uint16 of ``block``: raw PCG64 words, several times faster than
    Generator.bytes or torch.rand. Little-endian, so every platform draws the same mask."""
    words = np.random.PCG64([key, block]).random_raw(-(-count // 4))
    return words.astype("<u8", copy=False).view("<u2")[:count]


def _block_mask(ids, size: int, shape: tuple, p: float, key: int, device, columns: slice) -> torch.Tensor:
    if not isinstance(ids, range):
        ids = _as_range(np.asarray(ids.cpu() if torch.is_tensor(ids) else ids, dtype=np.int64))
    threshold = round(p * 65536)
    out_shape = shape[:-1] + (len(range(shape[-1])[columns]),) if shape else ()
    out = np.empty((len(ids),) + out_shape, dtype=bool)
    for block, rows, dest in _segments(ids, size):
        draws = _draw(key, block, size * int(np.prod(shape))).reshape((size,) + shape)
        out[dest] = (draws[..., columns] if shape else draws)[rows] >= threshold
    return torch.from_numpy(out).to(device)


def _as_range(ids: np.ndarray):
    """``ids`` as a ``range`` when they are one ascending run (the fast path), else as given."""
    if not len(ids):
        return range(0)
    if ids[-1] - ids[0] == len(ids) - 1 and np.all(ids[1:] > ids[:-1]):
        return range(int(ids[0]), int(ids[-1]) + 1)
    return ids


def _segments(ids, size: int):
    """For every block of ``size`` ids that ``ids`` touch: (the block, the rows of it wanted,
    where they go in the output), slices for a range, index arrays otherwise."""
    if isinstance(ids, range):
        for block in range(ids.start // size, -(-ids.stop // size)):
            lo, hi = max(ids.start, block * size), min(ids.stop, (block + 1) * size)
            yield block, slice(lo - block * size, hi - block * size), slice(lo - ids.start, hi - ids.start)
        return
    ascending = bool(np.all(ids[1:] >= ids[:-1]))
    order = None if ascending else np.argsort(ids, kind="stable")
    ids = ids if ascending else ids[order]
    blocks = ids // size
    cuts = np.concatenate(([0], np.flatnonzero(blocks[1:] != blocks[:-1]) + 1, [len(ids)]))
    for a, z in zip(cuts[:-1], cuts[1:]):
        block = int(blocks[a])
        yield block, ids[a:z] - block * size, slice(a, z) if ascending else order[a:z]


class GraphView:
    """The whole graph on one process."""

    # Whether operators are moved to ``device``; a parallel view multiplies only its own
    # rows, so it keeps the global operators on the CPU.
    operators_on_device = True

    def __init__(self, adj: Adjacency, seed: int = 0, device="cpu"):
        self.adj = adj
        self.device = torch.device(device)
        self.seed = seed
        self._operators: dict = {}
        self._epoch = 0
        self._draws = 0

    @property
    def num_nodes(self) -> int:
        """Rows of vertex data this process holds."""
        return self.adj.shape[0]

    def operator(self, name: str) -> Adjacency:
        if name not in self._operators:
            if name not in OPERATORS:
                raise ValueError(f"unknown graph operator {name!r}; choose from {sorted(OPERATORS)}")
            op = OPERATORS[name](self.adj)
            if op.values is not None and self.operators_on_device:
                op = op.with_values(op.values.to(self.device))
            self._operators[name] = op
        return self._operators[name]

    # -- primitives ------------------------------------------------------------------------
    def spmm(self, x: torch.Tensor, op: str = "gcn", values=None) -> torch.Tensor:
        return ops.spmm(self.operator(op), x, values)

    def destinations(self, x: torch.Tensor) -> torch.Tensor:
        """The rows of ``x`` (rows this view reads) that its outputs are for: all of them,
        unless the view reads more rows than it writes (an out-of-core chunk)."""
        return x

    def sddmm(self, dst: torch.Tensor, src: torch.Tensor, op: str = "loop", kind: str = "add"):
        return ops.sddmm(self.operator(op), dst, src, kind)

    def edge_softmax(self, scores: torch.Tensor, op: str = "loop") -> torch.Tensor:
        return ops.edge_softmax(self.operator(op), scores)

    # -- randomness that must agree across processes ------------------------------------------
    def set_epoch(self, epoch: int, draws: int = 0) -> None:
        """Start epoch ``epoch``'s draws; ``draws`` of them already made (a view that replays
        part of the epoch, as out-of-core training does layer by layer)."""
        self._epoch, self._draws = epoch, draws

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def draws(self) -> int:
        """Masks drawn so far this epoch."""
        return self._draws

    def _next_seed(self) -> int:
        self._draws += 1
        key = f"{self.seed}:{self._epoch}:{self._draws}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1

    # A parallel view overrides these two: the global ids of the rows and operator entries it holds.
    def rows(self):
        """Global ids of this process's rows of vertex data (a range or an id array)."""
        return range(self.num_nodes)

    def entries(self, op: str):
        """Global ids (CSR positions in the whole graph's operator ``op``) of the entries whose
        per-edge values this process holds."""
        return range(self.operator(op).nnz)

    def dropout(self, x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        """Dropout on vertex rows; each row's mask depends only on its global id."""
        return self.dropout_block(x, p, training, tuple(x.shape[1:]))

    def dropout_block(self, x: torch.Tensor, p: float, training: bool, row_shape: tuple, rows=None,
                      columns: slice = slice(None)) -> torch.Tensor:
        """Dropout on a block of a vertex matrix whose rows have ``row_shape``: the rows of
        global ids ``rows`` (default: this process's), and only ``columns`` of the last axis
        (for a layout that cuts vertex data by columns too)."""
        if not training or p == 0.0:
            return x
        return _apply_mask(x, self.vertex_mask(row_shape, p, rows, columns), p)

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool, op: str = "loop"):
        """Dropout on per-edge values of operator ``op`` (GAT's attention dropout)."""
        if not training or p == 0.0:
            return values
        return _apply_mask(values, self.edge_mask(op, tuple(values.shape[1:]), p), p)

    def vertex_mask(self, row_shape: tuple, p: float, rows=None, columns: slice = slice(None)) -> torch.Tensor:
        """The next draw's keep-mask of rows ``rows`` (default: this process's), ``columns``."""
        ids = self.rows() if rows is None else rows
        return rows_mask(ids, row_shape, p, self._next_seed(), self.device, columns)

    def edge_mask(self, op: str, edge_shape: tuple, p: float) -> torch.Tensor:
        """The next draw's keep-mask of this process's entries of operator ``op``."""
        return entries_mask(self.entries(op), edge_shape, p, self._next_seed(), self.device)


def _apply_mask(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    return (x * keep.to(x.device)).mul_(1.0 / (1.0 - p))
