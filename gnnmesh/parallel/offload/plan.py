"""The plan: every rank's part cut into K chunks of destinations, the order batches run in,
and the transfer steps that load them (HongTu §4.1 and §5.3); ``build_plan`` picks K for the
fast tier's budget. Every rank builds the same plan from the topology and the
vertex-to-rank assignment, so no plan ever travels."""

from __future__ import annotations

from functools import cached_property
from typing import Optional

import numpy as np

from ...errors import ConfigError
from ...graph import Adjacency
from ...validate import format_bytes
from . import costs, transfers
from .chunk import Chunk, neighbourhood
from .chunk_order import cut, reorganize


class Plan:
    """``chunks[r][c]``; ``order[r][b]``: the chunk rank r runs in batch b; ``steps_forward``
    and ``steps_reverse``: the transfer steps over the batches in order and reversed.
    ``params``: the trained model's parameters, whose training state the fast tier holds
    beside every chunk; ``overlap``: batches load a batch ahead and write back a batch behind,
    so the fast tier holds those transfers too (``costs.footprint`` counts both)."""

    def __init__(self, adj: Adjacency, owned: list, k: int, mode: str, reorganized: bool, rank: int,
                 in_dim: int, params: int = 0, overlap: bool = False):
        self.world, self.k, self.mode, self.rank, self.in_dim = len(owned), k, mode, rank, in_dim
        self.params, self.overlap = params, overlap
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


class BudgetTooSmall(ConfigError):
    """A budget no plan fits; ``least``: the smallest budget that ``build_plan`` accepts with
    the same settings."""

    def __init__(self, message: str, least: int):
        super().__init__(message)
        self.least = least


def build_plan(*, adj, owned: list, rank: int, in_dim: int, stages: list, classes: int, heads: int, budget: int,
               chunks: Optional[int], dedup: str, reorganize: bool, reserved: int = 0, params: int = 0,
               overlap: bool = False) -> Plan:
    """The plan of every rank (owning the ids ``owned[r]``) for ``stages`` of a model of
    ``params`` trained parameters, its transfers overlapped with compute or not (``overlap``):
    ``chunks`` per rank, refused if its estimated footprint,
    plus ``reserved`` bytes the fast tier holds beside it, exceeds ``budget`` bytes, or (None)
    the smallest K whose estimate fits. A refusal (``BudgetTooSmall``) names the smallest
    budget this same search accepts."""
    def plan(k, reorganized=reorganize):
        return Plan(adj, owned, k, dedup, reorganized, rank, in_dim, params, overlap)

    def need(candidate):
        return reserved + max(costs.footprint(candidate, stages, classes, heads))

    fewest = min(len(rows) for rows in owned)
    if chunks is not None and chunks > max(fewest, 1):  # a chunk holds one row at least
        raise ConfigError(f"config field 'chunks': {chunks} chunks per rank, but a rank holds {fewest:,} rows; "
                          f"give at most {max(fewest, 1):,}, or --chunks auto")
    if chunks is not None:
        chosen = plan(chunks)
        needed = need(chosen)
        if needed > budget:
            raise BudgetTooSmall(f"config field 'device_memory': {format_bytes(budget)} is too small for {chunks} "
                                 f"chunks per rank (their largest needs about {format_bytes(needed)}); give at "
                                 f"least {format_bytes(needed)}, or more chunks (--chunks auto)", needed)
        return chosen
    # Doubling, then bisecting, over plans in chunk order; the reorganized plan of the chosen
    # K is kept if it fits as well. A budget is accepted when one K of the doubling fits it,
    # so the least need among them is the smallest budget accepted.
    rows = max(len(ids) for ids in owned)
    fits, needs = {}, {}

    def fitting(k):
        fits[k] = plan(k, False)
        needs[k] = need(fits[k])
        return needs[k] <= budget

    k = 1
    while not fitting(k):
        if k >= rows:
            least = min(needs.values())
            raise BudgetTooSmall(f"config field 'device_memory': {format_bytes(budget)} is too small for this "
                                 f"graph (no plan's estimate fits); give at least {format_bytes(least)}", least)
        k = min(2 * k, rows)
    low = k // 2 + 1
    while low < k:  # the smallest fitting K lies in (k/2, k]
        mid = (low + k) // 2
        if fitting(mid):
            k = mid
        else:
            low = mid + 1
    if reorganize and k > 1:
        chosen = plan(k)
        if need(chosen) <= budget:
            return chosen
    return fits[k]
