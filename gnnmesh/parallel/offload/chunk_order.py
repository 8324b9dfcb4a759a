"""The plan's chunks and their order (HongTu, SIGMOD 2024, §4.1 and §5.1–5.3).

Each rank's destination rows are cut into K chunks; the chunks at one position on every
rank form a *batch* and run together, batches one after another. A chunk must load the
rows of its *neighbour set* (sorted unique global ids). Rows shared inside a batch are
loaded once (its *transition set* is the union) and rows shared by consecutive batches
stay loaded, so the order of chunks decides how much is loaded: ``reorganize`` is the
paper's two-phase greedy (Algorithm 4) that groups and sequences chunks to share rows.
It is a heuristic; the caller compares costs and keeps the original order when it loses.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

_BLOCK = 1 << 22  # id matches expanded at once in _overlaps; bounds its memory


def cut(weights: np.ndarray, k: int) -> np.ndarray:
    """Boundaries (length ``k + 1``, from 0 to ``len(weights)``) of ``k`` contiguous row
    ranges with balanced weight sums. Boundary ``j`` is the prefix-sum position nearest to
    ``j * total / k``, so it is off by at most half a row's weight and no chunk weighs more
    than ``total / k + max(weights)``. With more chunks than rows some chunks are empty."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    w = np.asarray(weights)
    if w.ndim != 1 or (w.size and w.min() < 0):
        raise ValueError("weights must be a 1-D array of non-negative numbers")
    prefix = np.concatenate([[0], np.cumsum(w)])
    scaled = prefix * k  # compare k * prefix with j * total: exact for integer weights
    targets = np.arange(1, k) * prefix[-1]
    above = np.searchsorted(scaled, targets, side="left")  # first prefix >= target
    below = np.maximum(above - 1, 0)
    nearer = np.where(targets - scaled[below] < scaled[above] - targets, below, above)
    return np.concatenate([[0], nearer, [w.size]]).astype(np.int64)


def overlap(a: np.ndarray, b: np.ndarray) -> int:
    """|a ∩ b| of two sorted unique arrays: the rows two chunks or batches can share."""
    if len(a) > len(b):
        a, b = b, a
    if len(a) == 0:
        return 0
    at = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return int(np.count_nonzero(b[at] == a))


def union(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Sorted unique int64 union: the rows a group of chunks loads once. A stable sort merges
    already sorted inputs in linear time, cheaper than a hash-based unique."""
    if len(arrays) == 0:
        return np.empty(0, dtype=np.int64)
    ids = np.concatenate([np.asarray(a, dtype=np.int64) for a in arrays])
    ids.sort(kind="stable")
    return ids[np.concatenate([[True], ids[1:] != ids[:-1]])] if len(ids) else ids


def _flatten(sets: Sequence[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """All ids of ``sets``, sorted, with the index of the set each came from."""
    ids = [np.asarray(s, dtype=np.int64) for s in sets]
    labels = np.repeat(np.arange(len(ids)), [len(s) for s in ids])
    flat = np.concatenate(ids) if ids else np.empty(0, np.int64)
    order = np.argsort(flat, kind="stable")  # merges the sorted runs; sorted keys keep
    return flat[order], labels[order]        # the join's binary searches cache-friendly


def _overlaps(rows: Sequence[np.ndarray], cols: Sequence[np.ndarray]) -> np.ndarray:
    """Matrix of |rows[i] ∩ cols[j]| by one sort-join: every id of ``rows`` is matched with
    the ``cols`` holding it, so the work follows the shared ids instead of costing
    ``len(rows) * len(cols)`` separate intersections (65536 for K = 256)."""
    (r_ids, r_lab), (c_ids, c_lab) = _flatten(rows), _flatten(cols)
    lo = np.searchsorted(c_ids, r_ids, side="left")
    n = np.searchsorted(c_ids, r_ids, side="right") - lo  # sets of cols holding the id
    hit = n > 0
    r_lab, lo, n = r_lab[hit], lo[hit], n[hit]
    out = np.zeros(len(rows) * len(cols), dtype=np.int64)
    ends = np.cumsum(n)
    marks = np.searchsorted(ends, np.arange(0, int(ends[-1]) if len(ends) else 0, _BLOCK),
                            side="right")
    starts = np.unique(np.append(marks, len(n)))
    for s, e in zip(starts[:-1], starts[1:]):
        reps = n[s:e]
        local = ends[s:e] - reps - (ends[s] - reps[0])  # first match's slot in this block
        pos = np.arange(int(ends[e - 1] - ends[s] + reps[0])) + np.repeat(lo[s:e] - local, reps)
        out += np.bincount(np.repeat(r_lab[s:e], reps) * len(cols) + c_lab[pos],
                           minlength=out.size)
    return out.reshape(len(rows), len(cols))


def _best(scores: np.ndarray, taken: np.ndarray) -> int:
    """Index of the largest score not yet taken; ties go to the lowest index."""
    return int(np.argmax(np.where(taken, -1, scores)))


def reorganize(neighbours: List[List[np.ndarray]]) -> List[List[int]]:
    """``order[r][b]``: the chunk of rank ``r`` that runs in batch position ``b``.

    Phase 1 groups chunks that share rows into one batch, so the batch loads them once:
    rank 0 keeps its order and seeds each batch's transition set; every further rank in
    turn gives each batch, in order, its unplaced chunk overlapping that set most. Phase 2
    chains batches so each follows the one it shares most rows with, which then stay
    loaded: start at batch 0 and repeatedly append the closest remaining batch."""
    if not neighbours:
        return []
    k = len(neighbours[0])
    if any(len(chunks) != k for chunks in neighbours):
        raise ValueError("every rank needs the same number of chunks")
    groups = [list(range(k))]
    transition = [np.asarray(s, dtype=np.int64) for s in neighbours[0]]
    for chunks in neighbours[1:]:
        # A batch's set changes only when it gets this rank's chunk, so one matrix serves.
        scores = _overlaps(transition, chunks)
        taken = np.zeros(k, dtype=bool)
        group = []
        for b in range(k):
            c = _best(scores[b], taken)
            taken[c] = True
            group.append(c)
            transition[b] = union([transition[b], chunks[c]])
        groups.append(group)
    chain = [0] if k else []
    if k > 1:
        shared = _overlaps(transition, transition)
        used = np.zeros(k, dtype=bool)
        used[0] = True
        while len(chain) < k:
            b = _best(shared[chain[-1]], used)
            used[b] = True
            chain.append(b)
    return [[group[b] for b in chain] for group in groups]
