"""Index arrays of an Adjacency on a given device, built once per structure and device."""

from __future__ import annotations

import numpy as np
import torch

from ..graph import Adjacency, fits_int32


def _cached(adj: Adjacency, key, build):
    cache = adj._structure_cache()
    if key not in cache:
        cache[key] = build()
    return cache[key]


def rows(adj: Adjacency, device) -> torch.Tensor:
    """Destination row of every stored entry."""
    return _cached(adj, ("row", str(device)), lambda: adj.row().to(device))


def cols(adj: Adjacency, device) -> torch.Tensor:
    """Source column of every stored entry."""
    return _cached(adj, ("col", str(device)), lambda: adj.indices.to(device))


def transpose_perm(adj: Adjacency, device) -> torch.Tensor:
    """Entry order of A^T in terms of A's entries."""
    return _cached(adj, ("perm", str(device)), lambda: adj.transpose_structure()[2].to(device))


def csr(adj: Adjacency, transpose: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(crow, col) of A or A^T, int32 when the sizes allow (faster in MKL and cuSPARSE)."""
    def build():
        indptr, indices = adj.transpose_structure()[:2] if transpose else (adj.indptr, adj.indices)
        dtype = torch.int32 if fits_int32(adj.nnz, *adj.shape) else torch.int64
        return indptr.to(device=device, dtype=dtype), indices.to(device=device, dtype=dtype)
    return _cached(adj, ("csr", transpose, str(device)), build)


_TASKS_PER_THREAD = 16  # slack for rows too long to split evenly and for busy threads


def bounds(adj: Adjacency, transpose: bool) -> np.ndarray:
    """Row ranges of A (or A^T) of about equal work, ``_TASKS_PER_THREAD`` per torch thread:
    ``[0, r_1, ..., rows]``. A row costs its entries plus one (writing its output), so the
    split follows the entries, not the row count, on graphs where few rows hold most."""
    tasks = _TASKS_PER_THREAD * torch.get_num_threads()

    def build():
        indptr = csr(adj, transpose, "cpu")[0].numpy().astype(np.int64)
        rows = indptr.shape[0] - 1
        cost = indptr[1:] + np.arange(1, rows + 1)  # work of rows [0, r] inclusive
        total = int(cost[-1]) if rows else 0
        cuts = np.searchsorted(cost, np.arange(1, tasks) * (total / tasks), side="left")
        return np.unique(np.concatenate(([0], cuts, [rows]))).astype(np.int64)
    return _cached(adj, ("bounds", transpose, tasks), build)
