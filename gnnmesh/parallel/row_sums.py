"""Sums over every rank's rows, for statistics of vertex data (``GraphView.row_sum``, which
``view.batch_norm`` normalises by): each rank sums its own rows, and the ranks' sums add up."""

from __future__ import annotations

import torch


class SumOverRanks(torch.autograd.Function):
    """The sum over ranks of each rank's ``sums``. Every rank's loss depends on the total, so
    the gradient of a rank's ``sums`` is the sum over ranks of the total's gradients."""

    @staticmethod
    def forward(ctx, sums: torch.Tensor, comm):
        ctx.comm = comm
        total = sums.detach().clone()
        with comm.phase("rows"):
            return comm.all_reduce(total)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        total = grad.detach().clone()
        with ctx.comm.phase("rows"):
            return ctx.comm.all_reduce(total), None
