"""Exact ROC-AUC (and the other statistics of a sort) of scores spread over ranks, with no
rank holding every score.

The AUC of one column is the Mann-Whitney statistic U over its p positive and n negative
rows, divided by p n: every positive counts the negatives scored below it, and half of those
scored equal (ties share their average rank, as scikit-learn's ``roc_auc_score`` and OGB's
evaluator score them). U needs, for each distinct score, how many negatives lie below it over
all ranks, which a distributed sort gives:

1. each rank sorts its rows of each column and folds equal scores into one run (the score, its
   positives, its negatives): a score that many rows share travels once per rank;
2. every rank draws ``2 P`` evenly spaced scores of each of its sorted columns; an all-gather
   of them (weighted by each rank's rows) gives every rank the same ``P - 1`` splitters per
   column, its quantiles;
3. each run goes to the rank whose value range holds its score (``searchsorted`` on the score:
   equal scores always land on the same rank, so a tie never straddles two), one all-to-all;
4. each rank merges the runs it got, and an all-gather of every rank's positives and
   negatives per column gives what lies on the ranks below (ranks own increasing ranges);
   the negatives below each run are those plus the ones before it on its own rank.

``2 U`` is an integer sum (``positives x (2 x negatives below + negatives equal)``), summed
over ranks in int64, so the AUC is the single process's to the last bit. The same runs give
the average precision (``average_precision``: each score's positives times the precision
there, the positives at or above it over every row at or above it). A rank holds its
own rows of a block of columns, what it receives (about as many, as the splitters are the
ranks' quantiles) and ``2 P`` samples per column and rank; columns go a block at a time, the
block's entries on the rank with most rows at most ``BLOCK_ENTRIES``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

BLOCK_ENTRIES = 1 << 21   # a block's (row, column) entries on the rank with most rows


@dataclass
class Runs:
    """This rank's share of one block of columns sorted over every rank: the distinct scores
    of its value range, ascending within each column, with their counts (int64)."""

    column: np.ndarray          # the block's column of each run
    value: np.ndarray           # its score (float64)
    positives: np.ndarray       # the rows of that score and column labelled 1, over all ranks
    negatives: np.ndarray       # and labelled 0
    positives_below: np.ndarray  # the column's positives scored lower, over all ranks
    negatives_below: np.ndarray  # and its negatives
    positives_total: np.ndarray  # per column of the block: its positives over all ranks
    negatives_total: np.ndarray  # and its negatives

    def twice_u(self) -> np.ndarray:
        """Each run's share of its column's ``2 U`` (an integer): its positives times twice the
        negatives below them plus the negatives tied with them."""
        return self.positives * (2 * self.negatives_below + self.negatives)

    def precision_hits(self) -> np.ndarray:
        """Each run's share of its column's average precision times its positives: the recall
        its positives gain (their count) times the precision at its score (the positives at or
        above it over every row at or above it)."""
        rows = (self.positives_total + self.negatives_total)[self.column]
        hits = self.positives_total[self.column] - self.positives_below
        reached = rows - self.positives_below - self.negatives_below
        return self.positives * (hits / np.maximum(reached, 1))

    def per_column(self, terms: np.ndarray) -> np.ndarray:
        """``terms`` of the runs summed per column of the block (in their own dtype)."""
        out = np.zeros(len(self.positives_total), dtype=terms.dtype)
        np.add.at(out, self.column, terms)
        return out


def roc_auc(scores, positive, comm=None, block_entries: int = BLOCK_ENTRIES) -> np.ndarray:
    """Each column's ROC-AUC over every rank's rows of ``scores`` [rows, T] (this rank's) and
    their 0/1 labels ``positive`` [rows, T]: NaN for a column without both a positive and a
    negative row. A collective over ``comm`` (None: this process alone); every rank gets the
    same array, the AUCs of the rows of all ranks together, exactly as ``tasks.roc_auc`` of
    them on one process."""
    return statistics(scores, positive, comm, block_entries)["auc"]


def average_precision(scores, positive, comm=None, block_entries: int = BLOCK_ENTRIES) -> np.ndarray:
    """Each column's average precision over every rank's rows, as ``roc_auc`` takes them: the
    sum over score thresholds (tied scores one threshold), highest first, of the recall gained
    times the precision there (scikit-learn's ``average_precision_score``); NaN for a column
    without a positive row. The terms are summed in another order than one process's, so
    the value is its to float64's rounding."""
    return statistics(scores, positive, comm, block_entries)["ap"]


def statistics(scores, positive, comm=None, block_entries: int = BLOCK_ENTRIES) -> dict:
    """``{"auc": ..., "ap": ...}``: each column's ``roc_auc`` and ``average_precision`` from one
    sort (a collective over ``comm``)."""
    scores, positive = _columns(scores), _columns(positive).astype(bool)
    width = scores.shape[1]
    twice_u, weighted = np.zeros(width, dtype=np.int64), np.zeros(width)
    p, n = np.zeros(width, dtype=np.int64), np.zeros(width, dtype=np.int64)
    for start, runs in sorted_blocks(scores, positive, comm, block_entries):
        block = slice(start, start + len(runs.positives_total))
        twice_u[block], weighted[block] = runs.per_column(runs.twice_u()), runs.per_column(runs.precision_hits())
        p[block], n[block] = runs.positives_total, runs.negatives_total
    return finished(summed(comm, twice_u), summed(comm, weighted), p, n)


def finished(twice_u: np.ndarray, weighted: np.ndarray, p: np.ndarray, n: np.ndarray) -> dict:
    """The AUCs and APs of columns of ``p`` positives and ``n`` negatives from the sums over
    every rank of ``Runs.twice_u`` and ``Runs.precision_hits``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (twice_u / 2.0) / (p * n).astype(np.float64)
        ap = weighted / p
    return {"auc": np.where((p > 0) & (n > 0), auc, np.nan), "ap": np.where(p > 0, ap, np.nan)}


def summed(comm, array: np.ndarray) -> np.ndarray:
    """``array`` summed over the ranks of ``comm`` (in its own dtype: int64 sums are exact)."""
    if _size(comm) == 1:
        return array
    return _to_numpy(comm.all_reduce(_tensor(array, comm)))


def sorted_blocks(scores: np.ndarray, positive: np.ndarray, comm=None, block_entries: int = BLOCK_ENTRIES):
    """``(first column, Runs)`` of each block of columns of this rank's ``scores`` [rows, T]
    and labels ``positive`` [rows, T] (bool), sorted over every rank of ``comm``. A collective:
    every rank calls it with the same T and iterates every block."""
    rows = _gathered(comm, np.array([len(scores)], dtype=np.int64)).reshape(-1)
    width = scores.shape[1]
    per_block = max(1, block_entries // max(1, int(rows.max())))
    for start in range(0, width, per_block):
        block = slice(start, min(width, start + per_block))
        yield start, _sorted(scores[:, block], positive[:, block], rows, comm)


def _sorted(scores: np.ndarray, positive: np.ndarray, rows: np.ndarray, comm) -> Runs:
    """One block of columns sorted over the ranks (module docstring, steps 1-4)."""
    width = scores.shape[1]
    ordered, runs = local_runs(scores, positive)
    if _size(comm) > 1 and rows.sum():
        splitters = _splitters(ordered, rows, comm)
        runs = _merged(_routed(runs, splitters, comm))
    column, value, pos, neg = runs
    totals = np.stack([np.bincount(column, pos, minlength=width), np.bincount(column, neg, minlength=width)])
    everyone = _gathered(comm, totals.astype(np.int64)[None]).reshape(-1, 2, width)  # [ranks, 2, columns]
    below_ranks = everyone[:_rank(comm)].sum(0)  # [2, columns]: positives, negatives
    column_start = np.searchsorted(column, np.arange(width))
    total = everyone.sum(0)
    return Runs(column, value, pos, neg, below_ranks[0][column] + _before(pos, column, column_start),
                below_ranks[1][column] + _before(neg, column, column_start), total[0], total[1])


def _before(counts: np.ndarray, column: np.ndarray, column_start: np.ndarray) -> np.ndarray:
    """Each run's ``counts`` summed over the runs before it in its column, on this rank."""
    before = np.cumsum(counts) - counts
    if not len(counts):
        return before
    return before - np.r_[before, before[-1] + counts[-1]][column_start][column]


def local_runs(scores: np.ndarray, positive: np.ndarray) -> tuple:
    """(each column sorted [rows, T], the runs of equal scores: their column, score, positives
    and negatives, in column then score order)."""
    rows, width = scores.shape
    order = np.argsort(scores, axis=0, kind="stable")
    ordered = np.take_along_axis(scores, order, 0)
    values = ordered.T.reshape(-1)  # column by column
    labels = np.take_along_axis(positive, order, 0).T.reshape(-1)
    column = np.repeat(np.arange(width, dtype=np.int64), rows)
    starts = np.ones(len(values), dtype=bool)
    starts[1:] = (values[1:] != values[:-1]) | (column[1:] != column[:-1])
    return ordered, _runs(column, values, labels.astype(np.int64), (~labels).astype(np.int64), starts)


def _runs(column, value, pos, neg, starts) -> tuple:
    """The runs that begin where ``starts`` is set: their column, score and summed counts."""
    at = np.flatnonzero(starts)
    if not len(at):
        return column[:0], value[:0], pos[:0], neg[:0]
    return column[at], value[at], np.add.reduceat(pos, at), np.add.reduceat(neg, at)


def _splitters(ordered: np.ndarray, rows: np.ndarray, comm) -> np.ndarray:
    """[P - 1, T]: the scores that bound the ranks' value ranges, per column (rank q takes
    scores s with ``splitters[q - 1] <= s < splitters[q]``): the quantiles of every rank's
    ``2 P`` evenly spaced scores, each standing for its rank's rows / (2 P). Every rank
    computes the same from the same all-gather."""
    ranks = _size(comm)
    per_rank = 2 * ranks
    mine = len(ordered)
    picked = np.full((per_rank, ordered.shape[1]), np.nan)  # a rank without rows: no weight
    if mine:
        picked = ordered[(2 * np.arange(per_rank) + 1) * mine // (2 * per_rank)]
    samples = _gathered(comm, picked)  # [P * 2P, T]
    weights = np.repeat(rows, per_rank)
    order = np.argsort(samples, axis=0, kind="stable")  # NaN last, with weight 0
    ascending = np.take_along_axis(samples, order, 0)
    reached = np.cumsum(weights[order], axis=0) * ranks  # in units of the total's share per rank
    total = int(rows.sum()) * per_rank
    at = [np.minimum((reached < q * total).sum(0), len(samples) - 1) for q in range(1, ranks)]
    return np.stack([ascending[i, np.arange(ordered.shape[1])] for i in at])


def _routed(runs: tuple, splitters: np.ndarray, comm) -> np.ndarray:
    """Every rank's runs that fall in this rank's value range, [m, 4] float64 (column, score,
    positives, negatives; counts below 2^53 are exact in float64), one all-to-all."""
    column, value, pos, neg = runs
    home = np.zeros(len(value), dtype=np.int64)
    for bound in splitters:  # searchsorted(splitters of its column, score, side="right")
        home += value >= bound[column]
    order = np.argsort(home, kind="stable")
    packed = np.stack([column, value, pos, neg], 1).astype(np.float64)[order]
    sizes = np.bincount(home, minlength=_size(comm)) * 4
    ones = [1] * comm.world_size
    arriving = comm.all_to_all(torch.tensor(sizes.tolist(), device=comm.device), ones, ones).tolist()
    got = comm.all_to_all(torch.from_numpy(packed.reshape(-1)).to(comm.device), sizes.tolist(), arriving)
    return got.cpu().numpy().reshape(-1, 4)


def _merged(got: np.ndarray) -> tuple:
    """The runs ``got`` from every rank, in column then score order, equal scores of a column
    (from different ranks) summed into one run."""
    column, value = got[:, 0].astype(np.int64), got[:, 1]
    order = np.lexsort((value, column))
    column, value = column[order], value[order]
    pos, neg = got[order, 2].astype(np.int64), got[order, 3].astype(np.int64)
    starts = np.ones(len(value), dtype=bool)
    starts[1:] = (value[1:] != value[:-1]) | (column[1:] != column[:-1])
    return _runs(column, value, pos, neg, starts)


# -- the communicator, or this process alone -------------------------------------------------------

def _size(comm) -> int:
    return 1 if comm is None else comm.world_size


def _rank(comm) -> int:
    return 0 if comm is None else comm.rank


def _tensor(array: np.ndarray, comm) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(comm.device)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.cpu().numpy()


def _gathered(comm, array: np.ndarray) -> np.ndarray:
    """Every rank's ``array`` (the same shape on each) concatenated along its first axis."""
    if _size(comm) == 1:
        return array
    return _to_numpy(comm.all_gather(_tensor(array, comm)))


def _columns(values) -> np.ndarray:
    """``values`` as a [rows, T] float64 (or bool) array: a vector is one column."""
    values = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if values.dtype != bool:
        values = values.astype(np.float64)
    return values[:, None] if values.ndim == 1 else values


__all__ = ["roc_auc", "average_precision", "statistics", "finished", "summed", "sorted_blocks", "local_runs", "Runs", "BLOCK_ENTRIES"]
