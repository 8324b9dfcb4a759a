"""What a model sees of the graph: the primitives it is written with.

A model never touches the adjacency or the process layout; it calls ``view.spmm``,
``view.sddmm``, ``view.edge_softmax`` and ``view.dropout``. ``GraphView`` runs them on one
process; a parallel strategy subclasses it and supplies distributed versions, so the
models stay the same under every strategy.

Operators are named: ``"gcn"`` (D^-1/2 (A+I) D^-1/2), ``"mean"`` (D^-1 A), ``"sum"`` (A) and
``"loop"`` (the pattern of A + I, for attention).
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from . import ops
from .graph import Adjacency
from .transforms import add_self_loops, gcn_norm, mean_norm

OPERATORS = {
    "gcn": gcn_norm,
    "mean": mean_norm,
    "sum": lambda adj: adj,
    "loop": lambda adj: add_self_loops(adj).with_values(None),
}


def random_mask(shape, p: float, seed: int, device) -> torch.Tensor:
    """A keep-mask (probability ``1 - p``, resolution 2^-16) that depends only on ``seed`` and
    ``shape``, so every process can draw the same global mask and a resumed run draws what
    the original would. Raw PCG64 bytes are several times faster than torch.rand here."""
    count = int(np.prod(shape))
    draws = np.frombuffer(np.random.default_rng(seed).bytes(2 * count), dtype=np.uint16)
    keep = torch.from_numpy(draws.reshape(shape) >= round(p * 65536))
    return keep.to(device)


class GraphView:
    """The whole graph on one process."""

    # Whether operators are moved to ``device``; a parallel view multiplies only its own
    # rows, so it keeps the global operators on the CPU.
    operators_on_device = True

    def __init__(self, adj: Adjacency, seed: int = 0, device="cpu"):
        self.adj = adj
        self.device = torch.device(device)
        self.seed = seed
        self._operators: dict = {}
        self._epoch = 0
        self._draws = 0

    @property
    def num_nodes(self) -> int:
        """Rows of vertex data this process holds."""
        return self.adj.shape[0]

    def operator(self, name: str) -> Adjacency:
        if name not in self._operators:
            if name not in OPERATORS:
                raise ValueError(f"unknown graph operator {name!r}; choose from {sorted(OPERATORS)}")
            op = OPERATORS[name](self.adj)
            if op.values is not None and self.operators_on_device:
                op = op.with_values(op.values.to(self.device))
            self._operators[name] = op
        return self._operators[name]

    # -- primitives ------------------------------------------------------------------------
    def spmm(self, x: torch.Tensor, op: str = "gcn", values=None) -> torch.Tensor:
        return ops.spmm(self.operator(op), x, values)

    def sddmm(self, dst: torch.Tensor, src: torch.Tensor, op: str = "loop", kind: str = "add"):
        return ops.sddmm(self.operator(op), dst, src, kind)

    def edge_softmax(self, scores: torch.Tensor, op: str = "loop") -> torch.Tensor:
        return ops.edge_softmax(self.operator(op), scores)

    # -- randomness that must agree across processes ------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        self._epoch, self._draws = epoch, 0

    def _next_seed(self) -> int:
        self._draws += 1
        key = f"{self.seed}:{self._epoch}:{self._draws}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1

    def dropout(self, x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
        """Dropout on vertex rows; the mask is drawn over the global rows."""
        if not training or p == 0.0:
            return x
        return _apply_mask(x, self.vertex_mask(tuple(x.shape[1:]), p), p)

    def edge_dropout(self, values: torch.Tensor, p: float, training: bool, op: str = "loop"):
        """Dropout on per-edge values of operator ``op`` (GAT's attention dropout)."""
        if not training or p == 0.0:
            return values
        return _apply_mask(values, self.edge_mask(op, tuple(values.shape[1:]), p), p)

    # A parallel view overrides these two to draw the global mask and keep its own part.
    def vertex_mask(self, row_shape: tuple, p: float) -> torch.Tensor:
        return random_mask((self.num_nodes,) + row_shape, p, self._next_seed(), self.device)

    def edge_mask(self, op: str, edge_shape: tuple, p: float) -> torch.Tensor:
        return random_mask((self.operator(op).nnz,) + edge_shape, p, self._next_seed(), self.device)


def _apply_mask(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    return (x * keep.to(x.device)).mul_(1.0 / (1.0 - p))
