"""How well held-out pairs are scored: each positive against its negatives.

- ``mrr``: the mean reciprocal rank of each positive among itself and its K negatives;
- ``hits@K``: the share of positives ranked K-th or better;
- ``auc``: ROC-AUC of every positive's score against every negative's;
- ``ap``: average precision over the same scores.

A positive tied with some negatives takes the mean of its best and worst rank among them, as
OGB's evaluator does, and tied scores share their mean rank in the AUC, so no metric depends
on the order pairs are listed in.

On several ranks (``ranks_link_metrics``, ``ranks_shared_link_metrics``) each rank scores the
positives whose source it owns, with their negatives, and no rank holds every score: MRR and
Hits@K are sums over positives, each positive ranked on its own rank, summed by one
all-reduce; the AUC and AP come from the distributed sort of every score (``gnnmesh.auc``),
as does each positive's rank among negatives shared by the whole split. Every rank holds the
same numbers: the AUC and Hits@K the single process's exactly, MRR and AP to float64's
rounding (their terms are summed in another order).

Another strategy or rank count computes every score to float32's rounding of the single
process's (its sums are taken in another order), so a metric is the single process's unless
two scores closer than that rounding are ordered the other way: the metric then moves by
that one comparison's weight (1 / (positives x negatives) for the AUC).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from .. import auc as spread
from ..tasks import LinkTask

SELECTION = LinkTask.metric


def ranks(positive: np.ndarray, negatives: np.ndarray) -> np.ndarray:
    """Each positive's rank (1-based) among itself and its row of ``negatives`` ([E, K])."""
    above = (negatives > positive[:, None]).sum(1)
    level = (negatives == positive[:, None]).sum(1)
    return 1.0 + above + level / 2.0


def auc(positive: np.ndarray, negative: np.ndarray) -> float:
    if not len(positive) or not len(negative):
        return float("nan")
    r = rankdata(np.concatenate([positive, negative]))[:len(positive)]
    return float((r.sum() - len(positive) * (len(positive) + 1) / 2) / (len(positive) * len(negative)))


def average_precision(positive: np.ndarray, negative: np.ndarray) -> float:
    """Sum over score thresholds (tied scores one threshold) of recall gained times precision."""
    if not len(positive):
        return float("nan")
    scores = np.concatenate([positive, negative])
    truth = np.concatenate([np.ones(len(positive)), np.zeros(len(negative))])
    order = np.argsort(-scores, kind="stable")
    scores, truth = scores[order], truth[order]
    last = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]  # each threshold's last pair
    hits = np.cumsum(truth)[last]
    precision = hits / (last + 1)
    gained = np.diff(np.r_[0.0, hits]) / len(positive)
    return float((gained * precision).sum())


def link_metrics(positive: np.ndarray, negatives: np.ndarray, hits: tuple) -> dict:
    """The metrics of one split from its positives' scores [E] and their negatives' [E, K]."""
    if not len(positive):
        return {SELECTION: float("nan"), **{f"hits@{k}": float("nan") for k in hits},
                "auc": float("nan"), "ap": float("nan")}
    r = ranks(positive, negatives)
    out = {SELECTION: float((1.0 / r).mean())}
    out.update({f"hits@{k}": float((r <= k).mean()) for k in hits})
    flat = negatives.reshape(-1)
    out.update(auc=auc(positive, flat), ap=average_precision(positive, flat))
    return out


def shared_link_metrics(positive: np.ndarray, negative: np.ndarray, hits: tuple) -> dict:
    """The metrics of a split whose positives [E] are all ranked against the same negatives
    [E'] (OGB's collab and ddi): MRR from each positive's rank among them (ties as in
    ``ranks``), and OGB's Hits@K, the share of positives scored above the K-th best negative
    (every positive when there are fewer than K negatives)."""
    if not len(positive):
        return link_metrics(positive, np.zeros((0, 0)), hits)
    ordered = np.sort(negative)
    below = np.searchsorted(ordered, positive, side="left")
    level = np.searchsorted(ordered, positive, side="right") - below
    r = 1.0 + (len(ordered) - below - level) + level / 2.0
    out = {SELECTION: float((1.0 / r).mean())}
    for k in hits:
        out[f"hits@{k}"] = 1.0 if len(ordered) < k else float((positive > ordered[-k]).mean())
    out.update(auc=auc(positive, negative), ap=average_precision(positive, negative))
    return out


def ranks_link_metrics(positive: np.ndarray, negatives: np.ndarray, hits: tuple, comm=None) -> dict:
    """``link_metrics`` of every rank's positives together, from this rank's positives' scores
    [m] and their negatives' [m, K]: a collective over ``comm`` (None: this process alone),
    the same numbers on every rank."""
    r = ranks(positive, negatives)
    sums = _summed(comm, [(1.0 / r).sum(), *((r <= k).sum() for k in hits), len(r)])
    if not sums[-1]:
        return link_metrics(positive[:0], np.zeros((0, 0)), hits)
    out = {SELECTION: float(sums[0] / sums[-1]), **{f"hits@{k}": float(sums[1 + i] / sums[-1]) for i, k in enumerate(hits)}}
    return {**out, **_auc_ap(positive, negatives.reshape(-1), comm)}


def ranks_shared_link_metrics(positive: np.ndarray, negative: np.ndarray, hits: tuple, comm=None) -> dict:
    """``shared_link_metrics`` of every rank's positives [m] (this rank's scores) against every
    rank's negatives [m'] (this rank's share of the shared ones): a collective over ``comm``.
    Each positive's rank among the negatives comes from one distributed sort of them all (the
    negatives above a score are the column's less those below it and those tied), as do the
    AUC and the AP."""
    scores = np.concatenate([positive, negative])[:, None]
    labels = (np.arange(len(scores)) < len(positive))[:, None]
    runs = next(iter(spread.sorted_blocks(scores, labels, comm)))[1]  # one column: one block
    above = runs.negatives_total[0] - runs.negatives_below - runs.negatives
    terms = [(runs.positives / (1.0 + above + runs.negatives / 2.0)).sum()]
    terms += [runs.positives[above + runs.negatives < k].sum() for k in hits]  # OGB's: fewer than K at or above
    terms.append(runs.per_column(runs.precision_hits())[0])
    sums = _summed(comm, terms)
    count = int(runs.positives_total[0])
    if not count:
        return link_metrics(positive[:0], np.zeros((0, 0)), hits)
    out = {SELECTION: float(sums[0] / count), **{f"hits@{k}": float(sums[1 + i] / count) for i, k in enumerate(hits)}}
    finished = spread.finished(spread.summed(comm, runs.per_column(runs.twice_u())), sums[-1:], runs.positives_total,
                               runs.negatives_total)
    return {**out, "auc": float(finished["auc"][0]), "ap": float(finished["ap"][0])}


def _auc_ap(positive: np.ndarray, negative: np.ndarray, comm) -> dict:
    """``auc`` and ``average_precision`` of every rank's ``positive`` and ``negative`` scores."""
    scores = np.concatenate([positive, negative])[:, None]
    labels = (np.arange(len(scores)) < len(positive))[:, None]
    got = spread.statistics(scores, labels, comm)
    return {"auc": float(got["auc"][0]), "ap": float(got["ap"][0])}


def _summed(comm, values: list) -> np.ndarray:
    """``values`` (float64) summed over the ranks of ``comm``."""
    return spread.summed(comm, np.array([float(v) for v in values]))
