"""The relations of a typed graph's entries, and the per-relation operators models read.

A typed graph is held as one graph over a global id space (its node types' id ranges one
after another); its adjacency is the union of every relation's edges, so partitioners,
parts, halos, chunks and blocks see one graph. Which relations each stored entry belongs to
is ``Relations``: a pair of nodes joined by two relations (a paper citing one that cites it
back, under ``cites`` and its reverse) is one entry of the union with two relations.

A relation's operator is that relation's slice of the entries, normalised on its own:
``"mean@cites"`` is ``D_r^-1 A_r`` (the mean over a node's in-neighbours by ``cites``),
``"sum@cites"`` is ``A_r``, ``"loop@cites"`` the pattern of ``A_r`` plus a loop on every
row (for attention). ``operator_of`` builds any operator name, built-in or per relation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .errors import GraphError

SEPARATOR = "@"
NORMS = ("mean", "sum", "loop")


@dataclass(frozen=True)
class Relations:
    """Entry ``e`` of the union adjacency belongs to relations ``ids[ptr[e]:ptr[e + 1]]``
    (indices into ``names``, ascending within each entry, at least one each)."""

    names: tuple
    ptr: torch.Tensor
    ids: torch.Tensor

    def check(self, nnz: int, where: str) -> "Relations":
        ptr, ids = self.ptr.numpy(), self.ids.numpy()
        if ptr.shape != (nnz + 1,) or ptr[0] != 0 or ptr[-1] != ids.shape[0] or np.any(np.diff(ptr) < 1):
            raise GraphError(f"{where}: relations must give every one of the {nnz:,} entries one or more relations")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.names)):
            raise GraphError(f"{where}: relation ids must be 0 to {len(self.names) - 1}")
        if len(set(self.names)) != len(self.names):
            raise GraphError(f"{where}: relation names must differ, got {list(self.names)}")
        return self

    def index(self, name: str) -> int:
        if name not in self.names:
            raise GraphError(f"no relation {name!r}; the graph has {list(self.names)}")
        return self.names.index(name)

    def entries(self, relation: int) -> np.ndarray:
        """The union's entries (ascending) that belong to ``relation``."""
        owner = np.repeat(np.arange(self.ptr.shape[0] - 1, dtype=np.int64), np.diff(self.ptr.numpy()))
        return owner[self.ids.numpy() == relation]
