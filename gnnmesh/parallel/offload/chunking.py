"""Every rank's part cut into K chunks of destinations, the order batches run in, and the
transfer steps that load them (HongTu §4.1 and §5.3). Every rank builds the same plan from
the topology and the vertex-to-rank assignment, so no plan ever travels."""

from __future__ import annotations

import copy

import numpy as np

from ...graph import Adjacency
from . import transfers
from .schedule import cut, reorganize
from .view import Chunk, neighbourhood


class Chunking:
    """``chunks[r][c]``; ``order[r][b]``: the chunk rank r runs in batch b; ``steps_forward``
    and ``steps_reverse``: the transfer steps over the batches in order and reversed."""

    def __init__(self, adj: Adjacency, owned: list, k: int, mode: str, reorganized: bool, rank: int,
                 in_dim: int):
        self.world, self.k, self.mode, self.rank, self.in_dim = len(owned), k, mode, rank, in_dim
        self.owner = np.zeros(adj.shape[0], dtype=np.int64)
        self.local = np.zeros(adj.shape[0], dtype=np.int64)
        for r, ids in enumerate(owned):
            self.owner[ids] = r
            self.local[ids] = np.arange(len(ids))
        degrees = adj.degrees().numpy()
        self.chunks = []
        for r, ids in enumerate(owned):
            bounds = cut(degrees[ids] + 1, k)
            self.chunks.append([Chunk(r, int(lo), int(hi), ids[lo:hi], neighbourhood(adj, ids[lo:hi]),
                                      int(degrees[ids[lo:hi]].sum()) + int(hi - lo))
                                for lo, hi in zip(bounds[:-1], bounds[1:])])
        identity = [list(range(k)) for _ in owned]
        self.order = identity
        self.reorganized = False
        if reorganized and k > 1:
            candidate = reorganize([[c.neighbours for c in mine] for mine in self.chunks])
            if self._cost(candidate) < self._cost(identity):  # greedy: keep it only when it helps
                self.order, self.reorganized = candidate, True
        self.steps_forward = self._steps(self.order, mode)
        self.steps_reverse = self._steps([mine[::-1] for mine in self.order], mode)

    @property
    def batches(self) -> int:
        return self.k

    @property
    def rows(self) -> int:
        """Rows this rank owns."""
        return self.chunks[self.rank][-1].hi

    def chunk(self, rank: int, b: int) -> Chunk:
        return self.chunks[rank][self.order[rank][b]]

    def needs(self, order: list) -> list:
        """``needs[b][q]``: N(q, b) under ``order``."""
        return [[self.chunks[q][order[q][b]].neighbours for q in range(self.world)] for b in range(self.k)]

    def _steps(self, order: list, mode: str) -> list:
        return transfers.steps(self.needs(order), self.owner, self.local, self.world, mode)

    def _cost(self, order: list) -> int:
        """Host-tier rows a load reads under ``order`` (what reorganizing aims to lower)."""
        return transfers.count(self._steps(order, self.mode), self.world).total("read")

    def with_mode(self, mode: str) -> "Chunking":
        """The same chunks and order, loaded under dedup ``mode`` (for comparing modes)."""
        if mode == self.mode:
            return self
        other = copy.copy(self)
        other.mode = mode
        other.steps_forward = self._steps(self.order, mode)
        other.steps_reverse = self._steps([mine[::-1] for mine in self.order], mode)
        return other

    def replication(self) -> float:
        """alpha: loaded rows per vertex, summed over all chunks (HongTu §4.3)."""
        total = sum(len(c.neighbours) for mine in self.chunks for c in mine)
        return total / max(1, len(self.owner))
