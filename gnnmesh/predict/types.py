"""Predictions of a typed graph, per node type: ``--node-type NAME|all`` (default: the target
types, those with labels; every type where none has) picks the rows written, each named by
its node type and its type-local id as well as its global id; a ``--nodes`` file lists
type-local ids of the one type chosen.

The union graph numbers a type's nodes ``offsets[t]:offsets[t + 1]`` (``gnnmesh.typed``), so a
row's type and local id follow from its global id alone, on every rank alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import ConfigError
from ..typed import NodeTypes
from .nodes import CHOICES, read_node_file

ALL = "all"


def node_types_of(data) -> Optional[NodeTypes]:
    """The node types of a graph or of its parts (None: not a typed graph)."""
    types = data.meta.get("node_types") if hasattr(data, "meta") else data.node_types
    return types if isinstance(types, NodeTypes) else None


@dataclass(frozen=True)
class TypedRows:
    """The rows of node types ``chosen`` (indices into ``types.names``) a prediction writes."""

    types: NodeTypes
    chosen: tuple

    @classmethod
    def of(cls, types: NodeTypes, flag: Optional[str]) -> "TypedRows":
        """The types ``--node-type flag`` names (None: the targets, else every type)."""
        names = list(types.names)
        if flag is None:
            chosen = [names.index(t) for t in types.targets] or range(len(names))
        elif flag == ALL:
            chosen = range(len(names))
        elif flag in names:
            chosen = [names.index(flag)]
        else:
            raise ConfigError(f"--node-type {flag}: the graph's node types are {', '.join(names)} (or {ALL})")
        return cls(types, tuple(chosen))

    @property
    def names(self) -> list:
        return [self.types.names[t] for t in self.chosen]

    def listed(self, nodes: str) -> Optional[np.ndarray]:
        """The global ids of a ``--nodes`` file of type-local ids (None for all, train, val, test)."""
        if nodes in CHOICES:
            return None
        if len(self.chosen) != 1:
            raise ConfigError(f"--nodes {nodes}: its ids are type-local; choose their node type with --node-type "
                              f"(one of {', '.join(self.types.names)})")
        t = self.chosen[0]
        start, stop = int(self.types.offsets[t]), int(self.types.offsets[t + 1])
        try:
            local = read_node_file(nodes, stop - start)
        except ConfigError as err:
            raise ConfigError(f"{err} (ids of node type {self.types.names[t]!r})") from None
        return local + start

    def keep(self, ids: np.ndarray) -> np.ndarray:
        """Which of the global ``ids`` are of a chosen type."""
        return np.isin(self.types.type_of(ids), self.chosen)

    def columns(self, ids: np.ndarray) -> dict:
        """Each row's node type (its index in the manifest's ``node_types``) and type-local id."""
        of = self.types.type_of(ids).astype(np.int64)
        return {"node_type": of.astype(np.int32), "local_id": ids - self.types.offsets[of]}
