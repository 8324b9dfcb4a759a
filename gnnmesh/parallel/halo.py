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

import torch

from ..comm import Comm
from ..graph import Adjacency
from ..ops import profile
from ..ops.spmm import edge_dot, multiply
from ..partition import rank_halo


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
        for peer in sorted(bufs):  # fixed order: the sum is deterministic
            grad_owned.index_add_(0, self.routes.send_index[peer], bufs[peer])
        return grad_owned


@dataclass
class LocalOperator:
    """One rank's rows of a graph operator, split by column into owned and halo parts."""

    block: Adjacency      # owned rows x [owned, halo] columns
    inner: Adjacency      # owned x owned
    outer: Adjacency      # owned x halo
    inner_pos: torch.Tensor  # positions of inner / outer entries among block's entries
    outer_pos: torch.Tensor
    entry_ids: object        # global entry id of each block entry, or a function reading them
    exchange: Exchange

    @property
    def edge_ids(self) -> torch.Tensor:
        """Global entry id of each block entry (only edge dropout needs them: read on first use)."""
        if callable(self.entry_ids):
            self.entry_ids = self.entry_ids()
        return torch.as_tensor(self.entry_ids, dtype=torch.int64)

    def split_values(self, values):
        return values[self.inner_pos], values[self.outer_pos]


class HaloSpMM(torch.autograd.Function):
    """``block @ [x; halo(x)]`` with the halo's transfer overlapped with the owned part."""

    @staticmethod
    def forward(ctx, x, values, op: LocalOperator):
        ex = op.exchange
        with ex.comm.phase("halo"):
            pending = ex.start_forward(x)
            v_in, v_out = op.split_values(values)
            with profile.phase("aggregate"):
                y = multiply(op.inner, v_in, x)
            halo = ex.finish_forward(pending)
            with profile.phase("aggregate"):
                if halo.shape[0]:
                    y = y + multiply(op.outer, v_out, halo)
        ctx.op = op
        # x and its halo rows serve only the values' gradient (attention): a fixed operator's
        # layer frees the halo as soon as it has been multiplied
        ctx.save_for_backward(values, *((x, halo) if ctx.needs_input_grad[1] else ()))
        return y

    @staticmethod
    def backward(ctx, grad_y):
        values, *inputs = ctx.saved_tensors
        op = ctx.op
        v_in, v_out = op.split_values(values)
        grad_x = grad_values = None
        with op.exchange.comm.phase("halo"):
            if ctx.needs_input_grad[0]:
                with profile.phase("aggregate"):
                    grad_halo = multiply(op.outer, v_out, grad_y, transpose=True)
                pending = op.exchange.start_backward(grad_halo)
                with profile.phase("aggregate"):
                    grad_x = multiply(op.inner, v_in, grad_y, transpose=True)
                grad_x = op.exchange.finish_backward(pending, grad_x)
        if ctx.needs_input_grad[1]:
            x, halo = inputs
            with profile.phase("aggregate"):
                grad_values = values.new_zeros(values.shape)
                grad_values[op.inner_pos] = edge_dot(op.inner, grad_y, x)
                grad_values[op.outer_pos] = edge_dot(op.outer, grad_y, halo)
        return grad_x, grad_values, None


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
    if block.values is not None:
        block = block.with_values(block.values.to(device))
    rows, cols = block.row(), block.indices
    inner_mask = cols < num_owned
    exchange = HaloRoutes({n: torch.as_tensor(idx, dtype=torch.int64) for n, idx in enumerate(send_index) if len(idx)},
                        {n: int(c) for n, c in enumerate(recv_counts) if c}, num_owned)
    return LocalOperator(
        block,
        _sub_block(rows, cols, block.values, inner_mask, (num_owned, num_owned), 0),
        _sub_block(rows, cols, block.values, ~inner_mask, (num_owned, num_halo), num_owned),
        torch.nonzero(inner_mask).flatten().to(device), torch.nonzero(~inner_mask).flatten().to(device),
        entry_ids, Exchange(exchange.to(device), comm))


def _sub_block(rows, cols, values, mask, shape, col_offset) -> Adjacency:
    """The entries ``mask`` of a row-sorted block as their own CSR matrix (order preserved)."""
    counts = torch.bincount(rows[mask], minlength=shape[0])
    indptr = torch.zeros(shape[0] + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(counts, 0)
    return Adjacency(indptr, cols[mask] - col_offset, None if values is None else values[mask.to(values.device)], shape)
