"""Chunk-based aggregation with pipelined layout switches (NeutronTP §4.2).

Destination rows are cut into chunks of contiguous ids, each with all its in-edges; every
rank processes the same chunks in the same order on its own column slice. A chunk bounds
the aggregation's working set (its output rows, its share of the split and gather
buffers), and lets communication be cut per chunk: the split of the rows chunk ``j+1``
needs first travels while chunk ``j`` is aggregated, and chunk ``j``'s output is gathered
while chunk ``j+1`` is aggregated. A source row is sent with the first chunk that needs
it and reused by later chunks, so a chunked split moves exactly the bytes of a whole one.

Backward mirrors it in reverse chunk order: a row's gradient is complete once every
chunk that reads it has been processed, which is exactly when the reverse sweep leaves
the chunk that first needed it; its gather to the owner then overlaps the next chunk.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...graph import Adjacency
from ...ops import profile
from ...ops.precision import in_float32
from ...ops.spmm import edge_dot, multiply
from ...transforms import row_range
from .layout_switch import LayoutSwitch


class Chunks:
    """The chunks of one operator and which rows each chunk's split brings in."""

    def __init__(self, op: Adjacency, switch: LayoutSwitch, chunk_size: Optional[int], device):
        n_rows = op.shape[0]
        size = max(1, min(chunk_size or n_rows, n_rows))
        self.bounds = list(range(0, n_rows, size)) + [n_rows]
        self.num_nodes = n_rows
        self.device = torch.device(device)
        indptr = op.indptr.numpy()
        self.entries = [(int(indptr[a]), int(indptr[b])) for a, b in self.ranges()]
        self.blocks = [row_range(op, a, b) for a, b in self.ranges()]  # global column ids
        # For A_j^T in backward: columns renumbered to the chunk's own sources, so a chunk's
        # gradient contribution is |sources| rows, not the whole graph's.
        first = np.repeat(np.arange(self.num_chunks), np.diff(self.bounds))  # a row's own chunk
        if self.num_chunks == 1:
            self.compact, self.sources = [op], [None]
        else:
            self.compact, self.sources = [], []
            for j, block in enumerate(self.blocks):
                uniq, inverse = np.unique(block.indices.numpy(), return_inverse=True)
                self.compact.append(Adjacency(block.indptr, torch.from_numpy(inverse.astype(np.int64)),
                                              block.values, (block.shape[0], len(uniq))))
                self.sources.append(torch.from_numpy(uniq).to(self.device))
                first[uniq] = np.minimum(first[uniq], j)
        # Rows grouped by the first chunk that needs them, ascending ids within a chunk.
        order = np.argsort(first, kind="stable")
        starts = np.searchsorted(first[order], np.arange(self.num_chunks + 1))
        self.split_rows, self.split_all = [], []
        for j in range(self.num_chunks):
            rows = order[starts[j]:starts[j + 1]]
            cuts = np.searchsorted(rows, switch.row_bounds)
            self.split_rows.append([torch.from_numpy(rows[cuts[r]:cuts[r + 1]]) for r in range(switch.world)])
            self.split_all.append(torch.from_numpy(rows).to(self.device))
        self.gather_rows = [switch.owned_in(a, b) for a, b in self.ranges()]

    @property
    def num_chunks(self) -> int:
        return len(self.bounds) - 1

    def ranges(self):
        return list(zip(self.bounds[:-1], self.bounds[1:]))


def _multiply(adj: Adjacency, values, x, transpose: bool = False):
    rows = adj.shape[1] if transpose else adj.shape[0]
    if x.shape[-1] == 0 or adj.nnz == 0:  # an empty column slice (width < ranks) or chunk
        return x.new_zeros((rows,) + tuple(x.shape[1:]))
    with profile.phase("aggregate"):
        return multiply(adj, values, x, transpose)


class _Incoming:
    """Exchanges whose results are needed at the start of chunk steps ``order``: pipelined,
    the exchange for the next step is started as soon as the current one is taken."""

    def __init__(self, start, order, pipeline: bool):
        self.start, self.order, self.pipeline = start, order, pipeline
        self.pending = start(order[0]) if pipeline and order else None

    def take(self, step: int):
        if not self.pipeline:
            return self.start(self.order[step])
        pending = self.pending
        if step + 1 < len(self.order):
            self.pending = self.start(self.order[step + 1])
        return pending


class _Outgoing:
    """Exchanges started after a chunk step; pipelined, each is finished (``place``) only
    after the next step has been computed."""

    def __init__(self, place, pipeline: bool):
        self.place, self.pipeline, self.held = place, pipeline, None

    def push(self, j: int, pending) -> None:
        if not self.pipeline:
            self.place(j, pending)
            return
        self.drain()
        self.held = (j, pending)

    def drain(self) -> None:
        if self.held is not None:
            self.place(*self.held)
            self.held = None


class ChunkedAggregation:
    """Runs ``A @ x`` on column slices chunk by chunk, optionally switching layouts at its
    ends: ``split_input`` takes row-layout ``x`` (and can return its column slice too),
    ``gather_output`` returns row-layout output. ``rounds`` counts whole-layer switches."""

    def __init__(self, switch: LayoutSwitch, pipeline: bool = True):
        self.switch, self.pipeline = switch, pipeline
        self.rounds = 0

    @in_float32  # a primitive of its own (the decoupled models' propagation): float32 under autocast
    def __call__(self, chunks: Chunks, x, values, width: int, split_input=False, gather_output=False,
                 return_input=False):
        out = _Aggregate.apply(x, values, self, chunks, width, split_input, gather_output, return_input)
        return out if return_input else out[1]

    def forward(self, chunks: Chunks, x, values, width, split_input, gather_output):
        with self.switch.comm.phase("layout"):
            return self._forward(chunks, x, values, width, split_input, gather_output)

    def backward(self, *args):
        with self.switch.comm.phase("layout"):
            return self._backward(*args)

    def _forward(self, chunks: Chunks, x, values, width, split_input, gather_output):
        sw, order = self.switch, list(range(chunks.num_chunks))
        mid = tuple(x.shape[1:-1])
        self.rounds += int(split_input) + int(gather_output)
        x_cols = x
        if split_input:
            x_cols = x.new_empty((chunks.num_nodes,) + mid + (sw.col_width(width),))
            incoming = _Incoming(lambda j: sw.start_split(x, chunks.split_rows[j]), order, self.pipeline)
        if gather_output:
            out = x.new_empty((sw.num_owned,) + mid + (width,))
            mine = [(rows[sw.rank] - sw.start).to(x.device) for rows in chunks.gather_rows]
            outgoing = _Outgoing(lambda j, p: out.index_copy_(0, mine[j], sw.finish_gather(p)), self.pipeline)
        else:
            out = x.new_empty((chunks.num_nodes,) + mid + (x_cols.shape[-1],))
        for step, j in enumerate(order):
            if split_input:  # the rows chunk j needs first (earlier chunks brought the rest)
                x_cols.index_copy_(0, chunks.split_all[j], sw.finish_split(incoming.take(step)))
            y = _multiply(chunks.blocks[j], values[slice(*chunks.entries[j])], x_cols)
            if gather_output:
                outgoing.push(j, sw.start_gather(y, chunks.gather_rows[j], width))
            else:
                out[chunks.bounds[j]:chunks.bounds[j + 1]] = y
        if gather_output:
            outgoing.drain()
        return x_cols, out

    def _backward(self, chunks, grad_out, grad_cols, x_cols, values, width, split_input, gather_output,
                  need_x, need_values):
        sw, order = self.switch, list(reversed(range(chunks.num_chunks)))
        mid = tuple(grad_out.shape[1:-1])
        split_input = split_input and need_x  # data inputs (features) need no gradient sent home
        self.rounds += int(split_input) + int(gather_output)
        grad_x_cols = (grad_cols.clone() if grad_cols is not None
                       else grad_out.new_zeros((chunks.num_nodes,) + mid + (sw.col_width(width),)))
        grad_values = [None] * chunks.num_chunks
        if gather_output:  # the gradient arrives in row layout: split it chunk by chunk
            incoming = _Incoming(lambda j: sw.start_split(grad_out, chunks.gather_rows[j]), order, self.pipeline)
        if split_input:  # send each row's gradient home once no earlier chunk can add to it
            grad_x = grad_out.new_zeros((sw.num_owned,) + mid + (width,))
            mine = [(rows[sw.rank] - sw.start).to(grad_out.device) for rows in chunks.split_rows]
            outgoing = _Outgoing(lambda j, p: grad_x.index_copy_(0, mine[j], sw.finish_gather(p)), self.pipeline)
        for step, j in enumerate(order):
            if gather_output:
                g = sw.finish_split(incoming.take(step))
            else:
                g = grad_out[chunks.bounds[j]:chunks.bounds[j + 1]]
            part = _multiply(chunks.compact[j], values[slice(*chunks.entries[j])], g, transpose=True)
            if chunks.sources[j] is None:
                grad_x_cols.add_(part)
            else:
                grad_x_cols.index_add_(0, chunks.sources[j], part)
            if need_values:
                with profile.phase("aggregate"):
                    grad_values[j] = edge_dot(chunks.blocks[j], g, x_cols)
            if split_input:
                outgoing.push(j, sw.start_gather(grad_x_cols.index_select(0, chunks.split_all[j]),
                                                  chunks.split_rows[j], width))
        if split_input:
            outgoing.drain()
        return (grad_x if split_input else grad_x_cols), (torch.cat(grad_values) if need_values else None)


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, values, engine, chunks, width, split_input, gather_output, return_input):
        x_cols, out = engine.forward(chunks, x, values, width, split_input, gather_output)
        ctx.engine, ctx.chunks, ctx.width = engine, chunks, width
        ctx.split_input, ctx.gather_output = split_input, gather_output
        ctx.save_for_backward(values, x_cols if ctx.needs_input_grad[1] else None)
        if not return_input:
            x_cols = x_cols.new_empty(0)
        return x_cols, out

    @staticmethod
    def backward(ctx, grad_cols, grad_out):
        values, x_cols = ctx.saved_tensors
        if grad_cols is not None and grad_cols.numel() == 0:
            grad_cols = None
        grad_x, grad_values = ctx.engine.backward(
            ctx.chunks, grad_out.contiguous(), grad_cols, x_cols, values, ctx.width, ctx.split_input,
            ctx.gather_output, ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        return (grad_x if ctx.needs_input_grad[0] else None), grad_values, None, None, None, None, None, None
