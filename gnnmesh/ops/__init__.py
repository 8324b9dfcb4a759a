"""Sparse kernels with autograd: the three primitives every model is written with, and GAT's
attention, their composition, as one op (fused into Triton kernels on CUDA)."""

import torch

from ._index import bounds, cols, csr, rows, transpose_perm
from .attention import attention
from .softmax import edge_softmax
from .spmm import spmm
from .sddmm import sddmm


def edge_sum(adj, messages: torch.Tensor) -> torch.Tensor:
    """Per-entry rows ``messages`` (``[nnz, ...]``) of ``A`` summed into their rows:
    ``out[i] = sum_{e in row i} messages[e]`` (autograd: a gather of the rows' gradients)."""
    if messages.shape[0] != adj.nnz:
        raise ValueError(f"edge_sum: {messages.shape[0]} messages for {adj.nnz} edges")
    out = messages.new_zeros((adj.shape[0],) + tuple(messages.shape[1:]))
    return out.index_add(0, rows(adj, messages.device), messages)


def index(adj, device) -> None:
    """Build, now, the index arrays the kernels would build on first use of ``adj`` (its
    CSR and transpose, entry rows and columns, the CPU kernels' row ranges) on ``device``."""
    for transpose in (False, True):
        csr(adj, transpose, device)
        if torch.device(device).type == "cpu":
            bounds(adj, transpose)
    transpose_perm(adj, device)
    rows(adj, device)
    cols(adj, device)


__all__ = ["spmm", "sddmm", "edge_softmax", "attention", "edge_sum", "index"]
