"""The compiled CPU kernels (``_numba``) applied to an Adjacency and torch tensors.

They run for CPU tensors of float32/float64 when numba imports; otherwise each op uses its
torch implementation (cuSPARSE on CUDA; torch's CSR ops on CPU), which gives the same
results, and a CPU process without numba is told so once.

numba costs a process about 100 MiB of resident memory and half a second once loaded, more
than it saves on small graphs, whose aggregations take milliseconds on torch's ops: by
default (``GNNMESH_KERNELS=auto``) the compiled kernels run on adjacencies of at least
``MIN_ENTRIES`` entries, and numba loads on the first of them. ``GNNMESH_KERNELS=compiled``
runs them on every size, ``torch`` never (numba never loads). Inputs of any layout are made
contiguous; plain ``[N, F]`` vertex data and ``[E]`` edge data are handled as one head.
Outputs come from ``buffers``: pooled memory when a program turns pooling on (``gnnmesh
train`` does), so that epochs after the first fault in no pages.
"""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager

import numpy as np
import torch

from ..errors import ConfigError
from ..graph import Adjacency
from . import buffers
from ._index import bounds, csr, transpose_perm

_FLOATS = (torch.float32, torch.float64)
_module: dict = {}


MIN_ENTRIES = 1 << 18
_CHOICES = ("auto", "compiled", "torch", "triton")


def choice() -> str:
    """Where the compiled kernels run (``GNNMESH_KERNELS``): auto, compiled, torch, or triton
    (the GPU kernels on every device, ``fused``; the CPU's compiled kernels then never run)."""
    value = os.environ.get("GNNMESH_KERNELS", "").strip().lower() or "auto"
    if value not in _CHOICES:
        raise ConfigError(f"environment variable GNNMESH_KERNELS: {value!r} is not one of {', '.join(_CHOICES)}")
    return value


def _kernels():
    if "kernels" not in _module:
        if "numba" not in sys.modules:
            # numba sizes its thread pool when it loads (default: every core). Idle pool threads
            # still take turns on the cores, so ranks sharing a machine would slow each other:
            # no more threads than this process computes with, unless the user says otherwise.
            os.environ.setdefault("NUMBA_NUM_THREADS", str(max(1, torch.get_num_threads())))
        try:
            from . import _numba
        except (ImportError, OSError) as err:  # numba missing, or built for another numpy
            _numba = None
            warnings.warn(f"gnnmesh: compiled CPU sparse kernels unavailable ({err}); using torch's "
                          "sparse ops (same results, slower on CPU). Install numba to enable them.",
                          RuntimeWarning, stacklevel=4)
        _module["kernels"] = _numba
    return _module["kernels"]


def load() -> bool:
    """Load the compiled kernels now rather than on the first large adjacency (their cost is
    code, the same in every process, not data); whether they can run. A kernel's first call
    per argument type starts numba's compiler and thread pool (about 55 MiB) and, on a fresh
    install, compiles it (seconds, more memory): every kernel runs here once on a tiny graph,
    with the types of float32 training on a graph of under 2^31 entries."""
    if choice() in ("torch", "triton") or _kernels() is None:
        return False
    if "warm" not in _module:
        _warm()
        _module["warm"] = True
    return True


def _warm() -> None:
    adj = Adjacency.from_coo([0, 1], [1, 0], (2, 2), values=np.ones(2))
    rows, edges = torch.ones(2, 1), torch.ones(2)
    for transpose in (False, True):  # a transpose reads the values through a permutation
        spmm(adj, edges, rows, transpose)
        row_sum(adj, edges, transpose)
    edge_dot(adj, rows, rows)
    edge_add(adj, rows, rows)
    edge_softmax_backward(adj, edge_softmax(adj, edges), edges)


@contextmanager
def disabled():
    """Run every op on its torch implementation inside the block (to compare the two)."""
    _module["off"] = _module.get("off", 0) + 1
    try:
        yield
    finally:
        _module["off"] -= 1


def switched_off() -> bool:
    """Whether ops run on their torch implementations alone here (inside ``disabled()``)."""
    return bool(_module.get("off"))


def available(adj: Adjacency, *tensors: torch.Tensor) -> bool:
    """Whether the compiled kernels run on ``adj`` with these tensors."""
    if _module.get("off") or not all(t.device.type == "cpu" and t.dtype in _FLOATS for t in tensors):
        return False
    return len({t.dtype for t in tensors}) == 1 and wanted(adj.nnz) and _kernels() is not None


def wanted(entries: int) -> bool:
    """Whether an adjacency of ``entries`` entries is to run on the compiled kernels."""
    where = choice()
    return where == "compiled" or (where == "auto" and entries >= MIN_ENTRIES)


def _arrays(adj: Adjacency, transpose: bool):
    """``(indptr, indices, bounds)`` of A or A^T as numpy arrays, and its row count."""
    crow, col = csr(adj, transpose, "cpu")
    return crow.numpy(), col.numpy(), bounds(adj, transpose), adj.shape[1 if transpose else 0]


def _order(adj: Adjacency, transpose: bool):
    """Where op(A)'s entries keep their values in A's order: None for A itself."""
    return transpose_perm(adj, "cpu").numpy() if transpose else None


def _run(kernel, *args) -> None:
    _kernels().configure(torch.get_num_threads())
    kernel(*(a.detach().numpy() if torch.is_tensor(a) else a for a in args))


def _heads(t: torch.Tensor) -> torch.Tensor:
    """Vertex data contiguous as ``[N, H, F]`` (``[N, F]`` is one head)."""
    t = t.contiguous()
    return t.unsqueeze(1) if t.dim() == 2 else t.flatten(2)


def _columns(t: torch.Tensor) -> torch.Tensor:
    """Edge (or row) data contiguous as ``[E, H]`` (``[E]`` is one head)."""
    t = t.contiguous()
    return t.unsqueeze(1) if t.dim() == 1 else t.flatten(1)


def spmm(adj: Adjacency, values: torch.Tensor, x: torch.Tensor, transpose: bool, pooled: bool = True) -> torch.Tensor:
    """``op(A) @ x`` for values ``[E]`` and x ``[N, F]``, or ``[E, H]`` and ``[N, H, F]``.
    ``pooled`` False: the output is memory of its own, given back when freed, for an output
    whose size recurs too seldom to be worth keeping idle between uses."""
    indptr, indices, parts, rows = _arrays(adj, transpose)
    shape = (rows,) + tuple(x.shape[1:])
    out = buffers.empty(shape, x.dtype) if pooled else x.new_empty(shape)
    _run(_kernels().spmm, indptr, indices, _columns(values.to(x.dtype)), _order(adj, transpose), _heads(x),
         _heads(out), parts)
    return out


def edge_dot(adj: Adjacency, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``out[e] = <a[row(e)], b[col(e)]>`` over the last dim: ``[E]``, or ``[E, H]`` for 3-D inputs."""
    indptr, indices, parts, _ = _arrays(adj, False)
    out = buffers.empty((adj.nnz,) + tuple(a.shape[1:-1]), a.dtype)
    _run(_kernels().edge_dot, indptr, indices, _heads(a), _heads(b), _columns(out), parts)
    return out


def edge_add(adj: Adjacency, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``out[e] = a[row(e)] + b[col(e)]`` for ``a``, ``b`` of the same row shape."""
    indptr, indices, parts, _ = _arrays(adj, False)
    out = buffers.empty((adj.nnz,) + tuple(a.shape[1:]), a.dtype)
    _run(_kernels().edge_add, indptr, indices, _columns(a), _columns(b), _columns(out), parts)
    return out


def row_sum(adj: Adjacency, values: torch.Tensor, transpose: bool) -> torch.Tensor:
    """Sum of the edge ``values`` over each row of op(A): ``[rows, *values.shape[1:]]``."""
    indptr, _, parts, rows = _arrays(adj, transpose)
    out = buffers.empty((rows,) + tuple(values.shape[1:]), values.dtype)
    _run(_kernels().row_sum, indptr, _columns(values), _order(adj, transpose), _columns(out), parts)
    return out


def edge_softmax(adj: Adjacency, scores: torch.Tensor) -> torch.Tensor:
    """Softmax of ``scores`` (``[E]`` or ``[E, H]``) over each row's entries."""
    indptr, _, parts, _ = _arrays(adj, False)
    out = buffers.empty(scores.shape, scores.dtype)
    _run(_kernels().softmax, indptr, _columns(scores), _columns(out), parts)
    return out


def edge_softmax_backward(adj: Adjacency, out: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The scores' gradient from the softmax ``out`` and its gradient ``grad``."""
    indptr, _, parts, _ = _arrays(adj, False)
    result = buffers.empty(out.shape, out.dtype)
    _run(_kernels().softmax_backward, indptr, _columns(out), _columns(grad), _columns(result), parts)
    return result
