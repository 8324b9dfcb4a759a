"""Each query node's K best candidates among every node (``gnnmesh predict --top-k K``).

A rank scores the queries it owns against the candidates one block of node ids at a time,
the block's rows fetched from their owners, and keeps a running top K: no rank ever holds a
score per node pair, nor every node's row. Ties go to the lower node id, so that every
strategy and rank count lists the same candidates in the same order. ``--exclude-known``
leaves out the query itself and its known positives: the training edges (those the encoder
ran on and those it learned to score, both ways where the graph is undirected).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..errors import ConfigError
from .rows import fetch_rows

SCORES_AT_ONCE = 1 << 24   # a block's scores on one rank: its queries x the block's candidates
LARGEST_BLOCK = 1 << 18    # the most candidates in a block (their rows fetched at once)
PAIRS_PER_CALL = 1 << 13   # pairs given to the decoder in one call
SMALLEST_BLOCK = 256


def known_positives(graph, pairs: Optional[torch.Tensor] = None) -> tuple:
    """``(indptr, destinations)``: each node's known positives as a source, CSR by source, each
    destination once: the edges of ``graph`` and the ``pairs`` ([2, E] source, destination: the
    training positives, which ``--disjoint-train`` keeps out of the graph); both ways where
    ``graph`` is undirected; no self-loops."""
    n = graph.num_nodes
    dst, src = graph.adj.row().numpy(), graph.adj.indices.numpy()
    if pairs is not None:
        src, dst = np.concatenate([src, pairs[0].numpy()]), np.concatenate([dst, pairs[1].numpy()])
    if not graph.directed:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = src != dst  # a self-loop: the query itself, left out on its own
    keys = np.unique(src[keep].astype(np.int64) * n + dst[keep])
    src, dst = keys // n, keys % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.bincount(src, minlength=n))
    return indptr, dst


def check_enough(k: int, queries: np.ndarray, num_nodes: int, known: Optional[tuple]) -> None:
    """A ConfigError unless every query has at least ``k`` candidates (every node; with
    ``known``, every node but itself and its known positives). Every rank checks every query,
    so that all of them refuse together."""
    if k < 1:
        raise ConfigError(f"--top-k {k}: give a count of candidates, 1 or more")
    if known is None:
        if k > num_nodes:
            raise ConfigError(f"--top-k {k} is more than the candidates: the graph has {num_nodes:,} nodes")
        return
    indptr, _ = known
    left = num_nodes - 1 - (indptr[queries + 1] - indptr[queries])
    worst = int(np.argmin(left))
    if k > left[worst]:
        raise ConfigError(f"--top-k {k} is more than the candidates: with --exclude-known, node {int(queries[worst])} "
                          f"has {int(left[worst]):,} (the graph's {num_nodes:,} nodes but itself and its known "
                          f"positives)")


def block_size(largest_share: int, num_nodes: int) -> int:
    """Candidates scored a block at a time, from the most queries any rank owns: the same on
    every rank, which fetch each block together. At most ``LARGEST_BLOCK``, so that a few
    queries never fetch (and pair up) every node's row at once."""
    return int(min(max(num_nodes, 1), LARGEST_BLOCK, max(SMALLEST_BLOCK, SCORES_AT_ONCE // max(largest_share, 1))))


def scored_blocks(decoder, z: torch.Tensor, directory, zq: torch.Tensor, largest_share: int, num_nodes: int,
                  mask: Optional["KnownMask"] = None, masked: float = float("-inf"), node_of=None, first: int = 0):
    """Yields ``(ids, scores)`` for each block of candidate ids in ascending order: the
    block's ids and the [queries, block] scores (float32, on the CPU) of this rank's query rows
    ``zq`` with them, the block's rows fetched from their owners (``directory``, ``z`` this
    rank's output rows); ``mask``'s known candidates scored ``masked``. Every rank iterates
    every block together (``largest_share``: the most queries any rank holds). ``node_of``
    maps the ids iterated (the user's, under ``--reorder``) to the rows' ids. The candidates
    are ids ``first`` to ``num_nodes - 1`` (a typed relation's: its destination type's)."""
    block = block_size(largest_share, num_nodes - first)
    for start in range(first, num_nodes, block):
        ids = torch.arange(start, min(num_nodes, start + block))
        zc = fetch_rows(z, directory.plan(ids if node_of is None else node_of(ids)))
        scores = block_scores(decoder, zq, zc).float().cpu()
        if mask is not None:
            mask.apply(scores, start, start + len(ids), masked)
        yield ids, scores


def block_scores(decoder, zq: torch.Tensor, zc: torch.Tensor) -> torch.Tensor:
    """[queries, candidates] scores of every query row ``zq`` with every candidate row ``zc``,
    by the decoder itself (every decoder scores pairs along the last dimension, broadcast over
    the others), ``PAIRS_PER_CALL`` pairs per call: what a call holds stays in the cache."""
    q, b = zq.shape[0], zc.shape[0]
    if q == 0 or b == 0:
        return zq.new_zeros(q, b)
    cols = min(b, PAIRS_PER_CALL)
    rows = max(1, PAIRS_PER_CALL // cols)
    out = None
    for i in range(0, q, rows):
        for j in range(0, b, cols):
            scores = decoder(zq[i:i + rows, None], zc[None, j:j + cols])
            if out is None:
                out = scores.new_empty(q, b)
            out[i:i + rows, j:j + cols] = scores
    return out


class RunningTopK:
    """The K best (score, candidate) of each query so far, best first, ties by lower id. Blocks
    arrive in ascending id order, so a stable sort of what is held followed by the block keeps
    every tie in id order."""

    def __init__(self, queries: int, k: int):
        self.k = k
        self.scores = torch.empty(queries, 0)
        self.ids = torch.empty(queries, 0, dtype=torch.int64)

    def add(self, scores: torch.Tensor, ids: torch.Tensor) -> None:
        """``scores`` [queries, block] of the candidates ``ids`` (ascending, above every id held)."""
        scores = torch.cat([self.scores, scores.float().cpu()], 1)
        ids = torch.cat([self.ids, ids.expand(scores.shape[0], -1)], 1)
        order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :self.k]
        self.scores, self.ids = scores.gather(1, order), ids.gather(1, order)


class KnownMask:
    """Where a rank's queries' known positives (and the queries themselves) fall in each block."""

    def __init__(self, queries: np.ndarray, known: tuple):
        """``known``: every node's known positives as CSR (``known_positives``)."""
        indptr, dst = known
        counts = indptr[queries + 1] - indptr[queries]
        rows = np.repeat(np.arange(len(queries)), counts)
        firsts = np.repeat(np.cumsum(counts) - counts, counts)  # each row's first place among the pairs
        cols = dst[np.repeat(indptr[queries], counts) + np.arange(len(rows)) - firsts]
        self._hold(np.concatenate([rows, np.arange(len(queries))]), np.concatenate([cols, queries]))

    @classmethod
    def of_cells(cls, rows: np.ndarray, cols: np.ndarray) -> "KnownMask":
        """The mask of the cells (query row, candidate id) given, as they are (no query added)."""
        mask = cls.__new__(cls)
        mask._hold(rows, cols)
        return mask

    def _hold(self, rows: np.ndarray, cols: np.ndarray) -> None:
        order = np.argsort(cols, kind="stable")
        self.rows = torch.from_numpy(np.asarray(rows)[order].astype(np.int64))
        self.cols = torch.from_numpy(np.asarray(cols)[order].astype(np.int64))

    def apply(self, scores: torch.Tensor, start: int, end: int, value: float = float("-inf")) -> None:
        """Known candidates of the block of ids ``start`` to ``end`` scored ``value`` (-inf:
        never chosen; NaN: neither above, below nor equal to any score)."""
        lo, hi = torch.searchsorted(self.cols, torch.tensor([start, end])).tolist()
        scores[self.rows[lo:hi], self.cols[lo:hi] - start] = value
