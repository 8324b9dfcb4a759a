"""Partition quality: what one layer of 1D-partitioned SpMM communicates and computes.

Forward, the owner of column j sends row j once to every other part whose rows reference
j; backward moves the same rows the other way. So the volume per layer (rows, one
direction) is the connectivity - 1 cut of the column-net hypergraph, which
``connectivity_minus_one`` computes straight from that definition, as a cross-check.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse as sp

from ..graph import Adjacency
from ..transforms import row_blocks
from .base import as_adjacency, csr_arrays
from .halo import check_assignment


def quality(adj, partition, feature_bytes: Optional[int] = None) -> dict:
    """Metrics of ``partition`` (a Partition, or an assignment array) on operator ``adj``.

    Volumes are rows per layer in the forward direction (the backward pass moves as many);
    messages are point-to-point messages per layer and direction. With ``feature_bytes``
    (bytes of one row) the volumes are also given in bytes.
    """
    adj = as_adjacency(adj)
    parts = getattr(partition, "parts", None)
    assignment, parts = check_assignment(partition, parts, adj.shape[0])
    indptr, indices = csr_arrays(adj)
    # one transfer per distinct (column, reading part) with the reader not the owner, as
    # sorted keys column * parts + reader
    transfers = _transfers(indptr, indices, assignment, parts)
    src, dst = assignment[transfers // parts], transfers % parts
    send = np.bincount(src, minlength=parts)
    recv = np.bincount(dst, minlength=parts)
    links = np.unique(src * parts + dst)  # (sender, receiver) pairs: one message each
    del src, dst
    msg_sent = np.bincount(links // parts, minlength=parts)
    msg_recv = np.bincount(links % parts, minlength=parts)
    load = np.bincount(assignment, weights=np.diff(indptr) + 1, minlength=parts)  # nnz + rows
    sizes = np.bincount(assignment, minlength=parts)
    out = {
        "parts": parts,
        "volume_total": int(transfers.shape[0]),
        "volume_avg": float(transfers.shape[0] / parts),
        "send_volume_max": int(send.max()),
        "recv_volume_max": int(recv.max()),
        "messages_total": int(links.shape[0]),
        "messages_avg": float(links.shape[0] / parts),
        "messages_max": int(msg_sent.max()),
        "recv_messages_max": int(msg_recv.max()),
        "compute_load_max": int(load.max()),
        "compute_load_mean": float(load.mean()),
        "compute_imbalance": float(load.max() / load.mean() - 1.0),
        "nodes_min": int(sizes.min()),
        "nodes_max": int(sizes.max()),
        "node_imbalance": float(sizes.max() / sizes.mean() - 1.0),
        "seconds": getattr(partition, "seconds", None),
    }
    if feature_bytes is not None:
        out["bytes_per_layer"] = int(out["volume_total"] * feature_bytes)
        out["send_bytes_max"] = int(out["send_volume_max"] * feature_bytes)
        out["recv_bytes_max"] = int(out["recv_volume_max"] * feature_bytes)
    return out


def _transfers(indptr, indices, assignment, parts) -> np.ndarray:
    """Sorted distinct keys ``column * parts + reader`` over entries whose column another
    part owns, gathered block of rows by block of rows so that temporaries stay a block's
    size (the whole-graph version peaked at ~6x the index array)."""
    keys = []
    for lo, hi in row_blocks(indptr):
        cols = indices[indptr[lo]:indptr[hi]]
        reader = np.repeat(assignment[lo:hi], np.diff(indptr[lo:hi + 1]))
        cut = assignment[cols] != reader
        keys.append(np.unique(cols[cut] * parts + reader[cut]))
    return np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)


def connectivity_minus_one(adj: Adjacency, assignment) -> int:
    """Sum over the nets of the column-net hypergraph of (parts the net touches - 1).

    Net j has pins {j} and every i with A[i, j] != 0; the self pin makes the owner of j
    count even when none of its rows reference j.
    """
    adj = as_adjacency(adj)
    n = adj.shape[0]
    assignment, parts = check_assignment(assignment, None, n)
    indptr, indices = csr_arrays(adj)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    net = np.concatenate([indices, np.arange(n, dtype=np.int64)])
    pin = np.concatenate([rows, np.arange(n, dtype=np.int64)])
    return cut_volume(net, assignment[pin], n, parts)


def cut_volume(net: np.ndarray, pin_part: np.ndarray, nets: int, parts: int) -> int:
    """Sum over ``nets`` nets of (parts the net touches - 1), a net with no pins counting 0,
    from its pins as (net, part of the pin) pairs (repeats allowed)."""
    touches = sp.csr_matrix((np.ones(net.shape[0], dtype=np.int8), (net, pin_part)),
                            shape=(nets, parts))
    touches.sum_duplicates()
    lam = touches.getnnz(axis=1)
    return int(lam.sum() - np.count_nonzero(lam))
