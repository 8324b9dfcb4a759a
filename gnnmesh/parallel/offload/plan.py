"""Every rank's part cut into K chunks of destinations, the order batches run in, and the
transfer steps that load them (HongTu §4.1 and §5.3). Every rank builds the same plan from
the topology and the vertex-to-rank assignment, so no plan ever travels."""

from __future__ import annotations

from functools import cached_property

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
            mine = []
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                dst = ids[lo:hi]
                mine.append(Chunk(r, int(lo), int(hi), dst, neighbourhood(adj, dst), int(degrees[dst].sum()) + len(dst)))
            self.chunks.append(mine)
        self._moved: dict = {}
        self.order = [list(range(k)) for _ in owned]
        self.reorganized = False
        if reorganized and k > 1:
            candidate = reorganize([[c.neighbours for c in mine] for mine in self.chunks])
            if self._read(candidate) < self._read(self.order):  # greedy: keep it only when it helps
                self.order, self.reorganized = candidate, True

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

    @cached_property
    def steps_forward(self) -> list:
        return self._steps(self.order)

    @cached_property
    def steps_reverse(self) -> list:
        return self._steps([mine[::-1] for mine in self.order])

    def _steps(self, order: list) -> list:
        return transfers.steps(self.needs(order), self.owner, self.local, self.world, self.mode)

    def moved(self, mode=None, reverse: bool = False) -> transfers.Rows:
        """Rows one load of every batch reads, sends and keeps, per rank, under dedup ``mode``
        (default: the plan's), over the batches in order or ``reverse``d."""
        mode = mode or self.mode
        key = (mode, reverse and mode not in ("none", "inter"))
        if key not in self._moved:
            if mode in ("none", "inter"):  # nothing stays loaded: the order does not matter
                self._moved[key] = transfers.count_unordered(self.needs(self.order), self.owner, self.world, mode)
            elif mode != self.mode:
                raise ValueError(f"dedup mode {mode!r}: only the plan's own ordered mode is counted")
            else:
                self._moved[key] = transfers.count(self.steps_reverse if reverse else self.steps_forward,
                                                   self.world)
        return self._moved[key]

    def keep_own_steps(self) -> None:
        """Count every rank's transfers, then keep only this rank's steps (the others' were
        needed for the counts alone)."""
        for mode in dict.fromkeys((self.mode, "none", "inter")):
            for reverse in (False, True):
                self.moved(mode, reverse)
        for steps in (self.steps_forward, self.steps_reverse):
            for row in steps:
                for r in range(self.world):
                    if r != self.rank:
                        row[r] = None

    def _read(self, order: list) -> int:
        """Host-tier rows a load reads under ``order`` (what reorganizing aims to lower)."""
        if self.mode in ("none", "inter"):
            return transfers.count_unordered(self.needs(order), self.owner, self.world, self.mode).total("read")
        return transfers.count(self._steps(order), self.world).total("read")

    def replication(self) -> float:
        """alpha: loaded rows per vertex, summed over all chunks (HongTu §4.3)."""
        total = sum(len(c.neighbours) for mine in self.chunks for c in mine)
        return total / max(1, len(self.owner))
