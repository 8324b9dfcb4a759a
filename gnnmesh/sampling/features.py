"""Input features as a mini-batch's first layer reads them: a cache of hot rows in the
device's memory (``--cache-memory``), the rest read from a source. The source is a
``RowStore`` (the rows in host memory, ``ram``, or a file read with positioned I/O,
``--host-store file``), or, across machines, a store of this host's rows with the others
asked of their hosts (``parallel.minibatch.feature_homes``). Counts what it serves per
epoch, as DGL's GraphBolt does: rows found in the cache (hits) and not (misses), and the
bytes each tier gave (a row read twice in one read counts twice: it is gathered twice)."""

from __future__ import annotations

import time
import weakref
from contextlib import contextmanager
from typing import Optional, Sequence

import numpy as np
import torch

from ..host_store import HostStore

WRITE_ROWS = 1 << 14  # rows per write while filling a file store


def tier_counts(cached: np.ndarray, ids: np.ndarray, row_bytes: int) -> dict:
    """What reading rows ``ids`` counts where ``cached`` (a mask over all rows) is in the cache."""
    hits = int(cached[ids].sum())
    return {"hits": hits, "misses": len(ids) - hits, "cache_bytes": hits * row_bytes,
            "load_bytes": (len(ids) - hits) * row_bytes}


class Counted:
    """Counters that ``take`` returns and resets, and that ``uncounted`` reads leave alone."""

    FIELDS: dict = {}

    def take(self) -> dict:
        out, self.counts = getattr(self, "counts", None), dict(self.FIELDS)
        return out

    @contextmanager
    def uncounted(self):
        saved, self.counts = self.counts, dict(self.FIELDS)
        try:
            yield
        finally:
            self.counts = saved


def _span(columns: slice, width: int) -> slice:
    return slice(columns.start or 0, width if columns.stop is None else columns.stop)


class RowStore:
    """Columns ``columns`` of the rows of ``x`` (a host tensor), kept in host memory or in a
    file of this rank's own. ``read`` takes positions in ``x``. The file's one owner is this
    store: it is deleted by ``close`` or, whatever ends the run, when the store goes.
    ``shared``: as ``HostStore`` takes it."""

    def __init__(self, x: torch.Tensor, columns: slice = slice(None), store: str = "ram",
                 store_dir: Optional[str] = None, shared: Sequence[str] = ()):
        self.num_rows = x.shape[0]
        self.columns = _span(columns, x.shape[1])
        self.width = self.columns.stop - self.columns.start
        self.file = None
        self._closer = None
        if store == "file":
            self.file = HostStore("file", "cpu", store_dir, shared=shared)
            self._closer = weakref.finalize(self, self.file.close)  # its file goes however the run ends
            self.file.create("features", self.num_rows, self.width)
            for lo in range(0, self.num_rows, WRITE_ROWS):
                hi = min(lo + WRITE_ROWS, self.num_rows)
                self.file.write("features", range(lo, hi), x[lo:hi, self.columns].float())
            self.file.take()
        else:
            self.x = x

    def read(self, ids: np.ndarray, columns: Optional[slice] = None) -> torch.Tensor:
        """Rows ``ids`` (repeats allowed), on the host; ``columns`` (of the stored ones) narrows
        them. A file is read once per distinct row, in ascending order."""
        if self.file is not None:
            distinct, back = np.unique(ids, return_inverse=True)
            rows = self.file.read("features", distinct)
            if len(distinct) != len(ids) or not (back == np.arange(len(ids))).all():
                rows = rows[torch.from_numpy(back)]
        else:
            rows = self.x.index_select(0, torch.from_numpy(ids).to(self.x.device))
            if self.width != self.x.shape[1]:
                rows = rows[:, self.columns]
        return rows if columns is None or _span(columns, self.width) == slice(0, self.width) else rows[:, columns]

    def close(self) -> None:
        if self._closer is not None:
            self._closer()  # once: a later call, or the finalizer at exit, does nothing


class LocalSource(Counted):
    """Every row from one ``RowStore`` on this rank; ids are the store's positions."""

    FIELDS = {"load_bytes": 0}

    def __init__(self, store: RowStore):
        self.store, self.width = store, store.width
        self.take()

    def read(self, ids: np.ndarray) -> torch.Tensor:
        self.counts["load_bytes"] += 4 * self.width * len(ids)
        return self.store.read(ids)

    def close(self) -> None:
        self.store.close()


class FeatureTier(Counted):
    """Rows of ``num_rows`` global ids, ``width`` wide, served to ``device`` from a cache of
    hot rows and, for the rest, from ``source`` (with ``read(ids)``, ``take()``,
    ``uncounted()`` and ``close()``). Every ``load`` and ``fill`` reads the source exactly
    once, even for no rows: a source spread over machines reads in lock-step with its peers."""

    FIELDS = {"hits": 0, "misses": 0, "cache_bytes": 0, "load_seconds": 0.0}

    def __init__(self, source, num_rows: int, device):
        self.source, self.num_rows, self.width = source, num_rows, source.width
        self.device = torch.device(device)
        self.slot = np.full(num_rows, -1, dtype=np.int64)  # cache position of each row
        self.cache = torch.empty(0, self.width, device=self.device)
        self.take()

    @classmethod
    def local(cls, x: torch.Tensor, device, columns: slice = slice(None), store: str = "ram",
              store_dir: Optional[str] = None) -> "FeatureTier":
        """Columns ``columns`` of every row of ``x``, from a store on this rank."""
        return cls(LocalSource(RowStore(x, columns, store, store_dir)), x.shape[0], device)

    @property
    def row_bytes(self) -> int:
        return 4 * self.width

    def fill(self, ids: np.ndarray) -> None:
        """Keep rows ``ids`` in the cache (replacing what it held)."""
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        self.slot[:] = -1
        self.slot[ids] = np.arange(len(ids))
        with self.uncounted():
            self.cache = self.source.read(ids).to(self.device)

    def load(self, ids) -> torch.Tensor:
        """Rows ``ids`` (global, repeats allowed) on the device."""
        start = time.perf_counter()
        ids = np.asarray(ids, dtype=np.int64)
        where = self.slot[ids]
        hit = where >= 0
        hits = int(hit.sum())
        if hits == 0:  # nothing cached: one gather, no scatter
            out = self.source.read(ids).to(self.device)
        else:
            out = torch.empty(len(ids), self.width, device=self.device)
            out[torch.from_numpy(np.flatnonzero(hit)).to(self.device)] = \
                self.cache[torch.from_numpy(where[hit]).to(self.device)]
            missed = self.source.read(ids[~hit]).to(self.device)
            if hits < len(ids):
                out[torch.from_numpy(np.flatnonzero(~hit)).to(self.device)] = missed
        self.counts["hits"] += hits
        self.counts["misses"] += len(ids) - hits
        self.counts["cache_bytes"] += hits * self.row_bytes
        self.counts["load_seconds"] += time.perf_counter() - start
        return out

    @contextmanager
    def uncounted(self):
        """Reads that belong to no epoch's counts (evaluation, filling the cache)."""
        with super().uncounted(), self.source.uncounted():
            yield

    def take(self) -> dict:
        """The counters since the last call, the source's with them, then reset."""
        out, source = super().take(), self.source.take()
        return None if out is None else {**out, **source}

    def close(self) -> None:
        self.source.close()
