"""The two exchanges of the mini-batch strategies: id arrays (a batch's first-layer rows and
their sampled entries, sent to the rank that computes them) and vertex rows (the partial or
finished first-layer embeddings sent back, their gradients retracing the way)."""

from __future__ import annotations

import numpy as np
import torch

from ...comm import Comm

GRAPH, SHUFFLE = "graph", "shuffle"  # the traffic phases: sampled structure, hidden rows


def exchange_ids(comm: Comm, pieces: list, phase: str = GRAPH) -> list:
    """``pieces[q]`` (an int64 array) goes to rank q; returns what each rank sent here, in rank
    order. Two all-to-alls (the lengths, then the ids), both under ``phase``."""
    if comm.world_size == 1:
        return [np.asarray(pieces[0], dtype=np.int64)]
    sizes = [len(p) for p in pieces]
    ones = [1] * comm.world_size
    with comm.phase(phase):  # moved on the communicator's device (nccl sends no host tensors)
        arriving = comm.all_to_all(torch.tensor(sizes, device=comm.device), ones, ones).tolist()
        flat = torch.from_numpy(np.concatenate(pieces).astype(np.int64)).to(comm.device)
        got = comm.all_to_all(flat, sizes, arriving).cpu().numpy()
    return np.split(got, np.cumsum(arriving)[:-1])


def id_bytes(sizes: list, rank: int) -> int:
    """What ``exchange_ids`` counts for a rank sending ``sizes[q]`` ids to each rank q."""
    off = [n for q, n in enumerate(sizes) if q != rank]
    return 8 * (len(off) + sum(off))


class Rows(torch.autograd.Function):
    """Rows to other ranks: ``send[q]`` rows of ``x`` (in rank order) go to rank q and
    ``recv[q]`` arrive from it; in backward the arriving rows' gradients go back."""

    @staticmethod
    def forward(ctx, x, comm, send, recv):
        ctx.comm, ctx.send, ctx.recv = comm, send, recv
        return _move(comm, x, send, recv)

    @staticmethod
    def backward(ctx, grad):
        return _move(ctx.comm, grad, ctx.recv, ctx.send), None, None, None


def _move(comm: Comm, x: torch.Tensor, send: list, recv: list) -> torch.Tensor:
    width = x.shape[1]
    with comm.phase(SHUFFLE):
        out = comm.all_to_all(x.contiguous().reshape(-1), [n * width for n in send], [n * width for n in recv])
    return out.reshape(-1, width)


def send_rows(comm: Comm, x: torch.Tensor, send: list, recv: list) -> torch.Tensor:
    return Rows.apply(x, comm, list(send), list(recv))


def row_bytes(send: list, recv: list, rank: int, width: int) -> int:
    """What ``send_rows`` counts for one rank over forward and backward: its rows out, then
    the gradients of the rows that came in."""
    return 4 * width * sum(s + r for q, (s, r) in enumerate(zip(send, recv)) if q != rank)
