"""A chunk, what a model sees of it, and the order chunks run in (HongTu, SIGMOD 2024, §4.1
and §5.1–5.3).

A chunk's block of every operator has its destinations as rows and its loaded rows (sorted
global ids, destinations among them) as columns, so a layer called on the loaded rows
returns the destinations' rows. Masks are keyed by global ids as on one process, and a
stage replays the epoch's draws from where the whole-graph pass would be
(``set_epoch(epoch, draws)``), so every chunk, and every recomputation, draws the same masks.

Each rank's destination rows are cut into K chunks (``cut``); the chunks at one position on
every rank form a *batch* and run together, batches one after another. A chunk must load the
rows of its *neighbour set* (sorted unique global ids). Rows shared inside a batch are
loaded once (its *transition set* is the union) and rows shared by consecutive batches
stay loaded, so the order of chunks decides how much is loaded: ``reorganize`` is the
paper's two-phase greedy (Algorithm 4) that groups and sequences chunks to share rows.
It is a heuristic; the caller compares costs and keeps the original order when it loses.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
import torch

from ... import ops
from ...graph import Adjacency
from ...view import GraphView, operator_of

_BLOCK = 1 << 22  # id matches expanded at once in _overlaps; bounds its memory


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
            if name not in self._global_operators:
                self._global_operators[name] = operator_of(name, self.adj)
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

    def edge_block(self, op):
        return self.block(op)[0]

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


# -- the order chunks run in --------------------------------------------------------------------


def cut(weights: np.ndarray, k: int) -> np.ndarray:
    """Boundaries (length ``k + 1``, from 0 to ``len(weights)``) of ``k`` contiguous row
    ranges with balanced weight sums. Boundary ``j`` is the prefix-sum position nearest to
    ``j * total / k``, so it is off by at most half a row's weight and no chunk weighs more
    than ``total / k + max(weights)``. With more chunks than rows some chunks are empty."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    w = np.asarray(weights)
    if w.ndim != 1 or (w.size and w.min() < 0):
        raise ValueError("weights must be a 1-D array of non-negative numbers")
    prefix = np.concatenate([[0], np.cumsum(w)])
    scaled = prefix * k  # compare k * prefix with j * total: exact for integer weights
    targets = np.arange(1, k) * prefix[-1]
    above = np.searchsorted(scaled, targets, side="left")  # first prefix >= target
    below = np.maximum(above - 1, 0)
    nearer = np.where(targets - scaled[below] < scaled[above] - targets, below, above)
    return np.concatenate([[0], nearer, [w.size]]).astype(np.int64)


def overlap(a: np.ndarray, b: np.ndarray) -> int:
    """|a ∩ b| of two sorted unique arrays: the rows two chunks or batches can share."""
    if len(a) > len(b):
        a, b = b, a
    if len(a) == 0:
        return 0
    at = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return int(np.count_nonzero(b[at] == a))


def union(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Sorted unique int64 union: the rows a group of chunks loads once. A stable sort merges
    already sorted inputs in linear time, cheaper than a hash-based unique."""
    if len(arrays) == 0:
        return np.empty(0, dtype=np.int64)
    ids = np.concatenate([np.asarray(a, dtype=np.int64) for a in arrays])
    ids.sort(kind="stable")
    return ids[np.concatenate([[True], ids[1:] != ids[:-1]])] if len(ids) else ids


def _flatten(sets: Sequence[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """All ids of ``sets``, sorted, with the index of the set each came from."""
    ids = [np.asarray(s, dtype=np.int64) for s in sets]
    labels = np.repeat(np.arange(len(ids)), [len(s) for s in ids])
    flat = np.concatenate(ids) if ids else np.empty(0, np.int64)
    order = np.argsort(flat, kind="stable")  # merges the sorted runs; sorted keys keep
    return flat[order], labels[order]        # the join's binary searches cache-friendly


def _overlaps(rows: Sequence[np.ndarray], cols: Sequence[np.ndarray]) -> np.ndarray:
    """Matrix of |rows[i] ∩ cols[j]| by one sort-join: every id of ``rows`` is matched with
    the ``cols`` holding it, so the work follows the shared ids instead of costing
    ``len(rows) * len(cols)`` separate intersections (65536 for K = 256)."""
    (r_ids, r_lab), (c_ids, c_lab) = _flatten(rows), _flatten(cols)
    lo = np.searchsorted(c_ids, r_ids, side="left")
    n = np.searchsorted(c_ids, r_ids, side="right") - lo  # sets of cols holding the id
    hit = n > 0
    r_lab, lo, n = r_lab[hit], lo[hit], n[hit]
    out = np.zeros(len(rows) * len(cols), dtype=np.int64)
    ends = np.cumsum(n)
    marks = np.searchsorted(ends, np.arange(0, int(ends[-1]) if len(ends) else 0, _BLOCK),
                            side="right")
    starts = np.unique(np.append(marks, len(n)))
    for s, e in zip(starts[:-1], starts[1:]):
        reps = n[s:e]
        local = ends[s:e] - reps - (ends[s] - reps[0])  # first match's slot in this block
        pos = np.arange(int(ends[e - 1] - ends[s] + reps[0])) + np.repeat(lo[s:e] - local, reps)
        out += np.bincount(np.repeat(r_lab[s:e], reps) * len(cols) + c_lab[pos],
                           minlength=out.size)
    return out.reshape(len(rows), len(cols))


def _best(scores: np.ndarray, taken: np.ndarray) -> int:
    """Index of the largest score not yet taken; ties go to the lowest index."""
    return int(np.argmax(np.where(taken, -1, scores)))


def reorganize(neighbours: List[List[np.ndarray]]) -> List[List[int]]:
    """``order[r][b]``: the chunk of rank ``r`` that runs in batch position ``b``.

    Phase 1 groups chunks that share rows into one batch, so the batch loads them once:
    rank 0 keeps its order and seeds each batch's transition set; every further rank in
    turn gives each batch, in order, its unplaced chunk overlapping that set most. Phase 2
    chains batches so each follows the one it shares most rows with, which then stay
    loaded: start at batch 0 and repeatedly append the closest remaining batch."""
    if not neighbours:
        return []
    k = len(neighbours[0])
    if any(len(chunks) != k for chunks in neighbours):
        raise ValueError("every rank needs the same number of chunks")
    groups = [list(range(k))]
    transition = [np.asarray(s, dtype=np.int64) for s in neighbours[0]]
    for chunks in neighbours[1:]:
        # A batch's set changes only when it gets this rank's chunk, so one matrix serves.
        scores = _overlaps(transition, chunks)
        taken = np.zeros(k, dtype=bool)
        group = []
        for b in range(k):
            c = _best(scores[b], taken)
            taken[c] = True
            group.append(c)
            transition[b] = union([transition[b], chunks[c]])
        groups.append(group)
    chain = [0] if k else []
    if k > 1:
        shared = _overlaps(transition, transition)
        used = np.zeros(k, dtype=bool)
        used[0] = True
        while len(chain) < k:
            b = _best(shared[chain[-1]], used)
            used[b] = True
            chain.append(b)
    return [[group[b] for b in chain] for group in groups]
