"""Each held-out positive ranked against every node (``--rank-all``), filtered.

A validation or test positive (s, d) is ranked among the scores of s with every node as
destination, less its known positives: the filtered setting of OGB (and of the knowledge-graph
literature), which leaves out every known true edge but the one ranked. The known positives of
s are the training edges (those messages pass over and those the loss scores, both ways where
the graph is undirected) and every validation and test positive of s, the other split's too;
s itself is no candidate either. Its rank is

    1 + (candidates scored strictly above d) + (candidates scored equal to d) / 2,

the mean of the optimistic and the pessimistic rank, as OGB's evaluator takes; MRR is the
mean of 1 / rank and Hits@K the share of ranks K or better (a positive tied across K by half a
place does not count).

Every rank ranks the positives whose source it owns, scoring its sources against one block
of candidate ids at a time (``ranking.scored_blocks``, as the top-K lists do; the blocks sized
for all the split's positives, so that a rank's share of the scores falls as ranks are added),
the known candidates scored NaN, which is neither above nor equal to any score: no rank holds a score
per node pair, nor every node's row. A candidate's score and the positive's are the same
decoder's computation of two rows, so a tie between them is a tie on every strategy and rank
count where the rows are equal. MRR and Hits@K are sums over the positives: each rank sums
its own positives' terms and one all-reduce adds them up, so no rank holds every positive's
rank either.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from . import ranking
from .metrics import SELECTION
from .rows import fetch_rows
from .split import HELD_OUT

EDGES_AT_ONCE = 1 << 20  # the graph's edges read a chunk at a time when the known positives are gathered


def check_hits(hits: tuple, num_nodes: int) -> None:
    """One line unless every Hits@K is below the graph's node count: a positive's rank is at
    most that count (itself and every other node), so Hits@K would be 1 whatever the model."""
    worst = max(hits)
    if worst >= num_nodes:
        raise ConfigError(f"config field 'hits': Hits@{worst} with --rank-all ranks each positive among the graph's "
                          f"{num_nodes:,} nodes, so it is 1 whatever the model; give each K below {num_nodes:,}")


def _edges(graph, pairs: torch.Tensor):
    """(sources, destinations) of the graph's edges, a chunk at a time, then of ``pairs``
    ([2, E]); each reversed as well where the graph is undirected."""
    indptr, indices = graph.adj.indptr.numpy(), graph.adj.indices.numpy()
    for start in range(0, len(indices), EDGES_AT_ONCE):
        at = np.arange(start, min(len(indices), start + EDGES_AT_ONCE))
        chunk = (indices[at], np.searchsorted(indptr, at, side="right") - 1)  # an edge runs column -> row
        yield chunk
        if not graph.directed:
            yield chunk[::-1]
    src, dst = pairs[0].numpy(), pairs[1].numpy()
    yield src, dst
    if not graph.directed:
        yield dst, src


def known_cells(graph, known: torch.Tensor, sources: np.ndarray) -> tuple:
    """``(rows, cols)``: for each query (row i, the source ``sources[i]``; sources may repeat)
    the candidates left out: its source's known positives (the edges of ``graph`` and the
    pairs ``known``, both ways where ``graph`` is undirected) and the source itself. Only the
    queries' own edges are kept, each once."""
    n = graph.num_nodes
    wanted = np.zeros(n, dtype=bool)
    wanted[sources] = True
    keys = []
    for src, dst in _edges(graph, known):
        keep = wanted[src] & (src != dst)
        keys.append(src[keep].astype(np.int64) * n + dst[keep])
    keys = np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
    of, to = keys // n, keys % n
    order = np.argsort(sources, kind="stable")
    ordered = sources[order]
    lo, hi = np.searchsorted(ordered, of, side="left"), np.searchsorted(ordered, of, side="right")
    counts = hi - lo
    firsts = np.repeat(np.cumsum(counts) - counts, counts)
    rows = order[np.repeat(lo, counts) + np.arange(int(counts.sum())) - firsts]
    cols = np.repeat(to, counts)
    return np.concatenate([rows, np.arange(len(sources))]), np.concatenate([cols, sources])


def filtered_ranks(decoder, z: torch.Tensor, directory, pairs: torch.Tensor, mask, largest_share: int,
                   num_nodes: int) -> torch.Tensor:
    """The rank (float64) of each of this rank's positives ``pairs`` ([2, m], sources it owns)
    among every node as its destination, ``mask``'s cells left out (``known_cells``; the
    positive's own destination among them). Every rank calls it together, with the same
    ``largest_share`` (at least the most positives any rank ranks; blocks are sized for it)."""
    src, dst = pairs
    zq = z[directory.place[src].to(z.device)]
    positive = decoder(zq, fetch_rows(z, directory.plan(dst))).float().cpu()[:, None]
    above = torch.zeros(len(src), dtype=torch.int64)
    level = torch.zeros(len(src), dtype=torch.int64)
    for _, scores in ranking.scored_blocks(decoder, z, directory, zq, largest_share, num_nodes, mask,
                                           masked=float("nan")):
        above += (scores > positive).sum(1)
        level += (scores == positive).sum(1)
    return 1.0 + above.double() + level.double() / 2.0


class FullRanking:
    """The filtered full ranking of the validation and test positives of a ``LinkSplit``:
    which of them this rank ranks, and the candidates each leaves out."""

    def __init__(self, split, directory):
        self.directory, self.num_nodes = directory, split.graph.num_nodes
        known = torch.cat([split.train] + [split.pairs(name) for name in HELD_OUT], 1)
        self.mine, self.masks, self.largest, self.sizes = {}, {}, {}, {}
        for name in HELD_OUT:
            pairs = split.pairs(name)
            owners = directory.owner[pairs[0]]
            self.mine[name] = torch.nonzero(owners == directory.rank).flatten()
            self.masks[name] = ranking.KnownMask.of_cells(
                *known_cells(split.graph, known, pairs[0, self.mine[name]].numpy()))
            # blocks sized for the split's every positive, not the largest rank's share: a rank's
            # scores of a block then shrink as more ranks share the positives
            self.largest[name] = len(owners)
            self.sizes[name] = pairs.shape[1]
        self.split = split

    def ranks(self, decoder, z: torch.Tensor, name: str) -> torch.Tensor:
        """The filtered rank of each positive of the split ``name`` that this rank ranks
        (``mine``). Every rank calls it together."""
        return filtered_ranks(decoder, z, self.directory, self.split.pairs(name)[:, self.mine[name]],
                              self.masks[name], self.largest[name], self.num_nodes)

    def metrics(self, decoder, z: torch.Tensor, name: str, hits: tuple, all_reduce) -> dict:
        """MRR and ``hits@K`` of the split ``name`` from its positives' filtered ranks: each
        rank's sums of ``1 / rank`` and of ``rank <= K`` over its positives, added up by
        ``all_reduce`` (the sum over ranks)."""
        r = self.ranks(decoder, z, name)
        sums = all_reduce(torch.stack([(1.0 / r).sum(), *((r <= k).sum().double() for k in hits)]))
        count = self.sizes[name]
        if not count:
            return {SELECTION: float("nan"), **{f"hits@{k}": float("nan") for k in hits}}
        return {SELECTION: float(sums[0]) / count, **{f"hits@{k}": float(sums[1 + i]) / count for i, k in enumerate(hits)}}
