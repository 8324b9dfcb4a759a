"""Index arrays of an Adjacency on a given device, built once per structure and device."""

from __future__ import annotations

import torch

from ..graph import Adjacency

_INT32_MAX = 2**31 - 1


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
        small = adj.nnz <= _INT32_MAX and max(adj.shape) <= _INT32_MAX
        dtype = torch.int32 if small else torch.int64
        return indptr.to(device=device, dtype=dtype), indices.to(device=device, dtype=dtype)
    return _cached(adj, ("csr", transpose, str(device)), build)
