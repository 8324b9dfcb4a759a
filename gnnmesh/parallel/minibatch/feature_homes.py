"""Input features spread across machines (a job of several hosts, e.g. ``torchrun --nnodes
2``): each host holds the rows homed on it, every rank of the host a copy, and a rank asks
the rows homed elsewhere of the rank with its own local index on their home host, so the
requests spread over every rank of that host.

A row's home is its owner's host when vertices are partitioned (snp and dnp read mostly the
rows of their own partition, which then stay on the host), else a contiguous run of rows.
A read is three all-to-alls, on every rank at once (the ids' lengths, the ids, the rows),
counted under the ``features`` phase; ``plan`` says who asks whom for what, for training
and for the dry run alike, so the dry run's bytes are the ones training counts."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Optional

import numpy as np
import torch

from ...errors import ConfigError
from ...sampling.features import Counted, RowStore
from .exchange import exchange_ids, id_bytes

FEATURES = "features"  # the phase of a training step's remote feature reads
EVAL_FEATURES = "eval_features"  # remote reads outside training steps (evaluation, cache filling)
CALLS = 3  # all-to-alls per read: lengths, ids, rows


def job_hosts(world: int) -> int:
    """The hosts of this job: its ranks over the ranks per host (``LOCAL_WORLD_SIZE``, which
    torchrun and the local launcher set), one host when unset."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world) or world)
    if local < 1 or world % local:
        raise ConfigError(f"{world} ranks with {local} per host: every host must run as many ranks "
                          "(torchrun --nproc-per-node)")
    return world // local


class FeatureHomes:
    """Where each row lives: ``home[v]``, the host of row v, over ``hosts`` hosts of
    ``world // hosts`` ranks each (ranks numbered host by host, as torchrun numbers them)."""

    def __init__(self, num_rows: int, world: int, hosts: int, owner: Optional[np.ndarray] = None):
        self.world, self.hosts, self.per_host = world, hosts, world // hosts
        if owner is not None:
            self.home = (np.asarray(owner, dtype=np.int64) // self.per_host).astype(np.int64)
        else:
            self.home = np.arange(num_rows, dtype=np.int64) * hosts // max(num_rows, 1)

    def host(self, rank: int) -> int:
        return rank // self.per_host

    def rows(self, host: int) -> np.ndarray:
        """The rows homed on ``host``, ascending."""
        return np.flatnonzero(self.home == host)

    def plan(self, ids: np.ndarray, rank: int):
        """For rank ``rank`` reading rows ``ids`` (global, repeats allowed, none cached): the
        mask of those homed here, the distinct others, and for each rank the ids asked of it
        with the position of each among the distinct ones."""
        mine = self.home[ids] == self.host(rank)
        distinct = np.unique(ids[~mine])
        server = self.home[distinct] * self.per_host + rank % self.per_host
        order = np.argsort(server, kind="stable")
        sizes = np.bincount(server, minlength=self.world)
        return mine, distinct, np.split(distinct[order], np.cumsum(sizes)[:-1]), order

    def step_counts(self, reads: list, widths: list) -> dict:
        """Every rank's counts for one step in which rank q reads ``reads[q]`` (its misses) at
        width ``widths[q]``: bytes read from its host's store (for itself and for the ranks it
        serves), bytes of rows it receives, bytes it sends (ids and rows) and its calls."""
        out = {k: [0] * self.world for k in ("load_bytes", "remote_bytes", "features_bytes", "calls")}
        for q, ids in enumerate(reads):
            mine, distinct, pieces, _ = self.plan(ids, q)
            row = 4 * widths[q]
            out["load_bytes"][q] += int(mine.sum()) * row
            out["remote_bytes"][q] += len(distinct) * row
            out["features_bytes"][q] += id_bytes([len(p) for p in pieces], q)
            for s, piece in enumerate(pieces):
                out["load_bytes"][s] += len(piece) * row
                out["features_bytes"][s] += len(piece) * row
            out["calls"][q] += CALLS
        return out


class HomedSource(Counted):
    """The rows a rank reads, at its ``columns[rank]``: from ``store`` (this host's rows, every
    column, in ``homes.rows(host)`` order) when homed here, else from their home host."""

    FIELDS = {"load_bytes": 0, "remote_bytes": 0}

    def __init__(self, comm, homes: FeatureHomes, store: RowStore, columns: list):
        self.comm, self.homes, self.store, self.columns = comm, homes, store, columns
        self.rank = comm.rank
        self.width = columns[self.rank].stop - columns[self.rank].start
        self.position = np.full(len(homes.home), -1, dtype=np.int64)
        self.position[homes.rows(homes.host(self.rank))] = np.arange(store.num_rows)
        self.phase = FEATURES
        self.take()

    def read(self, ids: np.ndarray) -> torch.Tensor:
        mine, distinct, pieces, order = self.homes.plan(ids, self.rank)
        out = torch.empty(len(ids), self.width)
        here = ids[mine]
        out[torch.from_numpy(np.flatnonzero(mine))] = self.store.read(self.position[here], self.columns[self.rank])
        asked = exchange_ids(self.comm, pieces, self.phase)
        served = [self.store.read(self.position[a], self.columns[q]) for q, a in enumerate(asked)]
        widths = [c.stop - c.start for c in self.columns]
        flat = torch.cat([s.reshape(-1) for s in served]) if served else torch.zeros(0)
        with self.comm.phase(self.phase):
            got = self.comm.all_to_all(flat.to(self.comm.device), [len(a) * widths[q] for q, a in enumerate(asked)],
                                       [len(p) * self.width for p in pieces]).cpu()
        rows = torch.empty(len(distinct), self.width)
        rows[torch.from_numpy(order)] = got.reshape(-1, self.width)
        back = np.searchsorted(distinct, ids[~mine])
        out[torch.from_numpy(np.flatnonzero(~mine))] = rows[torch.from_numpy(back)]
        row = 4 * self.width
        self.counts["load_bytes"] += len(here) * row + sum(len(a) * 4 * widths[q] for q, a in enumerate(asked))
        self.counts["remote_bytes"] += len(distinct) * row
        return out

    @contextmanager
    def uncounted(self):
        self.phase = EVAL_FEATURES
        try:
            with super().uncounted():
                yield
        finally:
            self.phase = FEATURES

    def close(self) -> None:
        self.store.close()
