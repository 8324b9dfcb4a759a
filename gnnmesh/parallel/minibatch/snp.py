"""SNP, source node parallelism (GSplit; APT §3.1): vertices are partitioned, and a sampled
edge is computed by its source's owner. Rank r sends each owner q the rows of its
first-layer block that have sources there (APT's virtual nodes; a row's self term counts as a
source at its own owner), q sums their contributions from the features it owns, and r adds
the partial sums up. Only owned features are read, at the price of one partial row per
(row, owner) pair."""

from __future__ import annotations

import numpy as np
import torch

from ... import ops
from ...graph import Adjacency
from ...models.base import SELF
from ...view import GraphView
from .route import Request, SplitRoute, Work, pack_rows, row_entries, unpack_rows


class SourceNodeRoute(SplitRoute):
    name = "snp"
    attention = False  # a row's attention needs all of its sources in one place
    needs_partition = True

    def reply_width(self, model) -> int:
        return model.layers[0].maths().hidden

    def bind(self, sampler, model, op: str, seed: int, device) -> None:
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
