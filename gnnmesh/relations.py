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
from functools import cached_property

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
        bad = [name for name in self.names if not name or SEPARATOR in name or "," in name]
        if bad:
            raise GraphError(f"{where}: relation name {bad[0]!r} must be non-empty without '{SEPARATOR}' or ','")
        return self

    def index(self, name: str) -> int:
        if name not in self.names:
            raise GraphError(f"no relation {name!r}; the graph has {list(self.names)}")
        return self.names.index(name)

    @cached_property
    def _owner(self) -> np.ndarray:
        """The union entry of each of ``ids``: built once, read by every relation's operator."""
        return np.repeat(np.arange(self.ptr.shape[0] - 1, dtype=np.int64), np.diff(self.ptr.numpy()))

    def entries(self, relation: int) -> np.ndarray:
        """The union's entries (ascending) that belong to ``relation``."""
        return self._owner[self.ids.numpy() == relation]


def parse(name: str):
    """``(norm, relation)`` of a per-relation operator's name, None for another name."""
    norm, sep, relation = name.partition(SEPARATOR)
    return (norm, relation) if sep else None


def relation_operator(adj, norm: str, relation: str):
    """The operator ``norm@relation`` of ``adj``, the typed graph's union adjacency: its
    relation's entries (in the union's order), normalised over that relation alone."""
    from .graph import Adjacency
    from .transforms import add_self_loops
    relations = adj.relations
    if relations is None:
        raise GraphError(f"operator {norm}{SEPARATOR}{relation}: the graph has no relations (a typed graph has)")
    if norm not in NORMS:
        raise GraphError(f"operator {norm}{SEPARATOR}{relation}: unknown normalisation {norm!r}; "
                         f"choose from {', '.join(NORMS)}")
    entries = torch.from_numpy(relations.entries(relations.index(relation)))
    rows = adj.row()[entries]
    degrees = torch.bincount(rows, minlength=adj.shape[0])
    indptr = torch.zeros(adj.shape[0] + 1, dtype=torch.int64)
    torch.cumsum(degrees, 0, out=indptr[1:])
    sub = Adjacency(indptr, adj.indices[entries], None, adj.shape)
    if norm == "sum":
        return sub
    if norm == "loop":
        return add_self_loops(sub).with_values(None)
    return sub.with_values((1.0 / degrees[rows].double()).float())


def operator_names(relations) -> list:
    """Every per-relation operator of a graph with ``relations`` (none without)."""
    if relations is None:
        return []
    return [f"{norm}{SEPARATOR}{name}" for name in relations.names for norm in NORMS]
