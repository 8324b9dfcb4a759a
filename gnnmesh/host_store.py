"""The slow tier of out-of-core training (every layer's vertex data and gradients, in host
RAM or in files), while the device holds one chunk at a time. Only this module touches it,
counting the bytes and time each way, as ``comm.Comm`` counts communication. Files go
through positioned I/O and a reused window buffer, never a memory map: a map counts every
touched page as resident memory, which would defeat a memory budget."""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import numpy as np
import torch

from . import locks
from .atomic import sweep_stale, temporary_prefix
from .errors import ConfigError

WINDOW_BYTES = 4 << 20  # the reused I/O buffer: bounds the memory the file kind adds
GAP_BYTES = 64 << 10    # wanted rows this close share one read (cheaper than another syscall)
COUNTERS = ("load_bytes", "store_bytes", "load_seconds", "store_seconds", "accumulate_seconds")


@dataclass
class _Table:
    rows: int
    width: int
    data: Optional[torch.Tensor] = None  # kind "ram"
    reading: dict = field(default_factory=dict)  # CUDA: per stream, the event after its last copy out of ``data``
    fd: int = -1                          # kind "file"
    path: str = ""


def _io(call, table: _Table, buf: np.ndarray, offset: int) -> None:
    """All of ``buf`` through ``os.preadv``/``os.pwritev`` at ``offset`` of the table's file
    (one call may do less). An OSError names the file (a full disk says only its reason)."""
    view, done = memoryview(buf.reshape(-1).view(np.uint8)), 0
    while done < len(view):
        try:
            n = call(table.fd, [view[done:]], offset + done)
        except OSError as err:
            raise OSError(err.errno, err.strerror or str(err), table.path) from None
        if n <= 0:
            raise OSError(None, f"short {call.__name__} at byte {offset + done} (file truncated?)", table.path)
        done += n


def _missing_dirs(directory: str) -> list:
    """The folders that creating ``directory`` would make, deepest first."""
    missing, folder = [], os.path.abspath(directory)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def made_together(directory: str, comm) -> list:
    """The folders that making ``directory`` will create, as every rank sees them before any
    rank creates one: a collective over ``comm`` (a ``gnnmesh.comm.Comm``). Only one rank will
    create each, yet with this list as ``HostStore(shared=...)`` every rank's store knows this
    run made them, and whichever closes last removes them."""
    missing = _missing_dirs(directory)
    comm.barrier()
    return missing


class HostStore:
    """A set of named 2-D float32 tables (rows x width), each this rank's rows of one array."""

    def __init__(self, kind: str, device="cpu", directory: Optional[str] = None,
                 window_bytes: int = WINDOW_BYTES, gap_bytes: int = GAP_BYTES, shared: Sequence[str] = ()):
        """``kind`` "ram" (host tensors, pinned for CUDA) or "file" (one file per table in
        ``directory``, created if missing; checked writable here so training refuses early).
        Files are named as ``gnnmesh.atomic``'s temporaries are (host and pid): those a process
        killed outright left in ``directory`` are swept here, once it is gone. ``shared``: the
        folders on ``directory``'s path this run made for the stores of all its ranks
        (``made_together``), removed by whichever store closes last."""
        if kind not in ("ram", "file"):
            raise ConfigError(f"host store kind must be 'ram' or 'file', not {kind!r}")
        self.kind, self.device = kind, torch.device(device)
        self.pin = self.device.type == "cuda" and torch.cuda.is_available()
        self.window_bytes, self.gap_bytes = int(window_bytes), int(gap_bytes)
        self.directory, self._made_dirs = directory, []  # the folders this store created, deepest first
        self._lock = None  # the directory's lock, held for the run (``gnnmesh.locks``)
        self._tables: dict[str, _Table] = {}
        self._window = np.empty(0, np.uint8)  # grown on first use, then reused
        self._counts: dict = {}
        self.take()
        if kind == "file":
            if not directory:
                raise ConfigError("host store kind 'file' needs a directory")
            try:
                # deepest first; where several ranks' stores meet, one rank made the folder
                made = set(_missing_dirs(directory)) | {os.path.abspath(f) for f in shared}
                self._made_dirs = sorted(made, key=len, reverse=True)
                # the ranks of one run may share it (--minibatch's feature files); not two runs
                self._lock = locks.hold(directory, "host store directory", peers=True)
                os.makedirs(directory, exist_ok=True)
                if sweep_stale(directory) and not self._made_dirs and not os.listdir(directory):
                    self._made_dirs = [directory]  # held only a dead run's files: made by that run
                with tempfile.TemporaryFile(dir=directory) as probe:  # removed on closing
                    probe.write(b"0")
            except ConfigError:  # held by another run, whose folders these are; or not a path
                self._made_dirs = []
                raise
            except OSError as err:
                self._unlock()
                self._remove_dirs()
                raise ConfigError(f"host store directory {directory!r} is not writable: "
                                  f"{err.strerror or err}") from None

    def create(self, name: str, rows: int, width: int) -> None:
        """A zero-filled table; re-creating a name replaces it."""
        if rows < 0 or width < 1:
            raise ValueError(f"table {name!r}: need rows >= 0 and width >= 1, got {rows} x {width}")
        old = self._tables.get(name)
        table = self._tables[name] = _Table(int(rows), int(width))
        if self.kind == "ram":
            # Written now, so that every page is resident from the start: the host tier's
            # memory is taken when it is made, never later inside the fast tier's accounting.
            table.data = torch.empty(rows, width, pin_memory=self.pin).zero_()
            return
        if old is not None:  # keep its file
            table.fd, table.path = old.fd, old.path
        else:  # host, pid and a random part keep stores sharing a directory apart
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]
            table.fd, table.path = tempfile.mkstemp(prefix=temporary_prefix(f"{safe}.f32"), dir=self.directory)
        try:
            os.ftruncate(table.fd, 0)  # zeros come from the file system, not from writing them
            os.ftruncate(table.fd, rows * width * 4)
        except OSError as err:
            raise OSError(err.errno, err.strerror or str(err), table.path) from None

    def zero(self, name: str) -> None:
        """Set the whole table to 0."""
        table, _ = self._lookup(name, range(0))
        if table.data is not None:
            self._await_reads(table)
            table.data.zero_()
        else:
            self.create(name, table.rows, table.width)

    def working_bytes(self) -> int:
        """What the store itself takes from the process's memory while it reads and writes: for
        the file kind on the CPU, its reused window, a span gathered from it and the sum a
        write adds into it (in a GPU's budget, nothing: that memory is the host's)."""
        return 3 * self.window_bytes if self.kind == "file" and self.device.type == "cpu" else 0

    def nbytes(self) -> int:
        """Total bytes of all tables."""
        return sum(t.rows * t.width * 4 for t in self._tables.values())

    def read(self, name: str, rows, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``table[rows]`` as a [len(rows), width] float32 tensor on the device (``out`` if given).
        ``rows``: ascending unique positions (LongTensor or int array), or a ``range``/slice."""
        start = time.perf_counter()
        table, rows = self._lookup(name, rows)
        shape = (len(rows), table.width)
        out = torch.empty(shape, dtype=torch.float32, device=self.device) if out is None else out
        if (tuple(out.shape), out.dtype, out.device.type) != (shape, torch.float32, self.device.type) \
                or not out.is_contiguous():
            raise ValueError(f"table {name!r}: out must be contiguous float32 {shape} on {self.device}")
        if table.data is not None:
            if isinstance(rows, range):
                src = table.data[rows.start:rows.stop]
            else:  # gather on the host; for CUDA into pinned memory
                src = out if out.device.type == "cpu" else torch.empty(shape, pin_memory=self.pin)
                torch.index_select(table.data, 0, torch.from_numpy(rows), out=src)
            if src is not out:
                out.copy_(src, non_blocking=self.pin)  # only pinned memory copies asynchronously
                if self.pin and isinstance(rows, range):  # from the table itself, on this stream
                    stream = torch.cuda.current_stream(self.device)
                    table.reading[stream.stream_id] = stream.record_event()
        else:
            host = out.numpy() if out.device.type == "cpu" else None
            for lo, hi, pick, k, n in self._pieces(table, rows):
                # CUDA: stage in pinned memory; torch's caching allocator keeps it until copied
                stage = None if host is not None else torch.empty(n, table.width, pin_memory=self.pin)
                dst = host[k:k + n] if host is not None else stage.numpy()
                if isinstance(pick, slice):  # every row of the span: straight into place
                    _io(os.preadv, table, dst, lo * table.width * 4)
                else:  # mode "clip": "raise" would gather into a temporary first
                    np.take(self._span(table, lo, hi), pick, axis=0, out=dst, mode="clip")
                if stage is not None:
                    out[k:k + n].copy_(stage, non_blocking=self.pin)
        self._counts["load_bytes"] += shape[0] * shape[1] * 4
        self._counts["load_seconds"] += time.perf_counter() - start
        return out

    def write(self, name: str, rows, values: torch.Tensor) -> None:
        """``table[rows] = values``."""
        self._put(name, rows, values, add=False)

    def accumulate(self, name: str, rows, values: torch.Tensor) -> None:
        """``table[rows] += values``, in float32; its time goes to ``accumulate_seconds``."""
        self._put(name, rows, values, add=True)

    def _put(self, name: str, rows, values: torch.Tensor, add: bool) -> None:
        start = time.perf_counter()
        table, rows = self._lookup(name, rows)
        if tuple(values.shape) != (len(rows), table.width):
            raise ValueError(f"table {name!r}: values of shape {tuple(values.shape)} for "
                             f"{len(rows)} rows of width {table.width}")
        values = values.detach().to(torch.float32)
        if table.data is not None:
            self._await_reads(table)
            if isinstance(rows, range):
                dst = table.data[rows.start:rows.stop]
                (dst.add_ if add else dst.copy_)(values.cpu())
            else:
                index = torch.from_numpy(rows)
                (table.data.index_add_ if add else table.data.index_copy_)(0, index, values.cpu())
        else:
            host = values.contiguous().numpy() if values.device.type == "cpu" else None
            for lo, hi, pick, k, n in self._pieces(table, rows):
                src = host[k:k + n] if host is not None else values[k:k + n].cpu().numpy()
                if add or not isinstance(pick, slice):  # read-modify-write the covering span
                    span = self._span(table, lo, hi)
                    span[pick] = span[pick] + src if add else src
                    src = span
                _io(os.pwritev, table, src, lo * table.width * 4)
        self._counts["store_bytes"] += len(rows) * table.width * 4
        self._counts["accumulate_seconds" if add else "store_seconds"] += time.perf_counter() - start

    @staticmethod
    def _await_reads(table: _Table) -> None:
        """Before the host changes a RAM table: an asynchronous read may still be copying rows out."""
        for event in table.reading.values():
            event.synchronize()
        table.reading.clear()

    def _lookup(self, name: str, rows) -> tuple[_Table, range | np.ndarray]:
        """The table, and ``rows`` as a step-1 ``range`` or an ascending unique int64 array."""
        table = self._tables.get(name)
        if table is None:
            raise KeyError(f"no table {name!r} in this host store")
        if isinstance(rows, slice):
            rows = range(rows.start or 0, table.rows if rows.stop is None else rows.stop,
                         rows.step or 1)
        if isinstance(rows, range) and rows.step == 1:
            if len(rows) and (rows.start < 0 or rows.stop > table.rows):
                raise IndexError(f"table {name!r}: rows {rows.start}..{rows.stop - 1} "
                                 f"outside 0..{table.rows - 1}")
            return table, rows
        if isinstance(rows, torch.Tensor):
            rows = rows.cpu().numpy()
        rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        if len(rows) > 1 and not (np.diff(rows) > 0).all():
            raise ValueError(f"table {name!r}: rows must be ascending and unique")
        if len(rows) and (rows[0] < 0 or rows[-1] >= table.rows):
            raise IndexError(f"table {name!r}: rows {rows[0]}..{rows[-1]} outside 0..{table.rows - 1}")
        return table, rows

    def _pieces(self, table: _Table, rows) -> Iterator[tuple]:
        """(lo, hi, pick, k, n): one I/O covers file rows lo..hi; of those, ``pick`` (a slice
        when all) are the n wanted ones, rows k..k+n of the caller's block."""
        step = max(1, self.window_bytes // (table.width * 4))  # rows per window
        if isinstance(rows, range):
            for lo in range(rows.start, rows.stop, step):
                hi = min(lo + step, rows.stop)
                yield lo, hi, slice(None), lo - rows.start, hi - lo
            return
        breaks = np.flatnonzero(np.diff(rows) > self.gap_bytes // (table.width * 4) + 1) + 1
        for first, last in zip(np.r_[0, breaks], np.r_[breaks, len(rows)]):
            i = int(first)
            while i < last:  # cut each run of close rows into window-sized spans
                j = i + int(np.searchsorted(rows[i:last], rows[i] + step))
                lo, hi = int(rows[i]), int(rows[j - 1]) + 1
                yield lo, hi, slice(None) if hi - lo == j - i else rows[i:j] - lo, i, j - i
                i = j

    def _span(self, table: _Table, lo: int, hi: int) -> np.ndarray:
        """File rows lo..hi read into the reused window buffer, as a [hi - lo, width] view."""
        size = (hi - lo) * table.width * 4
        if len(self._window) < size:  # only a row wider than the window grows it past its size
            self._window = np.empty(max(size, self.window_bytes), np.uint8)
        span = self._window[:size].view(np.float32).reshape(hi - lo, table.width)
        _io(os.preadv, table, span, lo * table.width * 4)
        return span

    def take(self) -> dict:
        """Bytes and seconds moved each way (``COUNTERS``) since the last call, then reset."""
        out = self._counts
        self._counts = {key: 0 if key.endswith("bytes") else 0.0 for key in COUNTERS}
        return out

    def close(self) -> None:
        """Drop every table, deleting its files (and the folders this store made, if empty)."""
        tables, self._tables = self._tables, {}
        for table in tables.values():
            if table.fd >= 0:
                os.close(table.fd)
                with suppress(FileNotFoundError):
                    os.remove(table.path)
        self._unlock()  # first: its sidecar lies beside the directory
        self._remove_dirs()

    def _unlock(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _remove_dirs(self) -> None:
        made, self._made_dirs = self._made_dirs, []
        for folder in made:  # deepest first
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                continue
            except OSError:  # something else put files there: leave it and what holds it
                return

    def __enter__(self) -> "HostStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
