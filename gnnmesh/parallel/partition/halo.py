"""Halo exchange for 1D row partitioning (Demirci et al., PVLDB 2022, Algorithms 1 and 2).

Rank m owns rows ``owned`` of A and of every vertex-data matrix; its block of A has columns
``[owned..., halo...]``. Before multiplying, each neighbour n sends exactly the rows m needs
(``send_index``), once per layer, with non-blocking point-to-point messages; m multiplies
its owned columns while they travel and adds the halo columns' contribution on arrival.
Backward runs the same pattern in reverse: partial gradients of halo rows go back to their
owners, who add them up (this is A^T, so directed graphs need nothing special).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ...comm import Comm
from ...graph import Adjacency, fits_int32
from ...ops import compiled, profile
from ...ops.spmm import edge_dot, multiply
from ...partition import rank_halo
from .transposed import by_rows, multiply_transposed


@dataclass
class HaloRoutes:
    """Who sends what to whom, for one rank."""

    send_index: dict    # peer -> LongTensor of local owned rows to send, in the order the peer expects
    recv_counts: dict   # peer -> number of halo rows arriving from it (halo is grouped by owner)
    num_owned: int

    @property
    def num_halo(self) -> int:
        return sum(self.recv_counts.values())

    def rows_sent(self) -> int:
        return sum(int(i.numel()) for i in self.send_index.values())

    def to(self, device) -> "HaloRoutes":
        return HaloRoutes({p: i.to(device) for p, i in self.send_index.items()}, self.recv_counts, self.num_owned)


class Exchange:
    """Non-blocking sends and receives of row blocks according to a HaloRoutes."""

    def __init__(self, routes: HaloRoutes, comm: Comm):
        self.routes, self.comm = routes, comm

    def start_forward(self, x: torch.Tensor):
        """Send owned rows to the peers that need them; post receives for the halo, straight
        into its rows (ordered by owner rank), so the halo is never copied once more."""
        tail = tuple(x.shape[1:])
        sends = [self.comm.isend(x[idx], peer) for peer, idx in self.routes.send_index.items()]
        halo = x.new_empty((self.routes.num_halo,) + tail)
        recvs, start = [], 0
        for peer in sorted(self.routes.recv_counts):
            n = self.routes.recv_counts[peer]
            recvs.append(self.comm.irecv(halo[start:start + n], peer))
            start += n
        return sends + recvs, halo

    def finish_forward(self, pending) -> torch.Tensor:
        handles, halo = pending
        self.comm.wait(handles)
        handles.clear()  # the copies of the rows sent go now, not when the caller returns
        return halo

    def start_backward(self, grad_halo: torch.Tensor):
        """Return halo-row gradients to their owners; post receives for our rows' partials."""
        tail = tuple(grad_halo.shape[1:])
        sends, start = [], 0
        for peer in sorted(self.routes.recv_counts):
            n = self.routes.recv_counts[peer]
            sends.append(self.comm.isend(grad_halo[start:start + n], peer))
            start += n
        bufs = {peer: grad_halo.new_empty((idx.numel(),) + tail) for peer, idx in self.routes.send_index.items()}
        recvs = [self.comm.irecv(buf, peer) for peer, buf in bufs.items()]
        return sends + recvs, bufs

    def finish_backward(self, pending, grad_owned: torch.Tensor) -> torch.Tensor:
        handles, bufs = pending
        self.comm.wait(handles)
        handles.clear()
        for peer in sorted(bufs):  # fixed order: the sum is deterministic
            grad_owned.index_add_(0, self.routes.send_index[peer], bufs.pop(peer))
        return grad_owned


HALO_PIECES = 8  # at most this many row ranges of the halo part, multiplied one at a time
MESSAGE_ROWS = 1 << 14  # rows of one message of the halo fetched without autograd (8 MiB at 128 float32)


class LocalOperator:
    """One rank's rows of a graph operator, split by column into owned and halo parts.

    Only the two parts are kept. The whole block (owned rows x [owned, halo] columns) and
    where its entries lie in the parts are rebuilt from them on first use, by the
    primitives that need them (attention's); an operator that is only multiplied (GCN,
    SAGE, GIN) holds each entry once."""

    def __init__(self, inner: Adjacency, outer: Adjacency, entry_ids, exchange: "Exchange"):
        self.inner = inner          # owned x owned
        self.outer = outer          # owned x halo
        self.entry_ids = entry_ids  # global entry id of each block entry, or a function reading them
        self.exchange = exchange
        self._assembled = None
        self._pieces = None
        self._by_peer = None
        self._inner_pieces = None

    @property
    def block(self) -> Adjacency:
        """owned rows x [owned, halo] columns, with the operator's values (if it has any)."""
        return self._assemble()[0]

    @property
    def inner_pos(self) -> torch.Tensor:
        """Positions of the inner entries among the block's entries."""
        return self._assemble()[1]

    @property
    def outer_pos(self) -> torch.Tensor:
        return self._assemble()[2]

    def _assemble(self) -> tuple:
        if self._assembled is None:
            self._assembled = self._build_block()
        return self._assembled

    def _build_block(self) -> tuple:
        # Block indices are sorted within each row and halo columns follow the owned ones, so
        # a row of the block is its inner entries, then its outer ones.
        inner, outer = self.inner, self.outer
        n = inner.shape[0]
        indptr = inner.indptr + outer.indptr
        inner_pos = torch.arange(inner.nnz) + torch.repeat_interleave(outer.indptr[:-1], inner.degrees())
        outer_pos = torch.arange(outer.nnz) + torch.repeat_interleave(inner.indptr[1:], outer.degrees())
        indices = torch.empty(inner.nnz + outer.nnz, dtype=torch.int64)
        indices[inner_pos] = inner.indices.to(torch.int64)
        indices[outer_pos] = outer.indices.to(torch.int64) + n
        values = None
        if inner.values is not None:
            device = inner.values.device
            inner_pos, outer_pos = inner_pos.to(device), outer_pos.to(device)
            values = inner.values.new_empty(inner.nnz + outer.nnz)
            values[inner_pos] = inner.values
            values[outer_pos] = outer.values
        return Adjacency(indptr, indices, values, (n, n + outer.shape[1])), inner_pos, outer_pos

    def outer_pieces(self) -> list:
        """``(rows, entries, part)``: the halo part cut into ranges of rows of about equal
        entries, each its own CSR matrix (structure only; ``entries``: the range of its values).
        A piece holds at least the entries the compiled kernels take (``compiled.MIN_ENTRIES``)
        where the whole part does, so the pieces run on the kernel the whole would."""
        if self._pieces is None:
            self._pieces = _row_pieces(self.outer, min(HALO_PIECES, self.outer.nnz // compiled.MIN_ENTRIES))
        return self._pieces

    def inner_pieces(self) -> list:
        """``(rows, entries, part)`` as ``outer_pieces``, of the owned part, in ``HALO_PIECES``
        ranges (inference, see ``halo_product_by_peer``)."""
        if self._inner_pieces is None:
            self._inner_pieces = _row_pieces(self.inner, HALO_PIECES)
        return self._inner_pieces

    def outer_of(self, peer: int) -> list:
        """``(rows received, pieces)`` for each message from ``peer`` (its halo rows in runs of
        ``MESSAGE_ROWS``, in order): ``pieces`` as ``outer_pieces``, of the halo part's columns
        of those rows alone (numbered from 0) and of the rows with an entry there alone (a
        piece's ``rows``: their ids, a tensor); their ``entries``: the positions of their values
        among the halo part's. Made on first use (inference, see ``halo_product_by_peer``).
        A message's row pointer spans the rows it reaches, not every owned row: a rank holds
        one for each of its messages. Always ``HALO_PIECES`` ranges of rows, so that no
        piece's product takes more than that share of the layer's output, even where the
        pieces then run on torch's kernel (below ``compiled.MIN_ENTRIES``)."""
        if self._by_peer is None:
            self._by_peer = {}
            outer, start = self.outer, 0
            rows = torch.repeat_interleave(torch.arange(outer.shape[0]), outer.degrees())
            for p in sorted(self.exchange.routes.recv_counts):
                count = self.exchange.routes.recv_counts[p]
                self._by_peer[p] = []
                for first in range(start, start + count, MESSAGE_ROWS):
                    last = min(first + MESSAGE_ROWS, start + count)
                    mine = torch.nonzero((outer.indices >= first) & (outer.indices < last)).flatten()
                    reached, counts = torch.unique_consecutive(rows[mine], return_counts=True)  # CSR order
                    indptr = torch.zeros(reached.shape[0] + 1, dtype=torch.int64)
                    indptr[1:] = torch.cumsum(counts, 0)
                    block = Adjacency(indptr, outer.indices[mine] - first, None, (reached.shape[0], last - first))
                    pieces = [(reached[r], mine[e], part) for r, e, part in _row_pieces(block, HALO_PIECES)
                              if part.nnz]
                    self._by_peer[p].append((last - first, pieces))
                start += count
        return self._by_peer.get(peer, [])

    @property
    def edge_ids(self) -> torch.Tensor:
        """Global entry id of each block entry (only edge dropout needs them: read on first use)."""
        if callable(self.entry_ids):
            self.entry_ids = self.entry_ids()
        return torch.as_tensor(self.entry_ids, dtype=torch.int64)

    def split_values(self, values, like: torch.Tensor):
        """Per-entry ``values`` of the block as (inner, outer); None: the operator's own
        values (ones of ``like``'s type where it has none)."""
        if values is not None:
            return values[self.inner_pos], values[self.outer_pos]
        if self.inner.values is None:
            return like.new_ones(self.inner.nnz), like.new_ones(self.outer.nnz)
        return self.inner.values, self.outer.values


def _row_pieces(adj: Adjacency, count: int) -> list:
    """``(rows, entries, part)``: ``adj`` cut into ``count`` ranges of rows of about equal
    entries (fewer where rows are few), each its own CSR matrix (structure only)."""
    n, nnz = adj.shape[0], adj.nnz
    if count <= 1:
        return [(slice(0, n), slice(0, nnz), adj)]
    indptr = adj.indptr.numpy()
    cuts = np.searchsorted(indptr, np.arange(1, count) * (nnz / count))
    bounds = np.unique(np.concatenate(([0], np.minimum(cuts, n), [n])))
    pieces = []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        first, last = int(indptr[lo]), int(indptr[hi])
        part = Adjacency(adj.indptr[lo:hi + 1] - first, adj.indices[first:last], None, (hi - lo, adj.shape[1]))
        pieces.append((slice(lo, hi), slice(first, last), part))
    return pieces


def halo_product_by_peer(x: torch.Tensor, values, op: LocalOperator) -> torch.Tensor:
    """``block @ [x; halo(x)]`` without autograd (inference), the halo fetched from one peer at
    a time and from it ``MESSAGE_ROWS`` rows at a time: at step k a rank sends its rows to
    rank + k and receives those of rank - k, a message each way at once, and adds the
    received rows' product into the owned part's before the next message. One message's
    rows each way are held at once, where the whole halo and every peer's rows sent would
    be (the largest buffers of a wide layer after its input and output)."""
    routes, comm = op.exchange.routes, op.exchange.comm
    tail = tuple(x.shape[1:])
    with comm.phase("halo"):
        v_in, v_out = op.split_values(values, x)
        with profile.phase("aggregate"):
            # the owned part a range of rows at a time as well: a product's temporaries (torch's
            # kernel takes one the size of its output) stay a fraction of the layer's output
            y = x.new_empty((op.inner.shape[0],) + tail)
            for rows, entries, piece in op.inner_pieces():
                y[rows] = multiply(piece, v_in[entries], x)
        for step in range(1, comm.world_size):
            to, src = (comm.rank + step) % comm.world_size, (comm.rank - step) % comm.world_size
            sent = routes.send_index.get(to)
            sends = [] if sent is None else list(torch.split(sent, MESSAGE_ROWS))  # as the peer's outer_of cuts them
            receives = op.outer_of(src)
            for i in range(max(len(sends), len(receives))):
                handles = [comm.isend(x[sends[i]], to)] if i < len(sends) else []
                halo = None
                if i < len(receives):
                    halo = x.new_empty((receives[i][0],) + tail)
                    handles.append(comm.irecv(halo, src))
                comm.wait(handles)
                handles.clear()  # the rows sent go now
                if halo is not None:
                    with profile.phase("aggregate"):
                        for rows, entries, piece in receives[i][1]:  # rows: distinct ids
                            y.index_add_(0, rows, multiply(piece, v_out[entries], halo))
                del halo
    return y


class HaloSpMM(torch.autograd.Function):
    """``block @ [x; halo(x)]`` with the halo's transfer overlapped with the owned part."""

    @staticmethod
    def forward(ctx, x, values, op: LocalOperator):
        ex = op.exchange
        with ex.comm.phase("halo"):
            pending = ex.start_forward(x)
            v_in, v_out = op.split_values(values, x)
            with profile.phase("aggregate"):
                y = multiply(op.inner, v_in, x)
            halo = ex.finish_forward(pending)
            with profile.phase("aggregate"):
                if halo.shape[0]:
                    # added into the owned part's product in place, a piece of rows at a time:
                    # the halo part's product never takes a whole [rows, F] beside it (this is
                    # the layer's peak, and the pool keeps what it peaks at for the run)
                    for rows, entries, piece in op.outer_pieces():
                        y[rows].add_(multiply(piece, v_out[entries], halo))
        ctx.op = op
        # x and its halo rows serve only the values' gradient (attention): a fixed operator's
        # layer frees the halo as soon as it has been multiplied
        ctx.save_for_backward(values, *((x, halo) if ctx.needs_input_grad[1] else ()))
        return y

    @staticmethod
    def backward(ctx, grad_y):
        values, *inputs = ctx.saved_tensors
        op = ctx.op
        v_in, v_out = op.split_values(values, grad_y)
        grad_x = grad_values = None
        with op.exchange.comm.phase("halo"):
            if ctx.needs_input_grad[0] and by_rows(op.outer, grad_y):
                grad_x = _backward_by_peer(op, v_in, v_out, grad_y)
            elif ctx.needs_input_grad[0]:
                with profile.phase("aggregate"):
                    # not pooled: a buffer the size of the halo, kept idle between backward
                    # passes, would sit in every peak of the epoch (the halo rows of the
                    # forward pass are not pooled either)
                    grad_halo = multiply_transposed(op.outer, v_out, grad_y, pooled=False)
                pending = op.exchange.start_backward(grad_halo)
                with profile.phase("aggregate"):
                    grad_x = multiply_transposed(op.inner, v_in, grad_y)
                grad_x = op.exchange.finish_backward(pending, grad_x)
        if ctx.needs_input_grad[1]:
            x, halo = inputs
            with profile.phase("aggregate"):
                grad_values = values.new_zeros(values.shape)
                grad_values[op.inner_pos] = edge_dot(op.inner, grad_y, x)
                grad_values[op.outer_pos] = edge_dot(op.outer, grad_y, halo)
        return grad_x, grad_values, None


def _backward_by_peer(op: LocalOperator, v_in, v_out, grad_y: torch.Tensor) -> torch.Tensor:
    """``grad_x`` of ``HaloSpMM``, the halo rows' gradients made and sent one peer at a time:
    a rank holds one peer's rows of them, not the whole halo's (``[halo rows, F]``, the
    backward pass's largest buffer after its input). The receives are posted first, so a
    send waits only for its peer to reach this layer; the rows received are added in the
    order of ``Exchange.finish_backward``: the same numbers. Where ``by_rows`` (the compiled
    CPU kernels take each peer's columns of the halo part alone)."""
    ex = op.exchange
    routes, comm = ex.routes, ex.comm
    tail = tuple(grad_y.shape[1:])
    bufs = {peer: grad_y.new_empty((idx.numel(),) + tail) for peer, idx in routes.send_index.items()}
    receives = [comm.irecv(buf, peer) for peer, buf in bufs.items()]
    with profile.phase("aggregate"):
        grad_x = multiply_transposed(op.inner, v_in, grad_y)
    start = 0
    for peer in sorted(routes.recv_counts):
        count = routes.recv_counts[peer]
        with profile.phase("aggregate"):
            rows = multiply_transposed(op.outer, v_out, grad_y, pooled=False, columns=slice(start, start + count))
        sent = [comm.isend(rows, peer)]
        comm.wait(sent)
        sent.clear()  # the copy held for the message goes now
        del rows
        start += count
    comm.wait(receives)
    receives.clear()
    for peer in sorted(bufs):  # fixed order: the sum is deterministic
        grad_x.index_add_(0, routes.send_index[peer], bufs.pop(peer))
    return grad_x


class HaloGather(torch.autograd.Function):
    """``x -> halo(x)``: the rows of other ranks this rank's block references."""

    @staticmethod
    def forward(ctx, x, exchange: Exchange):
        ctx.exchange = exchange
        with exchange.comm.phase("halo"):
            return exchange.finish_forward(exchange.start_forward(x))

    @staticmethod
    def backward(ctx, grad_halo):
        ex = ctx.exchange
        with ex.comm.phase("halo"):
            pending = ex.start_backward(grad_halo.contiguous())
            grad_x = grad_halo.new_zeros((ex.routes.num_owned,) + tuple(grad_halo.shape[1:]))
            return ex.finish_backward(pending, grad_x), None


def build_local_operator(op: Adjacency, assignment: torch.Tensor, comm: Comm, device) -> LocalOperator:
    """This rank's rows of ``op`` (columns [owned, halo]) and the exchange that fills the halo."""
    halo = rank_halo(op, assignment.numpy(), comm.world_size, comm.rank)
    return local_operator(halo.block, halo.entry_ids, halo.send_index, halo.recv_counts, comm, device)


def local_operator(block: Adjacency, entry_ids, send_index: list, recv_counts, comm: Comm,
                   device) -> LocalOperator:
    """A LocalOperator from one rank's block (owned rows x [owned, halo] columns), the global
    entry id of each of its entries (or a function returning them), and who sends what:
    ``send_index[peer]`` (positions among the owned rows) and ``recv_counts[peer]`` (halo
    rows from it, grouped by owner)."""
    num_owned = block.shape[0]
    num_halo = block.shape[1] - num_owned
    values = None if block.values is None else block.values.to(device)
    # the row of every entry, made here rather than kept in the block's cache: the block goes
    # once it is split
    rows, cols = torch.repeat_interleave(torch.arange(num_owned), block.degrees()), block.indices
    inner_mask = cols < num_owned
    exchange = HaloRoutes({n: torch.as_tensor(idx, dtype=torch.int64) for n, idx in enumerate(send_index) if len(idx)},
                        {n: int(c) for n, c in enumerate(recv_counts) if c}, num_owned)
    return LocalOperator(
        _sub_block(rows, cols, values, inner_mask, (num_owned, num_owned), 0),
        _sub_block(rows, cols, values, ~inner_mask, (num_owned, num_halo), num_owned),
        entry_ids, Exchange(exchange.to(device), comm))


def _sub_block(rows, cols, values, mask, shape, col_offset) -> Adjacency:
    """The entries ``mask`` of a row-sorted block as their own CSR matrix (order preserved).
    Its column ids are int32 where they fit: the kernels multiply with int32 ids, which an
    int64 array would be copied into for the run (8 bytes an entry more)."""
    counts = torch.bincount(rows[mask], minlength=shape[0])
    indptr = torch.zeros(shape[0] + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(counts, 0)
    indices = cols[mask] - col_offset
    if fits_int32(int(mask.sum()), *shape):
        indices = indices.to(torch.int32)
    return Adjacency(indptr, indices, None if values is None else values[mask.to(values.device)], shape)
