"""Dot products of pairs of rows of one table, read in place: ``<table[a[i]], table[b[i]]>``.

Link prediction scores every training pair each step. Gathering the pairs' rows first
(``table[a] * table[b]``) writes two [pairs, width] tensors, and their gradients two more,
each many times the table's size; the compiled kernel (``_numba.pair_dot``) reads the rows
where they are and writes one number per pair, and its backward adds each pair's share into
a gradient the table's size, each thread into its own block of rows. Without numba (on
another device or dtype, or below the compiled kernels' size) the same scores come from
torch's indexing.
"""

from __future__ import annotations

import torch

from . import compiled

# Pairs per parallel task of the forward kernel: enough to amortize a task's start.
_CHUNK = 1 << 14


class _PairDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table, a, b):
        ctx.save_for_backward(table, a, b)
        out = table.new_empty(len(a))
        compiled._run(compiled._kernels().pair_dot, table.contiguous(), a, b, out, _CHUNK)
        return out

    @staticmethod
    def backward(ctx, grad):
        table, a, b = ctx.saved_tensors
        out = torch.zeros_like(table)
        tasks = max(1, torch.get_num_threads())  # one per thread: each reads every pair
        bounds = torch.tensor([len(table) * t // tasks for t in range(tasks + 1)])
        compiled._run(compiled._kernels().pair_dot_backward, table.contiguous(), a, b,
                      grad.contiguous().to(table.dtype), out, bounds)
        return out, None, None


def pair_dot(table: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``[P]`` scores ``<table[a[i]], table[b[i]]>`` of a ``[N, F]`` table and ``[P]`` int64 row
    indices; differentiable in ``table``."""
    a, b = a.long().contiguous(), b.long().contiguous()
    if (table.dim() == 2 and table.device.type == "cpu" and table.dtype in compiled._FLOATS
            and not compiled._module.get("off") and compiled.wanted(len(a)) and compiled._kernels() is not None):
        return _PairDot.apply(table, a, b)
    return (table[a] * table[b]).sum(-1)
