"""The four routes of APT's mini-batch strategies (Ma et al., PPoPP 2025, §3.1), by the name
``--strategy`` gives them (``ROUTES``). Every rank holds the graph's structure, samples its
share of each batch and runs every layer but the first on its own blocks, data parallel,
with gradients summed over ranks. The routes differ only in who computes the first layer,
which dominates the cost: the rank itself (GDP, ``Route``), or ranks chosen by feature
columns (NFP, ``NodeFeatureRoute``), by source vertex (SNP, ``SourceNodeRoute``) or by
destination vertex (DNP, ``DestinationNodeRoute``), which receive the rows to compute as
sampled ids and send back partial or finished embeddings.

A route says who computes what. A split route (``SplitRoute``: NFP, SNP, DNP) is four steps
and two exchanges: ``request`` (what this rank's first-layer block asks of each rank) and
``serve`` (what a rank computes from what it was asked), both pure, then ``compute`` and
``combine``; its rows travel packed (``pack_rows``, ``unpack_rows``). The dry run
(``dryrun``) runs the pure steps for every rank without moving features or
embeddings, so its byte counts are the ones training counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ... import ops
from ...graph import Adjacency
from ...layout.ranges import even_bounds
from ...models.base import SELF
from ...errors import ConfigError
from ...sampling import RELATIONS, BlockView, Sample, row_positions
from ...view import GraphView
from .exchange import GRAPH, SHUFFLE, exchange_ids, id_bytes, row_bytes, send_rows


@dataclass
class Request:
    """What one rank's first-layer block asks: ``pieces[q]`` (ids) go to rank q, whose
    ``expect[q]`` rows come back; ``order`` places the arriving rows among the destinations."""

    pieces: list
    expect: list
    order: Optional[np.ndarray] = None


@dataclass
class Work:
    """What one rank computes for everyone's requests: it reads the features of ``load``,
    and sends ``reply[q]`` rows of width ``width`` back to rank q."""

    load: np.ndarray
    reply: list
    width: int
    detail: dict = field(default_factory=dict)


@dataclass
class StepCost:
    """One rank's traffic in one step: bytes of ids sent, bytes of hidden rows sent (forward
    and backward), the feature rows it reads, and its collective calls (each pays a latency
    whatever its size)."""

    graph_bytes: int
    shuffle_bytes: int
    load: np.ndarray
    calls: int = 0


# A split route's collectives per step: the ids' lengths and the ids, the rows and their gradients.
SPLIT_CALLS = 4


def pack_rows(dst: np.ndarray, lengths: np.ndarray, entries: np.ndarray, kept=None) -> np.ndarray:
    """Rows of a sampled block on the wire: their count, destinations, lengths, (each row's
    whole sampled count, when the row travels in pieces), entries."""
    parts = [[len(dst)], dst, lengths] + ([kept] if kept is not None else []) + [entries]
    return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])


def unpack_rows(pieces: list, with_kept: bool = False) -> tuple:
    """Every piece's rows, concatenated: (dst, lengths, kept, entries, rows per piece)."""
    out = [[], [], [], []]
    counts = []
    for buf in pieces:
        n = int(buf[0]) if len(buf) else 0
        counts.append(n)
        if not n:
            continue
        fields = 3 if with_kept else 2
        dst, lengths = buf[1:1 + n], buf[1 + n:1 + 2 * n]
        kept = buf[1 + 2 * n:1 + 3 * n] if with_kept else lengths
        for bucket, value in zip(out, (dst, lengths, kept, buf[1 + fields * n:])):
            bucket.append(value)
    dst, lengths, kept, entries = (np.concatenate(b) if b else np.zeros(0, np.int64) for b in out)
    return dst, lengths, kept, entries, counts


def row_entries(block) -> tuple:
    """A block's destinations (global ids), row lengths and entries, for the wire."""
    indptr = block.adj.indptr.numpy()
    return block.nodes[:block.num_dst], np.diff(indptr), block.entries


def read_and_run(model, view, sample, features) -> torch.Tensor:
    """The first layer on this rank: read its block's input features and run it."""
    return model.layer_output(view, 0, features.load(sample.input_nodes))


class Route:
    """GDP: every rank computes its own first layer, reading its own input features. A route
    decides who computes what, and is pure: the dry run builds one per strategy."""

    name = "gdp"
    attention = True  # whether it runs attention layers (which need every source of a row)
    per_relation = True  # whether it runs layers that aggregate per relation (which normalise whole rows)
    needs_partition = False
    caches_in_neighbours = False   # whether a rank's cache also holds its rows' 1-hop in-neighbours

    def __init__(self, world: int, owner: Optional[np.ndarray] = None):
        self.world, self.owner = world, owner

    def bind(self, sampler, model, op: str, seed: int, device) -> None:
        """What the steps need: the sampler (blocks are rebuilt with it), the model, the
        sampled operator's name, the run's seed and the device."""
        self.sampler, self.op, self.seed, self.device = sampler, op, seed, torch.device(device)

    def feature_columns(self, width: int, rank: int) -> slice:
        """The input feature columns rank ``rank`` reads (all, but for NFP)."""
        return slice(0, width)

    def reply_width(self, model) -> int:
        """The width of the rows sent back to the requesting ranks (none are, here)."""
        return 0

    def first_layer(self, comm, model, view, sample, features) -> torch.Tensor:
        """Layer 1's output (before its activation) for this rank's first-layer destinations."""
        return read_and_run(model, view, sample, features)

    def step_costs(self, blocks: list, width: int) -> list:
        """Every rank's ``StepCost`` for one step whose first-layer blocks are ``blocks``
        (rank order), without computing anything."""
        return [StepCost(0, 0, b.nodes) for b in blocks]


class SplitRoute(Route):
    """A route whose first layer other ranks compute (NFP, SNP, DNP)."""

    def request(self, block, rank: int) -> Request:
        raise NotImplementedError

    def serve(self, pieces: list, rank: int, width: int, plan_only: bool = False) -> Work:
        raise NotImplementedError

    def compute(self, model, view, work: Work, x: torch.Tensor, rank: int) -> torch.Tensor:
        raise NotImplementedError

    def combine(self, model, rows: torch.Tensor, request: Request, num_dst: int) -> torch.Tensor:
        raise NotImplementedError

    def first_layer(self, comm, model, view, sample, features) -> torch.Tensor:
        block = sample.layer_block(0)
        request = self.request(block, comm.rank)
        work = self.serve(exchange_ids(comm, request.pieces), comm.rank, self.reply_width(model))
        served = work.detail["view"]
        served.set_epoch(view.epoch, view.draws)  # the same dropout draws as one process makes
        rows = self.compute(model, served, work, features.load(work.load), comm.rank)
        view.set_epoch(view.epoch, served.draws)
        back = send_rows(comm, rows, work.reply, request.expect)
        return self.combine(model, back, request, block.num_dst)

    def step_costs(self, blocks: list, width: int) -> list:
        requests = [self.request(b, r) for r, b in enumerate(blocks)]
        works = [self.serve([requests[r].pieces[q] for r in range(self.world)], q, width, plan_only=True)
                 for q in range(self.world)]
        return [StepCost(id_bytes([len(p) for p in requests[r].pieces], r),
                         row_bytes(works[r].reply, requests[r].expect, r, width), works[r].load,
                         SPLIT_CALLS if self.world > 1 else 0)
                for r in range(self.world)]


class NodeFeatureRoute(SplitRoute):
    """NFP, node feature parallelism (P3; APT §3.1): rank r holds columns ``cols_r`` of every
    input feature (and uses the matching columns of W¹). Every rank's first-layer block goes to
    every rank; each computes the blocks' partial sums from its columns, and rank r adds up the
    pieces of its own destinations. The layer's linear map is a sum over input columns, so the
    pieces add up to one process's sum; the bias and anything after it follow once, on r."""

    name = "nfp"
    attention = False  # a row's attention needs all of its sources' columns

    def feature_columns(self, width: int, rank: int) -> slice:
        bounds = even_bounds(width, self.world)
        return slice(bounds[rank], bounds[rank + 1])

    def reply_width(self, model) -> int:
        return model.layers[0].maths().hidden

    def request(self, block, rank: int) -> Request:
        piece = pack_rows(*row_entries(block))
        return Request([piece] * self.world, [block.num_dst] * self.world)

    def serve(self, pieces: list, rank: int, width: int, plan_only: bool = False) -> Work:
        dst, lengths, _, entries, counts = unpack_rows(pieces)
        block = self.sampler.block(dst, entries, lengths)  # everyone's rows: one block, sources shared
        view = None if plan_only else BlockView(Sample(dst, [block]), self.op, self.seed, self.device)
        return Work(block.nodes, counts, width, {"view": view})

    def compute(self, model, view, work: Work, x: torch.Tensor, rank: int) -> torch.Tensor:
        width = model.layers[0].maths().in_features
        columns = self.feature_columns(width, rank)
        x = view.dropout_block(x, model.dropout, model.training, (width,), rows=work.load, columns=columns)
        return model.layers[0].maths().linear(view, x, columns)

    def combine(self, model, rows: torch.Tensor, request: Request, num_dst: int) -> torch.Tensor:
        # rows.shape[-1], not -1: a rank whose share of a small batch is empty has num_dst = 0
        z = rows.reshape(self.world, num_dst, rows.shape[-1]).sum(dim=0)
        return model.layers[0].maths().finish(z)


class SourceNodeRoute(SplitRoute):
    """SNP, source node parallelism (GSplit; APT §3.1): vertices are partitioned, and a sampled
    edge is computed by its source's owner. Rank r sends each owner q the rows of its
    first-layer block that have sources there (APT's virtual nodes; a row's self term counts as a
    source at its own owner), q sums their contributions from the features it owns, and r adds
    the partial sums up. Only owned features are read, at the price of one partial row per
    (row, owner) pair."""

    name = "snp"
    attention = False  # a row's attention needs all of its sources in one place
    per_relation = False  # a row's sources are summed where they are owned, under one operator
    needs_partition = True

    def reply_width(self, model) -> int:
        return model.layers[0].maths().hidden

    def bind(self, sampler, model, op: str, seed: int, device) -> None:
        if op == RELATIONS:
            raise ConfigError("config field 'strategy': snp sums a first-layer row's sources where they are owned, "
                              "under one operator; a model that aggregates per relation runs with --strategy gdp "
                              "or dnp")
        super().bind(sampler, model, op, seed, device)
        self.self_term = any(t.op == SELF for t in model.layers[0].maths().terms)

    def request(self, block, rank: int) -> Request:
        dst, lengths, entries = row_entries(block)
        row_of = np.repeat(np.arange(len(dst)), lengths)
        at = self.owner[self.sampler.indices[entries]]
        pieces, expect, order = [], [], []
        for q in range(self.world):
            mine = at == q
            here = np.bincount(row_of[mine], minlength=len(dst))
            rows = np.flatnonzero((here > 0) | ((self.owner[dst] == q) & self.self_term))
            pieces.append(pack_rows(dst[rows], here[rows], entries[mine], kept=lengths[rows]))
            expect.append(len(rows))
            order.append(rows)
        return Request(pieces, expect, np.concatenate(order))

    def serve(self, pieces: list, rank: int, width: int, plan_only: bool = False) -> Work:
        dst, lengths, kept, entries, counts = unpack_rows(pieces, with_kept=True)
        sources = self.sampler.indices[entries]
        selfs = np.flatnonzero(self.owner[dst] == rank) if self.self_term else np.zeros(0, np.int64)
        load = np.unique(np.concatenate([sources, dst[selfs]]))
        view = None
        if not plan_only:
            row_of = np.repeat(np.arange(len(dst)), lengths)
            edges = _csr(lengths, np.searchsorted(load, sources),
                         self.sampler.entry_values(dst, entries, row_of, kept), len(load))
            own = np.bincount(selfs, minlength=len(dst))
            loops = _csr(own, np.searchsorted(load, dst[selfs]), torch.ones(len(selfs)), len(load))
            view = _SourceView(edges, loops, load, self.seed, self.device)
        return Work(load, counts, width, {"view": view})

    def compute(self, model, view, work: Work, x: torch.Tensor, rank: int) -> torch.Tensor:
        return model.layers[0].maths().linear(view, view.dropout(x, model.dropout, model.training))

    def combine(self, model, rows: torch.Tensor, request: Request, num_dst: int) -> torch.Tensor:
        z = rows.new_zeros(num_dst, rows.shape[1]).index_add(0, torch.from_numpy(request.order).to(rows.device), rows)
        return model.layers[0].maths().finish(z)


def _csr(lengths: np.ndarray, columns: np.ndarray, values, width: int) -> Adjacency:
    indptr = torch.from_numpy(np.concatenate(([0], np.cumsum(lengths))).astype(np.int64))
    return Adjacency(indptr, torch.from_numpy(columns.astype(np.int64)), values, (len(lengths), width))


class _SourceView(GraphView):
    """The rows an owner computes for others, over the sources it owns: ``spmm`` sums their
    sampled entries, ``destinations`` picks each row's own features where this rank owns
    the row (zero elsewhere: its self term is computed at its owner)."""

    def __init__(self, edges: Adjacency, loops: Adjacency, sources: np.ndarray, seed: int, device):
        super().__init__(None, seed=seed, device=device)
        self.edges, self.loops, self.sources = edges, loops, sources
        if self.device.type != "cpu":
            for adj in (edges, loops):
                adj.values = adj.values.to(self.device) if adj.values is not None else None
                ops.index(adj, self.device)

    @property
    def num_nodes(self) -> int:
        return len(self.sources)

    def spmm(self, x, op="gcn", values=None):
        return ops.spmm(self.edges, x, values)

    def destinations(self, x):
        return ops.spmm(self.loops, x)

    def rows(self):
        return self.sources


class DestinationNodeRoute(SplitRoute):
    """DNP, destination node parallelism (APT §3.1): vertices are partitioned, and a first-layer
    row is computed by its destination's owner. Rank r sends each owner its rows with their
    sampled entries; the owner reads their sources' features (its partition and 1-hop
    neighbourhood, which its cache favours), runs the first layer whole, attention included,
    and sends the finished rows back: one hidden row per row, at most."""

    name = "dnp"
    needs_partition = True
    caches_in_neighbours = True   # its ranks read the sources of their rows' edges

    def reply_width(self, model) -> int:
        return model.layers[0].out_features

    def request(self, block, rank: int) -> Request:
        dst, lengths, entries = row_entries(block)
        indptr = block.adj.indptr.numpy()
        order = np.argsort(self.owner[dst], kind="stable")
        expect = np.bincount(self.owner[dst], minlength=self.world).tolist()
        pieces, start = [], 0
        for n in expect:
            rows = order[start:start + n]
            start += n
            pieces.append(pack_rows(dst[rows], lengths[rows], entries[row_positions(indptr, rows)]))
        return Request(pieces, expect, order)

    def serve(self, pieces: list, rank: int, width: int, plan_only: bool = False) -> Work:
        dst, lengths, _, entries, counts = unpack_rows(pieces)
        block = self.sampler.block(dst, entries, lengths)
        view = None if plan_only else BlockView(Sample(dst, [block]), self.op, self.seed, self.device)
        return Work(block.nodes, counts, width, {"view": view})

    def compute(self, model, view, work: Work, x: torch.Tensor, rank: int) -> torch.Tensor:
        return model.layer_output(view, 0, x)

    def combine(self, model, rows: torch.Tensor, request: Request, num_dst: int) -> torch.Tensor:
        back = np.empty(num_dst, dtype=np.int64)
        back[request.order] = np.arange(num_dst)  # arriving row of each destination
        return rows[torch.from_numpy(back).to(rows.device)]


# The four routes of the first layer's work, by the name ``--strategy`` gives them.
ROUTES = {r.name: r for r in (Route, NodeFeatureRoute, SourceNodeRoute, DestinationNodeRoute)}

__all__ = ["GRAPH", "SHUFFLE", "Route", "SplitRoute", "read_and_run", "Request", "Work", "StepCost",
           "NodeFeatureRoute", "SourceNodeRoute", "DestinationNodeRoute", "ROUTES",
           "pack_rows", "unpack_rows", "row_entries"]
