"""Input features as a mini-batch's first layer reads them: a cache of hot rows in the
device's memory (``--cache-memory``), the rest read from the store: the dataset's tensor in
host memory (``ram``) or a file read with positioned I/O (``--host-store file``). Counts what
it serves per epoch, as DGL's GraphBolt does: rows found in the cache (hits) and not (misses),
and the bytes each tier gave (a row read twice in one read counts twice: it is gathered
twice)."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np
import torch

from ..host_store import HostStore

WRITE_ROWS = 1 << 14  # rows per write while filling a file store


def tier_counts(cached: np.ndarray, ids: np.ndarray, row_bytes: int) -> dict:
    """What reading rows ``ids`` counts where ``cached`` (a mask over all rows) is in the cache."""
    hits = int(cached[ids].sum())
    return {"hits": hits, "misses": len(ids) - hits, "cache_bytes": hits * row_bytes,
            "load_bytes": (len(ids) - hits) * row_bytes}


class FeatureTier:
    """Columns ``columns`` of every row of ``x`` (a host tensor), served to ``device``."""

    def __init__(self, x: torch.Tensor, device, columns: slice = slice(None), store: str = "ram",
                 store_dir: Optional[str] = None):
        self.num_rows, self.full_width = x.shape
        self.columns = slice(columns.start or 0, self.full_width if columns.stop is None else columns.stop)
        self.width = self.columns.stop - self.columns.start
        self.device = torch.device(device)
        self.host = None
        if store == "file":  # this rank's columns, in a file of its own
            self.host = HostStore("file", "cpu", store_dir)
            self.host.create("features", self.num_rows, self.width)
            for lo in range(0, self.num_rows, WRITE_ROWS):
                hi = min(lo + WRITE_ROWS, self.num_rows)
                self.host.write("features", range(lo, hi), x[lo:hi, self.columns].float())
            self.host.take()
        else:
            self.x = x
        self.slot = np.full(self.num_rows, -1, dtype=np.int64)  # cache position of each row
        self.cache = torch.empty(0, self.width, device=self.device)
        self.take()

    @property
    def row_bytes(self) -> int:
        return 4 * self.width

    def fill(self, ids: np.ndarray) -> None:
        """Keep rows ``ids`` in the cache (replacing what it held)."""
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        self.slot[:] = -1
        self.slot[ids] = np.arange(len(ids))
        self.cache = self._read(ids).to(self.device)
        self.take()

    def load(self, ids) -> torch.Tensor:
        """Rows ``ids`` (global, repeats allowed) on the device."""
        start = time.perf_counter()
        ids = np.asarray(ids, dtype=np.int64)
        where = self.slot[ids]
        hit = where >= 0
        hits = int(hit.sum())
        if hits == 0:  # nothing cached: one gather, no scatter
            out = self._read(ids).to(self.device)
        else:
            out = torch.empty(len(ids), self.width, device=self.device)
            out[torch.from_numpy(np.flatnonzero(hit)).to(self.device)] = \
                self.cache[torch.from_numpy(where[hit]).to(self.device)]
            if hits < len(ids):
                out[torch.from_numpy(np.flatnonzero(~hit)).to(self.device)] = self._read(ids[~hit]).to(self.device)
        for key, value in tier_counts(hit, np.arange(len(ids)), self.row_bytes).items():
            self.counts[key] += value
        self.counts["load_seconds"] += time.perf_counter() - start
        return out

    def _read(self, ids: np.ndarray) -> torch.Tensor:
        """Rows ``ids`` (repeats allowed) from the store, on the host; a file is read once per
        distinct row, in ascending order."""
        if self.host is not None:
            distinct, back = np.unique(ids, return_inverse=True)
            rows = self.host.read("features", distinct)
            return rows if len(distinct) == len(ids) and (back == np.arange(len(ids))).all() \
                else rows[torch.from_numpy(back)]
        rows = self.x.index_select(0, torch.from_numpy(ids).to(self.x.device))
        return rows[:, self.columns] if self.width != self.full_width else rows

    def take(self) -> dict:
        """The counters since the last call, then reset."""
        out = getattr(self, "counts", None)  # None on the first call, from __init__
        self.counts = {"hits": 0, "misses": 0, "cache_bytes": 0, "load_bytes": 0, "load_seconds": 0.0}
        return out

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
