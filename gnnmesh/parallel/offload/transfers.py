"""Who loads which neighbour rows from the host tier, who shares them with whom, and which
stay in place (HongTu §5, Algorithms 2 and 3).

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
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
    times its row width and 4)."""

    read: list
    sent: list
    kept: list

    def total(self, name: str) -> int:
        return int(sum(getattr(self, name)))


def count(batch_steps: list, world: int) -> Rows:
    """Rows read, sent to other ranks and kept in place by each rank over all batches."""
    rows = Rows([0] * world, [0] * world, [0] * world)
    for row in batch_steps:
        for r, step in enumerate(row):
            rows.read[r] += step.rows_read
            rows.sent[r] += step.rows_sent(r)
            rows.kept[r] += step.rows_kept
    return rows


def count_unordered(batches: list, owner: np.ndarray, world: int, mode: str) -> Rows:
    """``count`` for the modes that keep nothing (none, inter), from the needs alone."""
    rows = Rows([0] * world, [0] * world, [0] * world)
    for needs in batches:
        by_owner = np.stack([np.bincount(owner[need], minlength=world) for need in needs])  # [q, r]
        sent = by_owner.sum(axis=0) - np.diag(by_owner)
        if mode == "inter":
            union = np.bincount(owner[np.unique(np.concatenate(needs))], minlength=world)
        else:
            union = by_owner.sum(axis=0)
        for r in range(world):
            rows.read[r] += int(union[r])
            rows.sent[r] += int(sent[r])
    return rows
