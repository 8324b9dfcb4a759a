"""A chunk, and what a model sees of it: its destination rows, and the loaded rows they read.

A chunk's block of every operator has its destinations as rows and its loaded rows (sorted
global ids, destinations among them) as columns, so a layer called on the loaded rows
returns the destinations' rows. Masks are keyed by global ids as on one process, and a
stage replays the epoch's draws from where the whole-graph pass would be
(``set_epoch(epoch, draws)``), so every chunk, and every recomputation, draws the same masks.
"""

from __future__ import annotations

import numpy as np
import torch

from ... import ops
from ...graph import Adjacency
from ...view import OPERATORS, GraphView


class Chunk:
    """Destinations ``dst`` (global ids, ascending; local owned positions ``lo:hi``) and the
    rows they read, ``neighbours`` (global ids, ascending, ``dst`` among them); ``entries``:
    their in-edges and self-loops (a bound on any operator's entries in the chunk)."""

    def __init__(self, rank: int, lo: int, hi: int, dst: np.ndarray, neighbours: np.ndarray, entries: int = 0):
        self.rank, self.lo, self.hi = rank, lo, hi
        self.dst, self.neighbours, self.entries = dst, neighbours, entries

    @property
    def rows(self) -> int:
        return self.hi - self.lo


def neighbourhood(adj: Adjacency, dst: np.ndarray) -> np.ndarray:
    """The sorted global ids whose rows destinations ``dst`` read: in-neighbours and themselves
    (every operator's pattern lies within A + I)."""
    indptr, indices = adj.indptr.numpy(), adj.indices.numpy()
    return np.union1d(dst, indices[_entry_ids(indptr, dst)])


def _entry_ids(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """CSR positions of the entries of ``rows``, row by row."""
    starts, counts = indptr[rows], indptr[rows + 1] - indptr[rows]
    offsets = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(int(counts.sum()), dtype=np.int64) - offsets + np.repeat(starts, counts)


class ChunkView(GraphView):
    """One chunk's rows of the whole graph's operators. ``wide``: the vertex data passed in
    holds the loaded rows (``chunk.neighbours``), else the destinations only."""

    def __init__(self, adj: Adjacency, chunk: Chunk, operators: dict, seed: int, device):
        super().__init__(adj, seed=seed, device=device)
        self.chunk = chunk
        self._global_operators = operators  # shared by all chunks of a rank
        self._blocks: dict = {}    # name -> (block, entries), in host memory
        self._resident: dict = {}  # the blocks' copies on the device, while a batch runs
        self.wide = True
        self._dst_pos = _host(torch.from_numpy(np.searchsorted(chunk.neighbours, chunk.dst)), self.device)

    @property
    def num_nodes(self) -> int:
        return self.chunk.rows

    def block(self, name: str):
        """(rows of ``name`` for the destinations, columns relabelled to loaded rows; global entry
        ids), on the view's device: on a GPU a copy made for the batch running, until ``release``."""
        host = self._host_block(name)
        if self.device.type == "cpu":
            return host
        if name not in self._resident:
            self._resident[name] = (_to_device(host[0], self.device), host[1])
        return self._resident[name]

    def load(self, names) -> dict:
        """Copy the blocks of operators ``names`` and the destinations' positions in now (on
        the stream a batch's loads run on); returns the copies made (none on the CPU)."""
        if self.device.type != "cpu":
            for name in sorted(names):
                self.block(name)
            if "dst_pos" not in self._resident:
                self._resident["dst_pos"] = self._dst_pos.to(_indexed(self.device), non_blocking=True)
        return self._resident

    def release(self) -> None:
        """Let go of the device's copies of the blocks (a batch is done with them): on a GPU
        the fast tier holds one chunk's topology at a time, the rest waits in pinned memory."""
        self._resident.clear()

    def _host_block(self, name: str):
        if name not in self._blocks:
            if name not in OPERATORS:
                raise ValueError(f"unknown graph operator {name!r}; choose from {sorted(OPERATORS)}")
            if name not in self._global_operators:
                self._global_operators[name] = OPERATORS[name](self.adj)
            op = self._global_operators[name]
            indptr = op.indptr.numpy()
            entries = _entry_ids(indptr, self.chunk.dst)
            counts = indptr[self.chunk.dst + 1] - indptr[self.chunk.dst]
            local_ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            columns = np.searchsorted(self.chunk.neighbours, op.indices.numpy()[entries])  # order kept
            values = None if op.values is None else _host(op.values[torch.from_numpy(entries)], self.device)
            sub = Adjacency(torch.from_numpy(local_ptr), torch.from_numpy(columns.astype(np.int64)), values,
                            (len(self.chunk.dst), len(self.chunk.neighbours)))
            self._blocks[name] = (sub, entries)
        return self._blocks[name]

    def build(self, names) -> None:
        """Cut the blocks of operators ``names``, with the index arrays the kernels use
        (the structure a training pass would otherwise build on first use), in host memory;
        pinned for a GPU, which copies them in batch by batch."""
        for name in sorted(names):
            block = self._host_block(name)[0]
            ops.index(block, "cpu")
            if self.device.type != "cpu":
                cache = block._structure_cache()
                for key, value in cache.items():
                    if _on_cpu(key):
                        cache[key] = tuple(_host(t, self.device) for t in value) if isinstance(value, tuple) \
                            else _host(value, self.device)

    def destinations(self, x: torch.Tensor) -> torch.Tensor:
        if not self.wide:
            return x
        if "dst_pos" not in self._resident:
            self._resident["dst_pos"] = self._dst_pos.to(x.device, non_blocking=True)
        return x[self._resident["dst_pos"]]

    def spmm(self, x, op="gcn", values=None):
        return ops.spmm(self.block(op)[0], x, values)

    def sddmm(self, dst, src, op="loop", kind="add"):
        return ops.sddmm(self.block(op)[0], self.destinations(dst), src, kind)

    def edge_softmax(self, scores, op="loop"):
        return ops.edge_softmax(self.block(op)[0], scores)

    def rows(self):
        return self.chunk.neighbours if self.wide else self.chunk.dst

    def entries(self, op):
        return self._host_block(op)[1]


def _on_cpu(key) -> bool:
    """Whether a structure-cache key names index arrays built for the CPU (``ops._index``'s keys)."""
    return isinstance(key, tuple) and key[-1] == "cpu"


def _host(t: torch.Tensor, device) -> torch.Tensor:
    """``t`` where the host keeps what ``device`` copies in: pinned memory for a GPU."""
    return t.pin_memory() if torch.device(device).type == "cuda" else t


def _indexed(device) -> torch.device:
    """``device`` with its index: the kernels look their arrays up by ``x.device``, which has one."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _to_device(block: Adjacency, device) -> Adjacency:
    """A copy of ``block`` for ``device``: its values and the kernels' index arrays copied
    there (asynchronously, from pinned memory); the CSR itself stays in host memory, as the
    structure the kernels' arrays were built from. Its cache is its own, freed with it."""
    device = _indexed(device)
    values = None if block.values is None else block.values.to(device, non_blocking=True)
    out = Adjacency(block.indptr, block.indices, values, block.shape)
    cache = out._structure_cache()
    for key, value in block._structure_cache().items():
        if _on_cpu(key):
            key = key[:-1] + (str(device),)
            value = tuple(t.to(device, non_blocking=True) for t in value) if isinstance(value, tuple) \
                else value.to(device, non_blocking=True)
        cache[key] = value
    return out


def chunk_views(adj: Adjacency, plan, stages: list, rank: int, seed: int, device) -> list:
    """One view per batch of ``plan`` for ``rank``, its operators' blocks cut now: the
    topology is built before training (on a GPU it waits in pinned memory, and each batch
    copies its chunk's in: the fast tier holds one chunk's topology, within the budget)."""
    operators: dict = {}  # the whole graph's, only while the chunks' blocks are cut from them
    views = [ChunkView(adj, plan.chunk(rank, b), operators, seed, device) for b in range(plan.batches)]
    for view in views:
        view.build({name for stage in stages for name in stage.operators})
    return views
