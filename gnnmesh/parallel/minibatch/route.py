"""What APT's four mini-batch strategies share (Ma et al., PPoPP 2025, §3.1): every rank holds
the graph's structure, samples its share of each batch and runs every layer but the first on
its own blocks, data parallel, with gradients summed over ranks. They differ only in who
computes the first layer, which dominates the cost: the rank itself (GDP), or ranks chosen by
feature columns (NFP), by source vertex (SNP) or by destination vertex (DNP), which receive
the rows to compute as sampled ids and send back partial or finished embeddings.

A route says who computes what. A split route is four steps and two exchanges: ``request``
(what this rank's first-layer block asks of each rank) and ``serve`` (what a rank computes
from what it was asked), both pure, then ``compute`` and ``combine``. The dry run
(``dryrun``) runs the pure steps for every rank without moving features or
embeddings, so its byte counts are the ones training counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

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


__all__ = ["GRAPH", "SHUFFLE", "Route", "SplitRoute", "read_and_run", "Request", "Work", "StepCost",
           "pack_rows", "unpack_rows", "row_entries"]
