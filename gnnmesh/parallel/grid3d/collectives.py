"""The collectives of the 3D algorithm as autograd functions (Plexus Algorithms 1 and 2).

Convention: a tensor replicated along a grid axis carries, on every replica, the full
gradient. An op whose replicas each do a different part of the work with a replicated
input (an SpMM with one row block of A, a GEMM with one column block of W) gets only a
partial gradient back, so the op that made the input replicated sums it over that axis
in backward.

The last layer's output reaches the ranks that score it in the one all-to-all of an epoch
(``ToLossRows``), along the route ``logit_route`` works out from the grid's blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ...comm import Comm
from ...graph import Adjacency
from ...layout.grid import roles
from ...layout.ranges import cut, sizes
from ...ops.precision import in_float32
from ...ops.profile import phase
from ...ops.spmm import multiply
from .blocks import GridBlocks


def _spmm(adj: Adjacency, x: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    rows = adj.shape[1] if transpose else adj.shape[0]
    if rows == 0 or x.shape[1] == 0 or adj.nnz == 0:
        return x.new_zeros(rows, x.shape[1])
    with phase("aggregate"):
        return multiply(adj, adj.values, x, transpose=transpose)


def _all_reduce(comm: Comm, tensor: torch.Tensor, name: str) -> torch.Tensor:
    with comm.phase(name):
        return comm.all_reduce(tensor)


class Replicated(torch.autograd.Function):
    """A later layer's input, replicated along its rows axis: identity; backward sums the
    partial input gradients of the row blocks (§3.2: the reduce-scatter becomes an all-reduce)."""

    @staticmethod
    def forward(ctx, h, comm: Comm):
        ctx.comm = comm
        return h.view_as(h)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(ctx.comm, grad.clone(), "df_allreduce"), None


class Aggregate(torch.autograd.Function):
    """``H = sum over the cols axis of A_block @ F`` (Algorithm 1 lines 4-5), one row block of
    A at a time: each block's all-reduce starts when its SpMM ends and runs while the next
    block multiplies (§5.2). Backward: the GEMM's partial dL/dH is summed over the same
    axis, then dL/dF = A_block^T dL/dH (Algorithm 2 lines 6-7)."""

    @staticmethod
    def forward(ctx, f, adj: Adjacency, row_blocks: list, comm: Comm):
        ctx.adj, ctx.comm = adj, comm
        parts, pending = [], []
        for block in row_blocks:
            part = _spmm(block, f)
            with comm.phase("aggregate_allreduce"):
                pending.append(comm.all_reduce_async(part))
            parts.append(part)
        with comm.phase("aggregate_allreduce"):
            comm.wait(pending)
        return torch.cat(parts) if parts else f.new_zeros(0, f.shape[1])

    @staticmethod
    def backward(ctx, grad):
        grad = _all_reduce(ctx.comm, grad.clone(), "dh_allreduce")
        return _spmm(ctx.adj, grad, transpose=True), None, None, None


class PartialSum(torch.autograd.Function):
    """``Q = sum over the feats axis of H W_block`` (Algorithm 1 line 9). The result is
    replicated with the full gradient on every replica, so backward is the identity."""

    @staticmethod
    def forward(ctx, q, comm: Comm):
        ctx.mark_dirty(q)  # summed in place: q is a fresh GEMM output nothing else keeps
        return _all_reduce(comm, q, "gemm_allreduce")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ScatterColumns(torch.autograd.Function):
    """``Q = sum over an axis of P``, of which each rank keeps its column block (``sizes``:
    the blocks' widths, in the axis's rank order): the reduce-scatter of a GEMM whose
    replicas each multiply a different column block of their input (GIN's second linear
    map). Each rank then uses only its own block, so backward gathers the blocks' gradients."""

    @staticmethod
    def forward(ctx, p, comm: Comm, sizes: list):
        ctx.comm, ctx.sizes = comm, sizes
        with comm.phase("gemm2_reducescatter"):
            q = comm.reduce_scatter(p, sizes, dim=1)
        return q.view_as(q)  # a fresh tensor even where the axis has one rank

    @staticmethod
    def backward(ctx, grad):
        with ctx.comm.phase("dz_allgather"):
            return ctx.comm.all_gather(grad.contiguous(), ctx.sizes, dim=1), None, None


# Under mixed precision the sums of the algorithm run in float32 (``gnnmesh.ops.precision``), as
# a whole GEMM's accumulation does: each rank's partial product is rounded once, not its sum.
aggregate = in_float32(Aggregate.apply)
partial_sum = in_float32(PartialSum.apply)
scatter_columns = in_float32(ScatterColumns.apply)


class ToLossRows(torch.autograd.Function):
    """The last layer's output block -> the logits of this rank's loss rows (an all-to-all
    over the world, along a ``LogitRoute``). Backward sends the gradients back and joins the
    replicas' shares along the feats axis."""

    @staticmethod
    def forward(ctx, q, route, world: Comm, feats: Comm, shape: tuple):
        ctx.route, ctx.world, ctx.feats = route, world, feats
        share = q[route.share][route.send_order]
        with world.phase("logits"):
            got = world.all_to_all(share.reshape(-1), route.send_counts, route.recv_counts)
        out = q.new_zeros(shape)
        out.view(-1)[route.recv_index] = got
        return out

    @staticmethod
    def backward(ctx, grad):
        route = ctx.route
        back = grad.contiguous().view(-1)[route.recv_index]
        with ctx.world.phase("logits"):
            got = ctx.world.all_to_all(back, route.recv_counts, route.send_counts)
        width = route.columns.stop - route.columns.start
        share = grad.new_empty(len(route.send_order), width)
        share[route.send_order] = got.view(share.shape)
        with ctx.feats.phase("logits"):
            full = ctx.feats.all_gather(share, route.share_sizes)
        return full, None, None, None, None


@dataclass
class LogitRoute:
    """How the last layer's output block reaches the ranks that score it.

    The block (rows along the last layer's rows axis, class columns along its cols axis) is
    replicated along its feats axis; each replica sends one share of its rows (``share``),
    reordered by destination (``send_order``), to the world rank whose ``loss_rows`` hold
    them. ``recv_index`` places what arrives, in arrival order, into the flattened
    ``[len(loss_rows), classes]`` logits."""

    share: slice
    share_sizes: list
    columns: slice
    send_order: np.ndarray
    send_counts: list
    recv_counts: list
    recv_index: np.ndarray

    def to(self, device) -> "LogitRoute":
        """The same route with its index arrays as int64 tensors on ``device``."""
        index = (lambda a: torch.as_tensor(np.asarray(a), dtype=torch.int64, device=device))
        return replace(self, send_order=index(self.send_order), recv_index=index(self.recv_index))


def logit_route(blocks: GridBlocks, layers: int, classes: int, everyone: list, rank: int) -> LogitRoute:
    """``everyone[q]``: the grid coordinates of world rank ``q``; ``rank``: this one's."""
    world = len(everyone)
    last = roles(layers - 1)
    owner = np.repeat(np.arange(world), sizes(blocks.num_nodes, world))
    start = cut(blocks.num_nodes, world, rank).start

    def shares(coords):
        block = blocks.nodes(layers, last.rows, coords)
        split = blocks.dims[last.feats]
        share = cut(len(block), split, coords[last.feats])
        return block, share, sizes(len(block), split), blocks.width(classes, last.cols, coords)

    block, share, share_sizes, columns = shares(everyone[rank])
    dest = owner[block[share]]
    width = columns.stop - columns.start
    send_counts = (np.bincount(dest, minlength=world) * width).tolist()
    recv_counts, recv_index = [], []
    for coords in everyone:
        block_s, share_s, _, cols_s = shares(coords)
        ids = block_s[share_s]
        rows = ids[owner[ids] == rank] - start
        recv_counts.append(len(rows) * (cols_s.stop - cols_s.start))
        recv_index.append((rows[:, None] * classes + np.arange(cols_s.start, cols_s.stop)[None, :]).ravel())
    return LogitRoute(share, share_sizes, columns, np.argsort(dest, kind="stable"), send_counts,
                      recv_counts, np.concatenate(recv_index).astype(np.int64))
