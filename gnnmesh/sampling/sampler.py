"""Neighbour sampling keyed by node (the conventions of PyG's ``NeighborLoader``).

``fanouts[h]`` in-edges are sampled for every node reached at hop ``h`` (-1: all of them),
from the graph operator the model aggregates with (its self-loops included, as ``gcn`` and
``loop`` have them). Which ones depends only on (seed, epoch, step, hop, node): the ``k``
positions among a node's entries are drawn without replacement from a hash keyed by those.
So a node reached on several ranks gets the same neighbours on every one, and any split of
a batch's seeds samples, per node, exactly what one process samples for the whole batch.

Hop ``h``'s node list starts with hop ``h - 1``'s (the seeds first, in the order given), the
new sources following in ascending id; a block's destinations are therefore a prefix of its
sources. The kept entries keep the operator's values, scaled by entries/kept so that each
row's aggregate is an unbiased estimate of the full one (a mean becomes the mean of the kept
neighbours); an operator without values (attention's pattern) keeps none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import ConfigError
from ..graph import Adjacency
from ..models.base import SELF, GraphLayer, LayerStack
from ..relations import parse
from ..view import keyed_hash


@dataclass
class Block:
    """One hop: ``adj`` has the destinations (the first ``adj.shape[0]`` of ``nodes``) as rows
    and ``nodes`` (global ids) as columns; ``entries`` are the kept entries' global ids in the
    operator (per row ascending, rows in destination order). A block sampled per relation
    (``typed``: its ``RelationSampler``) holds one entry per kept (edge, relation), each tagged
    with its relation, and gives the per-relation operators, built once each (``operators``)."""

    nodes: np.ndarray
    adj: Adjacency
    entries: np.ndarray
    typed: object = None
    operators: dict = field(default_factory=dict, repr=False)

    @property
    def num_dst(self) -> int:
        return self.adj.shape[0]


@dataclass
class Sample:
    """A batch's blocks, innermost first: ``blocks[0]``'s destinations are the seeds, and
    layer ``i`` of an L-layer model runs on ``blocks[L - 1 - i]``."""

    seeds: np.ndarray
    blocks: list

    def layer_block(self, i: int) -> Block:
        return self.blocks[len(self.blocks) - 1 - i]

    @property
    def input_nodes(self) -> np.ndarray:
        """The nodes whose features the first layer reads."""
        return self.blocks[-1].nodes

    def sampled_entries(self) -> int:
        return sum(len(b.entries) for b in self.blocks)


MAX_FANOUT = 2**31 - 1  # sampled in int32-sized draws; no node has more neighbours


def parse_fanouts(text, name: str = "fanouts") -> list:
    """``"10,5"`` (or a list) as ints, each a positive count or -1 (all neighbours)."""
    pieces = text if isinstance(text, (list, tuple)) else str(text).split(",")
    out = [fanout_value(piece, text, name) for piece in pieces]
    if not out:
        raise ConfigError(f"config field '{name}': no fanout given")
    return out


def fanout_value(piece, text, name: str = "fanouts") -> int:
    """One fanout ``piece`` of the setting ``text``: a positive count or -1 (all neighbours)."""
    try:
        value = int(str(piece).strip())
    except ValueError:
        value = 0
    if value == 0 or value < -1:
        raise ConfigError(f"config field '{name}': {piece!r} is neither a positive integer nor -1 "
                          f"(all neighbours), in {text!r}")
    if value > MAX_FANOUT:  # more than any node's degree can be: all neighbours, which -1 says
        raise ConfigError(f"config field '{name}': {piece.strip() if isinstance(piece, str) else piece} is "
                          f"above {MAX_FANOUT:,}; -1 samples all neighbours, in {text!r}")
    return value


class NeighborSampler:
    """Samples the blocks of batches from ``op`` (an operator's CSR: rows are destinations)."""

    def __init__(self, op: Adjacency, fanouts: list, seed: int):
        self.indptr = op.indptr.numpy()
        self.indices = op.indices.numpy()
        self.values = None if op.values is None else op.values.detach().numpy()
        self.fanouts, self.seed = list(fanouts), int(seed)

    @property
    def takes_all(self) -> bool:
        """Whether every hop keeps every neighbour (-1)."""
        return set(self.fanouts) == {-1}

    def sample(self, seeds, epoch: int, step: int) -> Sample:
        nodes = np.asarray(seeds, dtype=np.int64)
        blocks = []
        for hop, fanout in enumerate(self.fanouts):
            block = self._hop(nodes, fanout, self._key(epoch, step, hop))
            blocks.append(block)
            nodes = block.nodes
        return Sample(np.asarray(seeds, dtype=np.int64), blocks)

    def _key(self, epoch: int, step: int, hop: int) -> int:
        key = self.seed ^ 0x6E65696768626F72  # apart from the dropout masks' keys
        for part in (epoch, step, hop):  # chained, so that no two tuples share a key by symmetry
            key = int(keyed_hash(key, np.array([part], dtype=np.uint64))[0])
        return key

    def _hop(self, dst: np.ndarray, fanout: int, key: int) -> Block:
        starts, counts = self.indptr[dst], self.indptr[dst + 1] - self.indptr[dst]
        kept, row_of, offsets = sample_rows(dst, counts, fanout, key)
        return self.block(dst, starts[row_of] + offsets, kept)

    def block(self, dst: np.ndarray, entries: np.ndarray, lengths: np.ndarray, kept=None) -> Block:
        """The block of destinations ``dst`` (global ids; repeats allowed) whose rows hold
        ``lengths`` of the operator's ``entries`` (global CSR positions, row by row). ``kept``
        is each row's sampled count when a row arrives in pieces (the values' scale is the
        row's entries over its kept ones); default ``lengths``."""
        kept = lengths if kept is None else kept
        indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        row_of = np.repeat(np.arange(len(dst)), lengths)
        nodes, columns = block_columns(dst, self.indices[entries])
        return Block(nodes, Adjacency(torch.from_numpy(indptr), torch.from_numpy(columns),
                                      self.entry_values(dst, entries, row_of, kept), (len(dst), len(nodes))),
                     np.asarray(entries, dtype=np.int64))

    def entry_values(self, dst, entries, row_of, kept):
        """The kept entries' values, scaled by their row's entries/kept (None without values)."""
        if self.values is None:
            return None
        counts = self.indptr[dst + 1] - self.indptr[dst]
        scale = np.where(kept > 0, counts / np.maximum(kept, 1), 0.0)
        return torch.from_numpy((self.values[entries] * scale[row_of]).astype(np.float32))


def sample_rows(nodes: np.ndarray, counts: np.ndarray, fanout: int, key: int) -> tuple:
    """(kept entries per row, the row of each kept entry, its position among its row's
    ``counts`` entries) when every row of ``nodes`` keeps ``fanout`` of its entries (-1: all),
    drawn under ``key``: kept entries row by row, ascending within a row."""
    kept = counts if fanout < 0 else np.minimum(counts, fanout)
    indptr = np.concatenate(([0], np.cumsum(kept))).astype(np.int64)
    row_of = np.repeat(np.arange(len(nodes)), kept)
    offsets = np.arange(int(indptr[-1]), dtype=np.int64) - indptr[row_of]  # position within the row
    over = np.flatnonzero(counts > kept)  # rows with more entries than the fanout
    if len(over):
        chosen = _choose(key, nodes[over], counts[over], fanout)  # [rows, fanout], ascending
        offsets[(indptr[over][:, None] + np.arange(fanout)).reshape(-1)] = chosen.reshape(-1)
    return kept, row_of, offsets


def block_columns(dst: np.ndarray, sources: np.ndarray) -> tuple:
    """(a block's nodes: the destinations ``dst``, then the other ``sources`` in ascending id;
    each source's column among them)."""
    new = np.setdiff1d(sources, dst)  # ascending, not already a destination
    nodes = np.concatenate([dst, new]).astype(np.int64)
    lookup = np.argsort(nodes, kind="stable")
    return nodes, lookup[np.searchsorted(nodes[lookup], sources)].astype(np.int64)


def row_positions(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions of rows ``rows``' entries in a CSR with ``indptr``, row after row."""
    starts, lengths = indptr[rows], indptr[np.asarray(rows) + 1] - indptr[rows]
    return np.repeat(starts - np.cumsum(np.r_[0, lengths[:-1]]), lengths) + np.arange(int(lengths.sum()))


def _choose(key: int, nodes: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """``k`` distinct positions in ``range(counts[r])`` for every row, uniformly (Floyd's
    algorithm, all rows at once), drawn from a keyed hash of (node, draw): ``[rows, k]``,
    ascending in each row. O(rows * k^2) work, whatever the rows' degrees."""
    chosen = np.empty((len(nodes), k), dtype=np.int64)
    base = nodes.astype(np.uint64) * np.uint64(k)
    for i in range(k):
        top = counts - k + i  # draw from 0..top, take top itself if the draw was taken before
        draw = (keyed_hash(key, base + np.uint64(i)) % (top + 1).astype(np.uint64)).astype(np.int64)
        taken = (chosen[:, :i] == draw[:, None]).any(axis=1)
        chosen[:, i] = np.where(taken, top, draw)
    return np.sort(chosen, axis=1)


DEFAULT_BATCH = 1024   # seeds per batch when --batch-size is not given (at most the training set)


# What a model that aggregates per relation of a typed graph (every operator ``NORM@RELATION``)
# is sampled from: the union graph, per (node, relation) (``gnnmesh.sampling.relations``).
RELATIONS = "relations"


def sampled_operator(model) -> str:
    """The one graph operator every layer of ``model`` aggregates with (what is sampled), or
    ``RELATIONS`` where they are all per-relation operators of a typed graph."""
    if not isinstance(model, LayerStack):
        raise ConfigError("mini-batch training runs layer stacks (gcn, sage, gin, gat), not decoupled models")
    names = set()
    for layer in model.layers:
        if isinstance(layer, GraphLayer):
            names |= {t.op for t in layer.maths().terms if t.op != SELF}
        else:  # what the layer declares it aggregates with; by default attention over in-edges and a self-loop
            names |= set(getattr(layer, "operators", ("loop",)))
    if names and all(parse(name) for name in names):
        return RELATIONS
    if len(names) != 1:
        raise ConfigError(f"mini-batch training samples one operator, or per-relation operators alone "
                          f"(NORM@RELATION); this model's layers use {sorted(names)}")
    return names.pop()
