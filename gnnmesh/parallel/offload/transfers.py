"""The transfers between the tiers and ranks, and their overlap with compute (HongTu §5,
Algorithms 2 and 3): who loads which neighbour rows from the host tier, who shares them with
whom, which stay in place, and when the copies run.

Batch b runs chunk b of every rank at once. Chunk (q, b) needs the rows ``N(q, b)`` (sorted
global ids, its destinations included); rank r's host tier holds its owned rows. Loading a
layer's rows for a batch is a linear map from host rows to each rank's input:

* the owner reads rows from its host tier into a buffer (``reads``: one segment per
  requester without inter-rank dedup, one segment of the batch's union with it),
* keeps rows its previous buffer already held (``both``),
* hands every requester its rows (``send``; the others' travel through ``comm``),
* and the requester places them among its input rows, next to rows its previous input
  already held (``intra`` without ``inter``).

Pushing neighbour gradients back is the adjoint of that map, run over the batches in reverse:
what a load read, the push accumulates; what a load kept, the push carries to the batch
before. Both therefore move exactly the same number of rows.

The transfers overlap compute (``Overlap``): while batch b computes, batch b+1's rows and
topology come in on one CUDA copy stream and batch b-1's results go out on another, ordered by
events, so that the host<->device copies hide behind the kernels.

The pipeline *fetches* a batch's loads one batch ahead and *takes* them when the batch runs; it
*puts* results to the host tier, which are done one batch later, in the order they were put, so
that sums into the host tier add up in the same order as in line. Fetches and puts never touch
the same table within a stage (a stage reads its inputs and writes its output, or the inputs'
gradients), and ``settle`` finishes every put before the next stage reads.

On the CPU the same schedule runs in line: a fetch is done when made, a put waits for the
batch after. With ``ahead`` off, every load and put runs when its batch needs it. Either way
the same rows move: the byte counters do not change, and neither does any result.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import torch

DEDUP_MODES = ("none", "inter", "intra", "both")


def _positions(of: np.ndarray, within: np.ndarray) -> np.ndarray:
    """Positions in the sorted array ``within`` of the ids ``of`` (all present)."""
    return np.searchsorted(within, of).astype(np.int64)


@dataclass
class Step:
    """One rank's part of loading one batch's rows.

    As owner: read ``reads`` (segments of local row positions, each ascending) into the
    buffer rows ``fresh_to`` gives them (with inter-rank dedup the buffer is the batch's
    union, else the segments one after another), copy the rows ``keep`` names from the
    previous buffer; ``send[q]`` are the buffer rows requester q gets. As requester: rows
    from owner p go to ``place[p]`` of the input, and ``input_keep`` copies rows of the
    previous input."""

    reads: list               # [ascending local positions], read in this order
    fresh_to: torch.Tensor    # buffer positions of the rows read (all reads concatenated)
    buffer_rows: int
    keep: tuple               # (previous buffer positions, buffer positions) kept in place
    send: list                # per requester q: buffer positions of its rows
    place: list               # per owner p: input positions of the rows it sends
    input_keep: tuple         # (previous input positions, input positions) kept in place
    input_rows: int
    read_whole: bool = False  # one read fills the buffer in order
    identity: bool = False    # the input is this rank's buffer as it is

    def to(self, device) -> "Step":
        """The same step with its index tensors on ``device`` (the host-tier reads stay numpy),
        copied asynchronously when they are pinned."""
        return self._map(lambda t: t.to(device, non_blocking=True))

    def pinned(self) -> "Step":
        """The same step with its index tensors in pinned memory, for a GPU to copy in."""
        return self._map(lambda t: t.pin_memory())

    def _map(self, move) -> "Step":
        return replace(self, fresh_to=move(self.fresh_to), keep=tuple(map(move, self.keep)),
                       send=[move(t) for t in self.send], place=[move(t) for t in self.place],
                       input_keep=tuple(map(move, self.input_keep)))

    def segments(self):
        """(local positions read, their buffer positions) of every non-empty read."""
        start = 0
        for rows in self.reads:
            if len(rows):
                yield rows, self.fresh_to[start:start + len(rows)]
            start += len(rows)

    @property
    def rows_read(self) -> int:
        return int(sum(len(r) for r in self.reads))

    @property
    def rows_kept(self) -> int:
        return int(len(self.keep[0]) + len(self.input_keep[0]))

    def rows_sent(self, me: int) -> int:
        return int(sum(len(s) for q, s in enumerate(self.send) if q != me))

    def rows_received(self, me: int) -> int:
        return int(sum(len(p) for owner, p in enumerate(self.place) if owner != me))


_EMPTY = np.zeros(0, dtype=np.int64)


def steps(batches: list, owner: np.ndarray, local: np.ndarray, world: int, mode: str) -> list:
    """``steps[b][r]``: rank r's Step for batch b. ``batches[b][q]`` is N(q, b) (sorted global
    ids); ``owner[v]`` the rank holding row v, ``local[v]`` its position there."""
    if mode not in DEDUP_MODES:
        raise ValueError(f"dedup mode {mode!r}: choose from {', '.join(DEDUP_MODES)}")
    inter, intra = mode in ("inter", "both"), mode in ("intra", "both")
    out, prev_need, prev_union = [], [None] * world, [None] * world
    for needs in batches:
        by_owner = [[need[owner[need] == p] for p in range(world)] for need in needs]  # [q][p]
        if intra and not inter:  # a requester keeps what its previous input held
            fresh_need = [need if prev is None else np.setdiff1d(need, prev, assume_unique=True)
                          for need, prev in zip(needs, prev_need)]
        else:
            fresh_need = needs
        row = []
        for r in range(world):
            if inter:
                union = np.unique(np.concatenate([by_owner[q][r] for q in range(world)]))
                prev = prev_union[r] if mode == "both" else None
                fresh = union if prev is None else np.setdiff1d(union, prev, assume_unique=True)
                kept = _EMPTY if prev is None else np.intersect1d(union, prev, assume_unique=True)
                keep = (_positions(kept, prev), _positions(kept, union)) if prev is not None else (_EMPTY, _EMPTY)
                reads, fresh_to = [local[fresh]], _positions(fresh, union)
                send = [_positions(by_owner[q][r], union) for q in range(world)]
                buffer_rows = len(union)
                prev_union[r] = union
            else:  # one read per requester, the buffer is the reads one after another
                segments = [need[owner[need] == r] for need in fresh_need]
                reads = [local[s] for s in segments]
                starts = np.cumsum([0] + [len(s) for s in segments])
                buffer_rows = int(starts[-1])
                fresh_to = np.arange(buffer_rows, dtype=np.int64)
                keep = (_EMPTY, _EMPTY)
                send = [np.arange(starts[q], starts[q + 1], dtype=np.int64) for q in range(world)]
            need = needs[r]
            arriving = [fresh_need[r][owner[fresh_need[r]] == p] for p in range(world)]
            place = [_positions(ids, need) for ids in arriving]
            prev = prev_need[r]
            if intra and not inter and prev is not None:
                kept = np.intersect1d(need, prev, assume_unique=True)
                input_keep = (_positions(kept, prev), _positions(kept, need))
            else:
                input_keep = (_EMPTY, _EMPTY)
            read_whole = len(reads) == 1 and len(keep[0]) == 0 and len(reads[0]) == buffer_rows
            identity = (len(send[r]) == buffer_rows == len(need) and len(place[r]) == len(need)
                        and len(input_keep[0]) == 0 and _in_order(send[r]) and _in_order(place[r]))
            row.append(Step(reads, _t(fresh_to), buffer_rows, _t(keep), _t(send), _t(place), _t(input_keep),
                            len(need), read_whole and _in_order(fresh_to), identity))
        prev_need = list(needs)
        out.append(row)
    return out


def _in_order(positions: np.ndarray) -> bool:
    return bool(np.array_equal(positions, np.arange(len(positions))))


def _t(positions):
    """Index arrays as tensors (kept as numpy: only the host-tier reads)."""
    if isinstance(positions, (list, tuple)):
        return type(positions)(torch.from_numpy(p) for p in positions)
    return torch.from_numpy(positions)


@dataclass
class Rows:
    """Rows one direction of loading moves per epoch, per rank (a layer's bytes are these
    times its row width and 4). ``received``: the rows other ranks sent it, which are the rows
    it sends back when gradients return to their owners."""

    read: list
    sent: list
    kept: list
    received: list

    def total(self, name: str) -> int:
        return int(sum(getattr(self, name)))


def count(batch_steps: list, world: int) -> Rows:
    """Rows read, sent to other ranks and kept in place by each rank over all batches."""
    rows = Rows([0] * world, [0] * world, [0] * world, [0] * world)
    for row in batch_steps:
        for r, step in enumerate(row):
            rows.read[r] += step.rows_read
            rows.sent[r] += step.rows_sent(r)
            rows.kept[r] += step.rows_kept
            rows.received[r] += step.rows_received(r)
    return rows


def count_unordered(batches: list, owner: np.ndarray, world: int, mode: str) -> Rows:
    """``count`` for the modes that keep nothing (none, inter), from the needs alone."""
    rows = Rows([0] * world, [0] * world, [0] * world, [0] * world)
    for needs in batches:
        by_owner = np.stack([np.bincount(owner[need], minlength=world) for need in needs])  # [q, r]
        sent = by_owner.sum(axis=0) - np.diag(by_owner)
        received = by_owner.sum(axis=1) - np.diag(by_owner)
        if mode == "inter":
            union = np.bincount(owner[np.unique(np.concatenate(needs))], minlength=world)
        else:
            union = by_owner.sum(axis=0)
        for r in range(world):
            rows.read[r] += int(union[r])
            rows.sent[r] += int(sent[r])
            rows.received[r] += int(received[r])
    return rows


# -- their overlap with compute -----------------------------------------------------------------


@dataclass
class _InFlight:
    """A fetch issued on the load stream: its value, usable once ``done`` has passed."""

    value: Any
    done: torch.cuda.Event


class Overlap:
    """The transfer schedule of one rank's pipeline over ``store`` on ``device``. ``ahead``:
    fetch a batch ahead and put a batch behind (on CUDA, on copy streams)."""

    def __init__(self, store, device, ahead: bool):
        self.store, self.device, self.ahead = store, torch.device(device), bool(ahead)
        self.streams = self.ahead and self.device.type == "cuda"
        if self.streams:
            self.load_stream = torch.cuda.Stream(self.device)
            self.store_stream = torch.cuda.Stream(self.device)
        self._puts: deque = deque()  # per batch, its puts not yet done: [(event, name, rows, values, add)]
        self._batch: list = []

    def fetch(self, load: Callable[[], Any]) -> Any:
        """``load()``'s value: on CUDA, issued on the load stream and handed over by ``take``."""
        if not self.streams:
            return load()
        with torch.cuda.stream(self.load_stream):
            value = load()
            done = torch.cuda.Event()
            done.record()
        return _InFlight(value, done)

    def take(self, fetched: Any) -> Any:
        """A fetch's value, for the compute stream: it waits for the copies, and the fetched
        tensors (made on the load stream) are marked as used on it, so that the allocator
        does not hand their memory out again while its kernels still read them."""
        if not isinstance(fetched, _InFlight):
            return fetched
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(fetched.done)
        for t in _cuda_tensors(fetched.value):
            t.record_stream(compute)
        return fetched.value

    def put(self, name: str, rows, values: torch.Tensor, add: bool = False) -> None:
        """``store[name][rows] = values`` (``+=`` with ``add``), now or a batch later; on CUDA
        copied out on the store stream, once the kernels computing ``values`` are done."""
        values = values.detach()
        if not self.ahead:
            self._apply(name, rows, values, add)
            return
        done = None
        if self.streams:
            compute = torch.cuda.current_stream(self.device)
            self.store_stream.wait_stream(compute)
            with torch.cuda.stream(self.store_stream):
                staged = torch.empty(values.shape, dtype=torch.float32, device="cpu", pin_memory=True)
                staged.copy_(values, non_blocking=True)
                done = torch.cuda.Event()
                done.record()
            values.record_stream(self.store_stream)
            values = staged
        self._batch.append((done, name, rows, values, add))

    def batch_done(self) -> None:
        """A batch has put all it puts: finish the puts of the batches before it."""
        if not self.ahead:
            return
        self._puts.append(self._batch)
        self._batch = []
        while len(self._puts) > 1:
            self._finish(self._puts.popleft())

    def settle(self) -> None:
        """Finish every put (before anything reads what they write)."""
        if self._batch:
            self._puts.append(self._batch)
            self._batch = []
        while self._puts:
            self._finish(self._puts.popleft())

    def _finish(self, puts: list) -> None:
        for done, name, rows, values, add in puts:
            if done is not None:
                done.synchronize()
            self._apply(name, rows, values, add)

    def _apply(self, name: str, rows, values: torch.Tensor, add: bool) -> None:
        (self.store.accumulate if add else self.store.write)(name, rows, values)


def _cuda_tensors(value: Any, seen=None):
    """Every CUDA tensor in ``value``: a tensor, a container of them, or an object holding
    them (a transfer step, a block's adjacency and its index arrays)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        if value.is_cuda:
            yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _cuda_tensors(item, seen)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _cuda_tensors(item, seen)
    elif hasattr(value, "__dict__"):
        for item in vars(value).values():
            yield from _cuda_tensors(item, seen)
