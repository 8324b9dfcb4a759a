"""Lower the largest per-rank send volume of a partition by moving single vertices.

Connectivity - 1 counts the total volume, not who sends it: a hypergraph partitioner may
leave one part sending far more than the average, and the slowest rank sets the pace.
This greedy pass repeatedly takes the part that sends most and moves one of its vertices
to another part when that strictly lowers the part's send volume, no other part reaches
the old maximum, compute balance stays within (1 + epsilon) of the average (or within the
current maximum, if that is already above), and the total volume grows by at most
``budget`` of its starting value. Each accepted move lowers (max send, number of parts at
the max) lexicographically, so the pass ends; it is deterministic.

Column-net model: vertex v is a pin of its own net v and of the net of every column in
its row; net j is owned by part[j], which sends (parts touching j) - 1 rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..graph import Adjacency
from .base import csr_arrays

VOLUME_BUDGET = 0.01        # allowed growth of the total volume, as a fraction
MAX_TABLE_ENTRIES = 1 << 26  # pin-count table nets x parts (uint16): at most 128 MiB
MAX_MOVES = 60000           # also keeps saturated uint16 counts from ever reaching 1
TRIES_PER_ROUND = 256       # moves tried per ranking of a part's candidates


def reduce_max_send(adj: Adjacency, assignment: np.ndarray, parts: int, weights: np.ndarray,
                    epsilon: float, budget: float = VOLUME_BUDGET) -> np.ndarray:
    """A copy of ``assignment`` with a lower (or equal) maximum send volume; unchanged when
    the pin-count table would exceed MAX_TABLE_ENTRIES."""
    part = np.array(assignment, dtype=np.int64)
    n = part.shape[0]
    if parts < 2 or n * parts > MAX_TABLE_ENTRIES:
        return part
    state = _State(adj, part, parts, weights, epsilon, budget)
    moves = 0
    while moves < MAX_MOVES:
        made = state.round(MAX_MOVES - moves)
        if not made:
            break
        moves += made
    return state.part


class _State:
    def __init__(self, adj, part, parts, weights, epsilon, budget):
        n = part.shape[0]
        indptr, indices = csr_arrays(adj)
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        ids = np.arange(n, dtype=np.int64)
        # nets of every vertex: its own and its row's columns (deduplicated)
        nets = sp.csr_matrix((np.ones(rows.shape[0] + n, dtype=np.int8),
                              (np.concatenate([rows, ids]), np.concatenate([indices, ids]))), shape=(n, n))
        nets.sum_duplicates()
        self.vptr, self.vnets = nets.indptr.astype(np.int64), nets.indices.astype(np.int64)
        self.part, self.parts = part, parts
        self.weights = np.asarray(weights, dtype=np.int64)
        # pins of net j in part p; saturating uint16 (see MAX_MOVES)
        counts = np.bincount(self.vnets * parts + np.repeat(part, np.diff(self.vptr)), minlength=n * parts)
        self.table = np.minimum(counts, np.iinfo(np.uint16).max).astype(np.uint16).reshape(n, parts)
        self.lam = (self.table > 0).sum(axis=1).astype(np.int64)
        self.send = np.bincount(part, weights=self.lam - 1, minlength=parts).astype(np.int64)
        self.load = np.bincount(part, weights=self.weights, minlength=parts).astype(np.int64)
        self.cap = max((1.0 + epsilon) * self.weights.sum() / parts, float(self.load.max()))
        self.total = int((self.lam - 1).sum())
        self.limit = self.total + int(budget * self.total)
        self.rankings = {}  # part -> [candidates, ranked moves, next to try]

    def round(self, max_moves: int) -> int:
        """Apply the best moves out of the top sender that still pass an exact check, while
        that part remains the top sender.

        Scoring a part's moves is the costly step, and with many parts the top sender changes
        after almost every move, so each part's ranking is kept and resumed when the part is
        on top again (``_try`` re-checks every move against the current state). A ranking is
        recomputed once its TRIES_PER_ROUND moves are used up; a fresh one that yields no
        move ends the pass."""
        a = int(np.argmax(self.send))
        while True:
            fresh = a not in self.rankings
            if fresh:
                cand = np.flatnonzero(self.part == a)
                cand = cand[self.lam[cand] > 1]  # a vertex whose net stays inside a costs a nothing
                order = self._ranked(a, cand) if cand.shape[0] else np.zeros(0, np.int64)
                self.rankings[a] = [cand, order[:TRIES_PER_ROUND], 0]
            entry = self.rankings[a]
            cand, order = entry[0], entry[1]
            made = 0
            while entry[2] < order.shape[0]:
                flat = int(order[entry[2]])
                entry[2] += 1
                v, b = int(cand[flat // self.parts]), flat % self.parts
                if self.part[v] == a and self._try(v, a, b):
                    made += 1
                    if made >= max_moves or self.send[a] < self.send.max():
                        return made
            del self.rankings[a]  # used up
            if made or fresh:
                return made

    def _ranked(self, a: int, cand: np.ndarray) -> np.ndarray:
        """Flat (candidate, target) indices of plausible moves, best first, scored from this
        round's counts (``_try`` re-checks each against the state it meets)."""
        P = self.parts
        counts = self.vptr[cand + 1] - self.vptr[cand]
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        pos = np.repeat(self.vptr[cand] - starts, counts) + np.arange(int(counts.sum()))
        nets = self.vnets[pos]
        which = np.repeat(np.arange(cand.shape[0]), counts)
        own = nets == cand[which]
        table = self.table[nets]
        enters = table == 0                      # [pins, P]: b joins net j
        leaves = (table[:, a] == 1) & ~own       # a leaves net j (own net: handled below)
        own_leaves = (table[own, a] == 1)        # one per candidate, in candidate order
        lam_v = self.lam[cand]
        d_total = np.add.reduceat(enters, starts, axis=0).astype(np.int64) \
            - np.add.reduceat(leaves, starts)[:, None] - own_leaves[:, None]
        owner = self.part[nets]
        by_a = (owner == a) & ~own                # a's nets v reads: b may join them
        d_a = np.add.reduceat(enters & by_a[:, None], starts, axis=0).astype(np.int64) - (lam_v - 1)[:, None]
        lam_new = lam_v[:, None] - own_leaves[:, None] + enters[own]
        lost = np.bincount(which[leaves] * P + owner[leaves], minlength=cand.shape[0] * P).reshape(-1, P)
        d_b = lam_new - 1 - lost
        ok = (d_a < 0) & (self.send[None, :] + d_b < self.send[a]) \
            & (self.load[None, :] + self.weights[cand][:, None] <= self.cap) \
            & (self.total + d_total <= self.limit)
        ok[:, a] = False
        flat = np.flatnonzero(ok)
        score = (2 * d_a + d_total).ravel()[flat]  # mostly relieve a, prefer volume-neutral
        return flat[np.argsort(score, kind="stable")]

    def _try(self, v: int, a: int, b: int) -> bool:
        """Apply moving v from a to b if it passes every condition, exactly."""
        if self.load[b] + self.weights[v] > self.cap:
            return False
        nets = self.vnets[self.vptr[v]:self.vptr[v + 1]]
        table = self.table[nets].astype(np.int64)
        table[:, a] -= 1
        table[:, b] += 1
        lam_new = (table > 0).sum(axis=1)
        total = self.total + int((lam_new - self.lam[nets]).sum())
        if total > self.limit:
            return False
        owner_new = self.part[nets].copy()
        owner_new[nets == v] = b
        before = np.bincount(self.part[nets], weights=self.lam[nets] - 1, minlength=self.parts)
        after = np.bincount(owner_new, weights=lam_new - 1, minlength=self.parts)
        send = self.send + (after - before).astype(np.int64)
        # a must drop; no part may rise to a's old level: (max, parts at max) decreases
        rose = send > self.send
        rose[a] = False
        if send[a] >= self.send[a] or (send[rose] >= self.send[a]).any():
            return False
        self.table[nets] = np.minimum(table, np.iinfo(np.uint16).max).astype(np.uint16)
        self.lam[nets] = lam_new
        self.part[v] = b
        self.send, self.total = send, total
        self.load[a] -= self.weights[v]
        self.load[b] += self.weights[v]
        return True
