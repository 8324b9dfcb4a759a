"""The embedding rows a rank's pairs read, wherever they live, and their gradients back.

Every strategy ends a forward pass with the output rows of the nodes its rank owns
(``RankData.row_ids``; the ranks' rows are disjoint and cover the graph). A pair is scored
on the rank that owns its source; its destination's row may live on any rank.
``RowDirectory`` knows where every node's row lives; ``fetch_rows`` moves the rows a rank
asks for with one all-to-all, and in the backward pass moves their gradients back to their
owners, who add them up: the same rows and gradients the single process reads, so that a
pair's score and every gradient are the single process's. ``fetch_table`` fetches each node
a rank's pairs read once, and ``score_rows`` scores the pairs from that table by their
places in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..comm import Comm
from ..ops.pairs import pair_dot
from .decoders import Dot, score


class RowDirectory:
    """Where each node's output row lives: its owner rank and its place there. Built from
    every rank's ``row_ids`` (one all-gather); it holds two integers per node."""

    def __init__(self, row_ids: torch.Tensor, num_nodes: int, comm: Optional[Comm]):
        self.comm = comm if comm is not None and comm.world_size > 1 else None
        row_ids = row_ids.cpu().long()
        if self.comm is None:
            sizes, everyone = [len(row_ids)], row_ids
        else:
            sizes = self.comm.all_gather(torch.tensor([len(row_ids)])).tolist()
            everyone = self.comm.all_gather(row_ids, sizes)
        self.owner = torch.full((num_nodes,), -1, dtype=torch.int64)
        self.place = torch.full((num_nodes,), -1, dtype=torch.int64)
        self.owner[everyone] = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        self.place[everyone] = torch.cat([torch.arange(n) for n in sizes])
        if bool((self.owner < 0).any()):
            raise RuntimeError("the ranks' output rows do not cover every node")
        self.rank = 0 if self.comm is None else self.comm.rank
        self.mine = self.owner == self.rank

    def plan(self, wanted: torch.Tensor) -> "Fetch":
        """How to fetch the rows of the nodes ``wanted`` (global ids, any order, repeats allowed)."""
        wanted = wanted.cpu().long()
        if self.comm is None:
            return Fetch(None, self.place[wanted], None, None, None)
        owners = self.owner[wanted]
        order = torch.argsort(owners, stable=True)
        ask = torch.bincount(owners, minlength=self.comm.world_size)
        asked = self.comm.all_to_all(ask, [1] * self.comm.world_size, [1] * self.comm.world_size)
        serve = self.comm.all_to_all(self.place[wanted[order]], ask.tolist(), asked.tolist())
        return Fetch(self.comm, serve, order, ask.tolist(), asked.tolist())


@dataclass
class Fetch:
    """One rank's part of a fetch: the places of the rows it serves (in the order the askers
    asked), and how its own requests were sorted by owner (``order``) and counted."""

    comm: Optional[Comm]
    serve: torch.Tensor
    order: Optional[torch.Tensor]
    ask: Optional[list]
    asked: Optional[list]


class _FetchRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, fetch: Fetch):
        ctx.fetch, ctx.shape = fetch, z.shape
        serve = fetch.serve.to(z.device)
        width = z.shape[1]
        sent = z[serve]
        if fetch.comm is None:
            return sent
        with fetch.comm.phase("pairs"):
            got = fetch.comm.all_to_all(sent.reshape(-1), [n * width for n in fetch.asked],
                                        [n * width for n in fetch.ask]).view(-1, width)
        out = torch.empty_like(got)
        out[fetch.order.to(z.device)] = got
        return out

    @staticmethod
    def backward(ctx, grad):
        fetch, width = ctx.fetch, ctx.shape[1]
        grad = grad.contiguous()
        if fetch.comm is not None:
            with fetch.comm.phase("pairs"):
                grad = fetch.comm.all_to_all(grad[fetch.order.to(grad.device)].reshape(-1),
                                             [n * width for n in fetch.ask],
                                             [n * width for n in fetch.asked]).view(-1, width)
        out = grad.new_zeros(ctx.shape)
        out.index_add_(0, fetch.serve.to(grad.device), grad)
        return out, None


def fetch_rows(z: torch.Tensor, fetch: Fetch) -> torch.Tensor:
    """The rows ``fetch`` was planned for, from every rank's ``z`` (its output rows), in the
    order they were asked for; differentiable. Every rank of the group calls it together."""
    return _FetchRows.apply(z, fetch)


def fetch_table(z: torch.Tensor, directory: RowDirectory, wanted: torch.Tensor) -> tuple:
    """``(table, at)``: rows holding every node of ``wanted`` (global ids, repeats allowed) and
    each wanted node's place among them, so that ``table[at]`` are their rows. On one rank
    the table is ``z`` itself; on several, every distinct node's row is fetched once
    (``fetch_rows``). Scores read straight from the table spare writing a row per pair
    (``ops.pairs``). Differentiable in ``z``; every rank of the group calls it together."""
    wanted = wanted.cpu().long()
    if directory.comm is None:
        return z, directory.place[wanted].to(z.device)
    ids, at = torch.unique(wanted, return_inverse=True)
    return fetch_rows(z, directory.plan(ids)), at.to(z.device)


def score_rows(decoder: torch.nn.Module, table: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
               relation: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The decoder's scores of the pairs (``table[a[i]]``, ``table[b[i]]``), of relations
    ``relation`` (a typed graph's, one per pair; ``decoders.score``): the dot product's
    straight from the table (``ops.pairs``), any other decoder's from the pairs' gathered rows."""
    if type(decoder) is Dot:
        return pair_dot(table, a, b)
    return score(decoder, table[a], table[b], relation)
