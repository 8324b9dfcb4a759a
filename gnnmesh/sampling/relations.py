"""Neighbour sampling per relation of a typed graph, as DGL's ``sample_neighbors(fanout={etype: k})``
samples: every node reached at hop ``h`` keeps ``k`` of its in-edges of each relation, drawn
from the union graph's entries of that relation (an entry of two relations is drawn for each
on its own). A model whose layers aggregate per relation (R-GCN's ``mean@r``, R-GAT's
``sum@r``) then runs on the blocks unchanged: a block gives each per-relation operator over
the sampled neighbours of its relation (``mean@r``: their mean, ``sum@r``: their sum,
``loop@r``: their pattern plus a loop per row).

Which entries a node keeps depends only on (seed, epoch, step, hop, relation, node), as the
one-operator sampler's do (``gnnmesh.sampling.sampler``), so the ranks' shares of a batch
sample, per node, what one process samples for the whole batch.

``--fanouts`` gives each hop one count for every relation (``10,5``), or counts per relation,
hops separated by ``;`` (``cites=10,writes=5;cites=5,writes=3``); a bare count in a hop is
for the relations it does not name (``5,cites=10;3``). A relation is named by its whole name
(``paper__cites__paper``) or by its edge type (``cites``) where one relation alone has it.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from ..graph import Adjacency
from ..relations import Relations, parse
from ..view import keyed_hash, operator_of
from .sampler import RELATIONS, Block, NeighborSampler, block_columns, fanout_value, parse_fanouts, sample_rows

HOPS, PIECES, NAMED = ";", ",", "="


def parse_hops(text, name: str = "fanouts") -> list:
    """Each hop of ``text`` as written: a count for every relation, or a dict from the
    relations it names (``None``: the rest) to their counts. Relations are matched to a
    graph's later (``relation_fanouts``)."""
    if isinstance(text, (list, tuple)) or (NAMED not in str(text) and HOPS not in str(text)):
        return parse_fanouts(text, name)
    hops = []
    for hop in str(text).split(HOPS):
        counts: dict = {}
        for piece in hop.split(PIECES):
            key, named, count = piece.rpartition(NAMED) if NAMED in piece else (None, "", piece)
            key = key.strip() if named else None
            if key in counts:
                what = f"relation {key!r}" if key else "the count for the relations not named"
                raise ConfigError(f"config field '{name}': {what} is given twice in hop {len(hops) + 1} of {text!r}")
            if key == "":
                raise ConfigError(f"config field '{name}': {piece.strip()!r} names no relation, in {text!r}")
            counts[key] = fanout_value(count, text, name)
        hops.append(next(iter(counts.values())) if list(counts) == [None] else counts)
    return hops


def hop_count(text, name: str = "fanouts") -> int:
    return len(parse_hops(text, name))


def relation_fanouts(text, names: tuple, name: str = "fanouts") -> list:
    """Per hop, the count of every relation of ``names`` (in their order)."""
    if isinstance(text, (list, tuple)) and any(isinstance(hop, (list, tuple)) for hop in text):
        return _counted(text, names, name)  # counts per relation already (a sampler's)
    out = []
    for h, hop in enumerate(parse_hops(text, name), start=1):
        if not isinstance(hop, dict):
            out.append((hop,) * len(names))
            continue
        counts = {_relation(key, names, name): k for key, k in hop.items() if key is not None}
        missing = [r for r in names if r not in counts]
        if missing and None not in hop:
            raise ConfigError(f"config field '{name}': hop {h} of {text!r} gives no count for relations "
                              f"{', '.join(missing)}; name them, or give a bare count for the rest (e.g. '5,{names[0]}=10')")
        out.append(tuple(counts.get(r, hop.get(None)) for r in names))
    return out


def _counted(hops, names: tuple, name: str) -> list:
    """``hops``, each a count per relation of ``names``, checked."""
    out = []
    for hop in hops:
        counts = tuple(hop) if isinstance(hop, (list, tuple)) else (hop,) * len(names)
        if len(counts) != len(names):
            raise ConfigError(f"config field '{name}': {list(hops)!r} gives {len(counts)} counts in a hop for "
                              f"{len(names)} relations")
        out.append(tuple(fanout_value(k, list(hops), name) for k in counts))
    return out


def _relation(key: str, names: tuple, name: str) -> str:
    """The relation of ``names`` that ``key`` names: by its whole name, or by its edge type
    (the middle of ``SOURCE__TYPE__DESTINATION``) where one relation alone has it."""
    if key in names:
        return key
    matches = [r for r in names if r.split("__")[1:2] == [key]]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(f"config field '{name}': {key!r} is the edge type of relations {', '.join(matches)}; "
                          "name one by its whole name")
    raise ConfigError(f"config field '{name}': no relation {key!r}; the graph's relations are {', '.join(names)}")


class RelationSampler(NeighborSampler):
    """Samples the blocks of batches from ``adj``, a typed graph's union adjacency (rows are
    destinations): ``fanouts[h][r]`` entries of relation r for every node at hop h (-1: all).

    Its entries are the union's (entry, relation) pairs, in the order ``adj.relations`` lists
    them (by row, then entry, then relation): a block's ``entries`` are their ids, which the
    mini-batch routes send between ranks and ``block`` turns back into a block."""

    def __init__(self, adj: Adjacency, fanouts: list, seed: int):
        relations = adj.relations
        self.adj, self.names = adj, relations.names
        ptr = relations.ptr.numpy()
        self.owner = np.repeat(np.arange(adj.nnz, dtype=np.int64), np.diff(ptr))  # each pair's union entry
        self.relation = relations.ids.numpy().astype(np.int64)
        self.indices = adj.indices.numpy()[self.owner]  # each pair's source
        self.indptr = ptr[adj.indptr.numpy()]  # each row's pairs
        self.values = None
        # the pairs by (row, relation): those of node i and relation r are one run
        rows = np.repeat(np.arange(adj.shape[0], dtype=np.int64), np.diff(self.indptr))
        segment = rows * len(self.names) + self.relation
        self.order = np.argsort(segment, kind="stable")
        self.segments = segment[self.order]
        self.fanouts = [tuple(hop) for hop in fanouts]
        self.seed = int(seed)
        self._keys: dict = {}

    @property
    def takes_all(self) -> bool:
        return all(k == -1 for hop in self.fanouts for k in hop)

    def _hop(self, dst: np.ndarray, fanouts: tuple, key: int) -> Block:
        rows, pairs = [], []
        for r, fanout in enumerate(fanouts):
            segment = dst * len(self.names) + r
            starts = np.searchsorted(self.segments, segment, "left")
            counts = np.searchsorted(self.segments, segment, "right") - starts
            own_key = int(keyed_hash(key, np.array([r], dtype=np.uint64))[0])  # each relation its own draws
            _, row_of, offsets = sample_rows(dst, counts, fanout, own_key)
            rows.append(row_of)
            pairs.append(self.order[starts[row_of] + offsets])
        row_of, pairs = np.concatenate(rows), np.concatenate(pairs)
        by_row = np.lexsort((pairs, row_of))  # row by row, pairs ascending
        return self.block(dst, pairs[by_row], np.bincount(row_of, minlength=len(dst)))

    def block(self, dst: np.ndarray, entries: np.ndarray, lengths: np.ndarray, kept=None) -> Block:
        """As ``NeighborSampler.block``, for (entry, relation) pairs ``entries``: each row's
        whole (a row's relations are normalised over its kept pairs of each)."""
        if kept is not None and not np.array_equal(kept, lengths):
            raise ConfigError("a first-layer row split among ranks cannot be normalised per relation; train "
                              "models that aggregate per relation with --strategy gdp or dnp")
        entries = np.asarray(entries, dtype=np.int64)
        indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        nodes, columns = block_columns(dst, self.indices[entries])
        adj = Adjacency(torch.from_numpy(indptr), torch.from_numpy(columns), None, (len(dst), len(nodes)))
        tags = Relations(self.names, torch.arange(len(entries) + 1), torch.from_numpy(self.relation[entries]))
        return Block(nodes, adj.with_relations(tags), entries, typed=self)

    def entry_values(self, dst, entries, row_of, kept):
        raise ConfigError("a first-layer row split among ranks cannot be normalised per relation; train models "
                          "that aggregate per relation with --strategy gdp or dnp")

    def block_operator(self, block: Block, op: str) -> tuple:
        """(operator ``op``, ``NORM@RELATION``, over ``block``'s sampled pairs of that relation,
        the global id of each of its entries in the whole graph's operator ``op``)."""
        norm_relation = parse(op)
        if norm_relation is None or norm_relation[1] not in self.names:
            raise ValueError(f"the batch was sampled per relation of {list(self.names)}; the model asked for {op!r}")
        norm, relation = norm_relation
        n = block.num_dst
        mine = np.flatnonzero(block.adj.relations.ids.numpy() == self.names.index(relation))
        rows = block.adj.row().numpy()[mine]
        cols = block.adj.indices.numpy()[mine]
        if norm == "loop":  # a loop on every row that kept none (a destination is its own column)
            looped = np.zeros(n, dtype=bool)
            looped[rows[rows == cols]] = True
            loops = np.flatnonzero(~looped)
            rows, cols = np.concatenate([rows, loops]), np.concatenate([cols, loops])
            by_row = np.argsort(rows, kind="stable")
            rows, cols = rows[by_row], cols[by_row]
        degrees = torch.bincount(torch.from_numpy(rows), minlength=n)
        indptr = torch.zeros(n + 1, dtype=torch.int64)
        torch.cumsum(degrees, 0, out=indptr[1:])
        values = None
        if norm == "mean":  # the mean over the kept neighbours, as the whole graph's is over all
            values = (1.0 / degrees[torch.from_numpy(rows)].double()).float()
        adj = Adjacency(indptr, torch.from_numpy(cols), values, block.adj.shape)
        return adj, self._global_ids(op, block.nodes[rows], block.nodes[cols])

    def _global_ids(self, op: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The positions of entries (``rows``, ``cols``) in the whole graph's operator ``op``
        (rows in order, each row's columns ascending: its entries' keys ascend)."""
        width = self.adj.shape[1]
        if op not in self._keys:
            whole = operator_of(op, self.adj)
            self._keys[op] = whole.row().numpy() * width + whole.indices.numpy()
        return np.searchsorted(self._keys[op], rows * width + cols)


def sampled_graph(op: str, adj: Adjacency) -> Adjacency:
    """What batches for a model aggregating with ``op`` are sampled from: that operator of the
    graph of ``adj``, or, per relation (``RELATIONS``), the typed graph's union itself."""
    return adj if op == RELATIONS else operator_of(op, adj)


def sampler_of(op: str, graph: Adjacency, fanouts, seed: int, name: str = "fanouts") -> NeighborSampler:
    """The sampler of ``graph`` (``sampled_graph``'s) for ``op`` with ``fanouts`` (the setting
    ``name``'s text, or a list of counts)."""
    if op == RELATIONS:
        return RelationSampler(graph, relation_fanouts(fanouts, graph.relations.names, name), seed)
    if any(isinstance(hop, dict) for hop in parse_hops(fanouts, name)):
        raise ConfigError(f"config field '{name}': {fanouts!r} names relations; the model aggregates with one "
                          f"operator ({op}), sampled with one count per hop (e.g. '10,5')")
    return NeighborSampler(graph, parse_fanouts(fanouts, name), seed)
