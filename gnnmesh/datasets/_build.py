"""Turning parsed arrays into a validated Graph: edge de-duplication, symmetrisation,
self-loop removal and seeded random splits, shared by every loader and generator."""

from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import GraphError
from ..graph import Adjacency, sparse_csr

MASKS = ("train_mask", "val_mask", "test_mask")


def adjacency_from_edges(src, dst, num_nodes: int, *, weights=None, symmetrize: bool = False,
                         drop_self_loops: bool = False) -> Adjacency:
    """CSR adjacency with an entry ``A[dst, src]`` per edge ``src -> dst``.

    Unweighted duplicates collapse to one edge. Weighted duplicates are summed (a repeated
    line of a file adds up, as MatrixMarket does); when symmetrising, a pair present in both
    directions keeps the larger weight, so listing an edge both ways does not double it.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    n = int(num_nodes)
    if drop_self_loops:
        keep = src != dst
        if not keep.all():
            src, dst = src[keep], dst[keep]
            weights = None if weights is None else np.asarray(weights)[keep]
    if weights is not None:
        mat = sp.csr_matrix((np.asarray(weights, dtype=np.float64), (dst, src)), shape=(n, n))
        mat.sum_duplicates()
        adj = Adjacency.from_scipy(mat, weighted=True)
        return adj.symmetrized() if symmetrize else adj
    if symmetrize:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    return adjacency_from_keys(dst * n + src, n)


def adjacency_from_keys(keys: np.ndarray, num_nodes: int, *, assume_unique: bool = False,
                        presorted: bool = False) -> Adjacency:
    """Unweighted CSR from ``row * n + col`` keys. Sorting the keys orders entries by row,
    then column, which is exactly CSR order, so no scipy round trip (and no float copy of
    the structure) is needed: this matters for the 10M-edge generators. ``presorted``:
    the keys are already sorted and unique."""
    n = int(num_nodes)
    if n > 3_000_000_000:
        raise GraphError(f"{n} nodes: too many for int64 edge keys")
    keys = np.asarray(keys, dtype=np.int64)
    if not presorted:
        keys = np.sort(keys) if assume_unique else sorted_unique(keys)
    if n == 0:
        keys = keys[:0]
    rows = keys // max(n, 1)
    cols = keys - rows * n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return Adjacency(torch.from_numpy(indptr), torch.from_numpy(cols), None, (n, n))


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique`` for int64 keys by sort + compare: numpy 2.3+'s hash-based unique is
    several times slower than this on tens of millions of keys."""
    a = np.sort(a)
    if a.size < 2:
        return a
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def encode_labels(values: list):
    """Class ids for raw label values: integers stay as they are, booleans become 0/1 and
    strings are numbered in sorted order (their names go to ``meta['class_names']``)."""
    if all(isinstance(v, (int, np.integer)) for v in values):
        return np.asarray(values, dtype=np.int64), None
    lowered = {str(v).strip().lower() for v in values}
    if lowered <= {"true", "false"}:
        return np.array([str(v).strip().lower() == "true" for v in values], dtype=np.int64), \
            ["False", "True"]
    names = sorted({str(v) for v in values})
    index = {name: i for i, name in enumerate(names)}
    return np.array([index[str(v)] for v in values], dtype=np.int64), names


def check_fractions(train_frac: float, val_frac: float) -> None:
    for key, value in (("train_frac", train_frac), ("val_frac", val_frac)):
        if not 0.0 <= value <= 1.0:
            raise GraphError(f"option '{key}' must be in [0, 1], got {value}")
    if train_frac + val_frac > 1.0 + 1e-9:
        raise GraphError(f"options 'train_frac' + 'val_frac' must be <= 1, got "
                         f"{train_frac} + {val_frac}")


def random_split(num_nodes: int, y: Optional[np.ndarray], train_frac: float, val_frac: float,
                 seed: int) -> tuple[dict, dict]:
    """Seeded train/val/test masks; the rest of the nodes after train and val go to test.

    With labels the split is stratified: every class is shuffled on its own and cut at the
    same fractions (rounded per class), so rare classes still reach the training set.
    Returns the masks (as tensors) and a description for ``graph.meta['split']``.
    """
    check_fractions(train_frac, val_frac)
    rng = np.random.default_rng(seed)
    order = rng.permutation(num_nodes)
    if y is None:
        groups = np.zeros(num_nodes, dtype=np.int64)
    else:  # each class by its rank among the labels present: as many groups as nodes at most, whatever
        # the ids (a label of 10**9 would make a count per id up to it); the same order as the ids
        groups = np.unique(np.asarray(y, dtype=np.int64), return_inverse=True)[1].reshape(-1)
    order = order[np.argsort(groups[order], kind="stable")]  # by class, shuffled within
    sizes = np.bincount(groups, minlength=1)
    first = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    g = groups[order]
    rank = np.arange(num_nodes) - first[g]
    n_train = np.floor(sizes * train_frac + 0.5).astype(np.int64)
    n_val = np.minimum(np.floor(sizes * val_frac + 0.5).astype(np.int64), sizes - n_train)
    part = np.full(num_nodes, 2, dtype=np.int8)
    part[rank < n_train[g] + n_val[g]] = 1
    part[rank < n_train[g]] = 0
    which = np.empty(num_nodes, dtype=np.int8)
    which[order] = part
    masks = {m: torch.from_numpy(which == i) for i, m in enumerate(MASKS)}
    info = {"kind": "random-stratified" if y is not None else "random", "seed": int(seed),
            "train_frac": float(train_frac), "val_frac": float(val_frac),
            "test_frac": round(1.0 - train_frac - val_frac, 12),
            "sizes": [int(masks[m].sum()) for m in MASKS]}
    return masks, info


def index_mask(num_nodes: int, ids) -> torch.Tensor:
    mask = torch.zeros(num_nodes, dtype=torch.bool)
    mask[torch.as_tensor(np.asarray(ids, dtype=np.int64))] = True
    return mask


def csr_features(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], mode: str):
    """Binary features from (node, feature id) pairs, as a dense float32 tensor
    (``mode='dense'``) or a torch sparse CSR tensor (``'sparse'``)."""
    mat = sp.csr_matrix((np.ones(rows.shape[0], dtype=np.float32), (rows, cols)), shape=shape)
    mat.sum_duplicates()
    mat.data[:] = 1.0  # a feature listed twice for a node is still a binary feature
    if mode == "sparse":
        return sparse_csr(mat.indptr, mat.indices, mat.data, shape)
    dense = np.zeros(shape, dtype=np.float32)
    dense[rows, cols] = 1.0
    return torch.from_numpy(dense)
