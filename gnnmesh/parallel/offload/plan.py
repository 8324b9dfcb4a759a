"""The plan, and what it costs (HongTu §4.1 and §5.3).

The plan is every rank's part cut into K chunks of destinations, the order batches run in,
and the transfer steps that load them; ``build_plan`` picks K for the fast tier's budget.
Every rank builds the same plan from the topology and the vertex-to-rank assignment, so no
plan ever travels.

What a plan costs comes from the plan alone: the bytes an epoch moves between the tiers and
ranks (``epoch_traffic``, exactly what the counters will show), and the fast tier's peak
footprint (``footprint``, an upper estimate), from which ``--chunks auto`` picks the smallest
K that fits the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np

from ...errors import ConfigError
from ...graph import Adjacency
from ...validate import format_bytes
from . import transfers
from .chunk import Chunk, cut, neighbourhood, reorganize
from .pipeline import DROP_PIECE, FEATURES

FLOAT = 4
# Fast-tier bytes per element of a chunk's working set, beyond the loaded rows themselves:
# dropout copies and masks, a layer's products and their autograd saves while recomputing.
# Measured with benchmarks/offload.py's budget runs (peak RSS over the estimate stays below 1).
WORK_FACTOR = 6
EDGE_BYTES = 40  # per entry: block structure, attention scores, softmax and dropout per head
# What the fast tier holds beside the chunks whatever the plan, from the first epoch on. On CPU,
# where the fast tier is resident memory, the process grows once setup is done by the pages of
# the kernels the first epoch runs (about 9 MiB), the interpreter's and the allocator's own
# growth and the record each epoch keeps: measured 10-12 MiB over 40 epochs, 1 and 2 ranks,
# every model, cora and generated graphs (tests/parallel/test_budgets.py runs the smallest budgets).
RESIDENT = 16 * 2**20
LOSS_COPIES = 4
# Per value of the features' dropout pass (a piece of at most DROP_PIECE values at a time): the
# rows read, the mask and its hashes, the scaled rows and the result.
DROP_BYTES = 32
# Per trained parameter: its gradient, Adam's two moments, the best epoch's copy, the
# pipeline's gradient sums and the optimizer step's temporaries.
PARAM_COPIES = 8


class Plan:
    """``chunks[r][c]``; ``order[r][b]``: the chunk rank r runs in batch b; ``steps_forward``
    and ``steps_reverse``: the transfer steps over the batches in order and reversed.
    ``params``: the trained model's parameters, whose training state the fast tier holds
    beside every chunk; ``overlap``: batches load a batch ahead and write back a batch behind,
    so the fast tier holds those transfers too (``footprint`` counts both)."""

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
        return reserved + max(footprint(candidate, stages, classes, heads))

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


# -- what a plan costs --------------------------------------------------------------------------


@dataclass
class Traffic:
    """Bytes one epoch moves, per rank: host tier -> fast tier (``load``), fast -> host
    (``store``), to other ranks (``peer``), and rows reused in place (``kept``)."""

    load: list
    store: list
    peer: list
    kept: list

    def total(self, name: str) -> int:
        return int(sum(getattr(self, name)))


def epoch_traffic(plan, stages: list, train: int = 1, evaluate: int = 1, mode=None,
                  input_grad: bool = False) -> Traffic:
    """The bytes of ``train`` training passes (forward and backward) and ``evaluate``
    evaluation passes (forward): an epoch is one of each, or one training pass when it
    does not evaluate. ``mode``: another dedup mode keeping nothing (none, inter).
    ``input_grad``: the features' gradient is summed too (``Pipeline``'s flag)."""
    world = plan.world
    rows = [plan.chunks[r][-1].hi for r in range(world)]
    out = Traffic([0] * world, [0] * world, [0] * world, [0] * world)
    forward, reverse = plan.moved(mode), plan.moved(mode, reverse=True)

    def move(moved: transfers.Rows, width: int, into: str) -> None:
        # rows go to their requesters on a load, and their gradients come back on a store
        peer = moved.sent if into == "load" else moved.received
        for r in range(world):
            getattr(out, into)[r] += moved.read[r] * width * FLOAT
            out.peer[r] += peer[r] * width * FLOAT
            out.kept[r] += moved.kept[r] * width * FLOAT

    def rows_of(width: int, into: str) -> None:
        for r in range(world):
            getattr(out, into)[r] += rows[r] * width * FLOAT

    widths = {FEATURES: plan.in_dim, **{s.output: s.width for s in stages}}
    last = len(stages) - 1
    passes = [True] * train + [False] * evaluate
    for train in passes:
        first = stages[0]
        if train and first.input_dropout > 0 and first.inputs[0] == FEATURES:  # the masked features
            rows_of(plan.in_dim, "load")
            rows_of(plan.in_dim, "store")
        for s, stage in enumerate(stages):
            for name in _wide(stage):
                move(forward, widths[name], "load")
            for name, wide in zip(stage.inputs, stage.wide):
                if not wide:
                    rows_of(widths[name], "load")
            if stage.cached and train:
                rows_of(sum(stage.split.widths), "store")
            if s != last:
                rows_of(stage.width, "store")
        if not train:
            continue
        for s in range(last, -1, -1):
            stage = stages[s]
            if s != last:
                rows_of(stage.width, "load")  # the output's gradient
            if stage.cached:
                rows_of(sum(stage.split.widths), "load")
            for name in _wide(stage):
                if not stage.cached:
                    move(reverse, widths[name], "load")
                if name != FEATURES or input_grad:
                    move(forward, widths[name], "store")
            for name, wide in zip(stage.inputs, stage.wide):
                if not wide:
                    if not stage.cached:
                        rows_of(widths[name], "load")
                    if name != FEATURES or input_grad:
                        rows_of(widths[name], "store")
    return out


def savings(load: int, baseline: int, inter_only: int, mode: str) -> dict:
    """What dedup saved of the ``baseline`` load (no dedup), in percent: in all, by sharing
    between ranks (the load with inter-rank dedup only, ``inter_only``, below the baseline)
    and by keeping rows in place (the rest)."""
    inter = baseline - inter_only if mode in ("inter", "both") else 0

    def pct(part):
        return round(100.0 * part / baseline, 2) if baseline else 0.0

    return {"dedup_saving_pct": pct(baseline - load), "dedup_inter_pct": pct(inter),
            "dedup_intra_pct": pct(baseline - load - inter)}


def _wide(stage) -> list:
    """The tables a stage loads at its chunks' loaded rows, each once."""
    return list(dict.fromkeys(name for name, wide in zip(stage.inputs, stage.wide) if wide))


def trained_params(model) -> int:
    """The parameters of ``model`` that training updates."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def fixed_bytes(params: int = 0) -> int:
    """The fast tier's bytes beside any chunk's for a model of ``params`` trained parameters:
    the process's own growth (``RESIDENT``) and the parameters' training state."""
    return RESIDENT + PARAM_COPIES * params * FLOAT


def footprint(plan, stages: list, classes: int, heads: int = 1) -> list:
    """Upper estimate of each rank's peak fast-tier bytes: the largest working set of any
    batch in any stage (its loaded rows, what owners read for it, the rows the next batch
    reuses, the products of the chunk's computation), with the plan's ``overlap`` beside the
    transfers in flight (the next batch's loads, the batch before's results), beside the loss
    over a chunk's logits, and beside what any plan holds (``fixed_bytes`` of the plan's
    model). From the chunks alone, so that ``--chunks auto`` can try many K."""
    copies = 1 if plan.mode == "none" else 2  # rows the next batch reuses stay loaded
    shapes = _stage_shapes(plan.in_dim, stages)
    peaks = []
    for r in range(plan.world):
        worst = 0
        works = [[0] * plan.batches for _ in shapes]
        moves = [[0] * (plan.batches + 2) for _ in shapes]  # padded: no batch before the first, after the last
        for b in range(plan.batches):
            chunk = plan.chunk(r, b)
            loaded = len(chunk.neighbours)
            served = sum(int(np.count_nonzero(plan.owner[plan.chunk(q, b).neighbours] == r))
                         for q in range(plan.world)) if plan.world > 1 else loaded
            for i, (width_in, width, terms, wide) in enumerate(shapes):
                if wide:
                    work = (copies * (loaded + served) * width_in + WORK_FACTOR * terms * loaded * width) * FLOAT
                    work += EDGE_BYTES * heads * chunk.entries
                else:  # its destinations' rows alone, read from the host tier as they are
                    work = (chunk.rows * width_in + WORK_FACTOR * chunk.rows * width) * FLOAT
                works[i][b] = work
                moves[i][b + 1] = _moved_bytes(chunk, served if wide else 0, width, terms, wide)
        for work, moved in zip(works, moves):
            for b in range(plan.batches):
                worst = max(worst, work[b] + (moved[b] + moved[b + 2] if plan.overlap else 0))
        rows = max(chunk.rows for chunk in plan.chunks[r]) if plan.chunks[r] else 0
        worst = max(worst, _dropout_pass_bytes(stages, rows, plan.in_dim))
        peaks.append(fixed_bytes(plan.params) + worst + _loss_bytes(rows, classes))
    return peaks


def _moved_bytes(chunk, served: int, width: int, terms: int, wide: bool) -> int:
    """An upper bound of what one batch of a stage moves either way while a neighbouring batch
    computes, when transfers overlap: coming in, the rows read for it (``served``), its
    destinations' rows, output gradients and cached aggregates, and its chunk's topology;
    going out, its output and cached aggregates, or its inputs' gradients."""
    rows = (served + (1 + terms) * chunk.rows) * width * FLOAT
    return rows + (EDGE_BYTES * chunk.entries if wide else 0)


def row_footprint(in_dim: int, widest: int, out: int) -> int:
    """Fast-tier bytes per row of a row-wise pass (a decoupled model's transform streamed
    through in row chunks): its input, the working set of its widest layer, its output
    sent and the columns received."""
    return (2 * in_dim + WORK_FACTOR * widest + 2 * out) * FLOAT


def _dropout_pass_bytes(stages: list, rows: int, in_dim: int) -> int:
    """The features' dropout pass over a chunk of ``rows`` (when the first stage drops them)."""
    first = stages[0]
    if first.input_dropout == 0 or first.inputs[0] != FEATURES:
        return 0
    return DROP_BYTES * min(rows * in_dim, max(in_dim, DROP_PIECE))


def _loss_bytes(rows: int, classes: int) -> int:
    """The loss over a chunk's logits, beside its working set: the logits, their log-softmax,
    the loss's gradient and the training rows' gather (training and evaluation take the logits
    chunk by chunk; no tensor over all rows is made)."""
    return LOSS_COPIES * rows * classes * FLOAT


def _stage_shapes(in_dim: int, stages: list) -> list:
    """(widest input, widest of input and output, aggregates, whether it loads neighbours'
    rows) of every stage."""
    widths = {FEATURES: in_dim, **{s.output: s.width for s in stages}}
    out = []
    for stage in stages:
        width_in = max(widths[name] for name in stage.inputs)
        out.append((width_in, max(width_in, stage.width), len(stage.split.widths) if stage.split else 1,
                    any(stage.wide)))
    return out


def footprint_floor(adj, owned: list, stages: list, classes: int, heads: int, in_dim: int, mode: str,
                    params: int = 0) -> int:
    """A lower bound of ``footprint`` over every plan: chunks of one row (on several ranks,
    with no row served to another): no budget below it can work. Not the smallest budget
    accepted, which ``build_plan``'s refusal names."""
    copies = 1 if mode == "none" else 2
    served = 1 if len(owned) == 1 else 0  # one rank serves itself every row it loads
    degrees = adj.degrees().numpy()
    floor = 0
    for ids in owned:
        rows = int(degrees[ids].max()) + 1 if len(ids) else 0  # a row's neighbourhood, itself included
        work = max((copies * (1 + served) * width_in + WORK_FACTOR * terms * width + EDGE_BYTES * heads) * rows
                   * FLOAT if wide else (width_in + WORK_FACTOR * width) * FLOAT
                   for width_in, width, terms, wide in _stage_shapes(in_dim, stages))
        floor = max(floor, work + _loss_bytes(1, classes), _dropout_pass_bytes(stages, 1, in_dim))
    return fixed_bytes(params) + floor
