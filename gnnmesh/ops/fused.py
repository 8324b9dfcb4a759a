"""The Triton kernels (``_triton``) applied to an Adjacency and torch tensors.

They run on CUDA tensors of float32 when ``triton`` imports and ``GNNMESH_KERNELS`` is
``auto`` (or ``compiled``); ``GNNMESH_KERNELS=triton`` runs them on tensors of any device,
which on a CPU is Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is first
imported): how they are tested without a GPU. ``torch`` never runs them. Without triton every
op runs its torch implementation (cuSPARSE and index ops on CUDA, the compiled kernels on
CPU), silently: the results are the same to float rounding.

Every kernel owns its output rows and sums them in a fixed order, so results are the same
bits on every run (no atomics; a column's sums read the stored transpose of ``A``).
"""

from __future__ import annotations

import warnings

import torch

from ..graph import Adjacency
from . import compiled
from ._index import csr, transpose_perm
from .precision import REDUCED

_module: dict = {}

BLOCK_E = 32  # entries of a row per step of a program: one warp's worth of rows of z
MAX_BLOCK_F = 128  # columns of x per SpMM program: wider rows are split over programs


def _kernels():
    """The kernels' module, or None where triton does not import (checked once)."""
    if "kernels" not in _module:
        try:
            from . import _triton
        except ImportError:
            _triton = None
        _module["kernels"] = _triton
    return _module["kernels"]


class KernelFailed(RuntimeError):
    """A Triton kernel that did not compile or launch on this device: the caller runs the
    torch implementation instead (under ``GNNMESH_KERNELS=auto``; ``triton`` raises)."""


def _launch(kernel, grid, *args, **kwargs) -> None:
    """Run ``kernel`` on ``grid``. A kernel is compiled for the device at its first launch, so
    a device or driver it does not compile for shows only here: the process then warns once
    and runs torch's ops from now on (same results) rather than stopping a training run."""
    try:
        kernel[grid](*args, **kwargs)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as err:
        if compiled.choice() == "triton":
            raise
        _module["failed"] = True
        first_line = (str(err).strip().splitlines() or [""])[0][:200]
        warnings.warn(f"gnnmesh: the Triton kernels do not run here ({type(err).__name__}: {first_line}); "
                      "using torch's ops for the rest of this process (same results). GNNMESH_KERNELS=torch "
                      "skips them.", RuntimeWarning, stacklevel=3)
        raise KernelFailed(str(err)) from err


def available(*tensors: torch.Tensor, widened: bool = False) -> bool:
    """Whether the Triton kernels run on these tensors (float32, all on one device);
    ``widened``: or of a reduced precision, for an op that widens them first (``in_float32``)."""
    where = compiled.choice()
    if where == "torch" or compiled.switched_off() or _module.get("failed") or not tensors:
        return False
    floats = (torch.float32,) + (REDUCED if widened else ())
    if any(t.dtype not in floats or t.device != tensors[0].device for t in tensors):
        return False
    if where != "triton" and tensors[0].device.type != "cuda":
        return False
    return _kernels() is not None


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _heads(t: torch.Tensor) -> torch.Tensor:
    """Vertex data contiguous as ``[N, H, F]`` (``[N, F]`` is one head)."""
    t = t.contiguous()
    return t.unsqueeze(1) if t.dim() == 2 else t


def _columns(t: torch.Tensor) -> torch.Tensor:
    """Edge (or row) data contiguous as ``[E, H]`` (``[E]`` is one head)."""
    t = t.contiguous()
    return t.unsqueeze(1) if t.dim() == 1 else t


def _rows_of(adj: Adjacency, transpose: bool) -> int:
    return adj.shape[1 if transpose else 0]


def spmm(adj: Adjacency, values: torch.Tensor, x: torch.Tensor, transpose: bool) -> torch.Tensor:
    """``op(A) @ x`` for values ``[E]`` and x ``[N, F]``, or ``[E, H]`` and ``[N, H, F]``;
    a transpose reads A's values through its entry order, as the CPU kernels do."""
    xs, vals = _heads(x), _columns(values.to(x.dtype))
    n, heads, width = _rows_of(adj, transpose), xs.shape[1], xs.shape[2]
    out = x.new_empty((n,) + tuple(x.shape[1:]))
    if n == 0 or out.numel() == 0:
        return out.zero_()
    indptr, indices = csr(adj, transpose, x.device)
    perm = transpose_perm(adj, x.device) if transpose else indptr  # unread without a transpose
    block_f = min(_pow2(width), MAX_BLOCK_F)
    grid = (n, heads * -(-width // block_f))
    _launch(_kernels().spmm, grid, indptr, indices, vals, perm, xs, out, H=heads, F=width,
            HAS_PERM=transpose, BLOCK_E=BLOCK_E, BLOCK_F=block_f)
    return out


def edge_dot(adj: Adjacency, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``out[e] = <a[row(e)], b[col(e)]>`` over the last dim: ``[E]``, or ``[E, H]`` for 3-D inputs."""
    aa, bb = _heads(a), _heads(b)
    out = a.new_empty((adj.nnz,) + tuple(a.shape[1:-1]))
    if adj.nnz == 0:
        return out
    indptr, indices = csr(adj, False, a.device)
    _launch(_kernels().edge_dot, (adj.shape[0],), indptr, indices, aa, bb, out, **_sizes(aa))
    return out


MAX_TILE = 8192  # elements of a program's [entries, heads, columns] block of gathered rows


def _sizes(z: torch.Tensor) -> dict:
    """The attention kernels' block sizes: fewer entries a step for wide heads, so that a
    step's gathered rows stay within a program's registers."""
    heads, width = z.shape[1], z.shape[2]
    hp, fp = _pow2(heads), _pow2(width)
    return dict(H=heads, F=width, HP=hp, FP=fp, BLOCK_E=max(2, min(BLOCK_E, _pow2(MAX_TILE // (hp * fp) + 1) // 2)))


def attention(adj: Adjacency, z, s_dst, s_src, keep, slope: float, scale: float):
    """GAT's aggregation of ``z`` ``[N_src, H, F]`` by the row softmax of
    ``leaky_relu(s_dst[i] + s_src[j])`` (``[N, H]`` each), ``keep`` (``[E, H]`` bool, or None)
    dropping weights and scaling the rest by ``scale``: ``(out, row_max, row_sum)``, the
    last two what the backward recomputes the weights from."""
    rows, heads = adj.shape[0], z.shape[1]
    out = z.new_empty((rows,) + tuple(z.shape[1:]))
    row_max, row_sum = z.new_empty((rows, heads)), z.new_empty((rows, heads))
    if rows:
        indptr, indices = csr(adj, False, z.device)
        _launch(_kernels().attention_forward, (rows,), indptr, indices, z, s_dst, s_src,
                keep if keep is not None else indptr, out, row_max, row_sum, float(slope), float(scale),
                HAS_KEEP=keep is not None, **_sizes(z))
    return out, row_max, row_sum


def attention_backward(adj: Adjacency, z, s_dst, s_src, keep, slope: float, scale: float, out, row_max,
                       row_sum, grad_out):
    """``(grad z, grad s_dst, grad s_src)``: the rows' pass (grad s_dst, and each row's
    ``<grad_out[i], out[i]>``), then the columns' over ``A^T`` (grad z, grad s_src)."""
    rows, cols, heads = adj.shape[0], adj.shape[1], z.shape[1]
    grad_z, grad_s_dst, grad_s_src = torch.empty_like(z), torch.empty_like(s_dst), torch.empty_like(s_src)
    row_t = z.new_empty((rows, heads))
    has_keep, sizes = keep is not None, _sizes(z)
    indptr, indices = csr(adj, False, z.device)
    if rows:
        _launch(_kernels().attention_backward_rows, (rows,), indptr, indices, z, s_dst, s_src,
                keep if has_keep else indptr, grad_out, out, row_max, row_sum, row_t, grad_s_dst,
                float(slope), float(scale), HAS_KEEP=has_keep, **sizes)
    if cols:
        t_indptr, t_indices = csr(adj, True, z.device)
        perm = transpose_perm(adj, z.device) if has_keep else t_indptr  # the keep-mask is in A's order
        _launch(_kernels().attention_backward_columns, (cols,), t_indptr, t_indices, perm, z, s_dst, s_src,
                keep if has_keep else t_indptr, grad_out, row_max, row_sum, row_t, grad_z, grad_s_src,
                float(slope), float(scale), HAS_KEEP=has_keep, **sizes)
    return grad_z, grad_s_dst, grad_s_src
