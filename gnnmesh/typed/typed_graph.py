"""A typed (heterogeneous) graph as the user gives it: node types with their own ids, features
and labels, and relations between them, each with its edges in the types' local ids.

This is the form data arrives in (PyG's ``HeteroData``, ogbn-mag's directory); gnnmesh trains on
its union ``Graph`` (``gnnmesh.typed.union.to_graph``). Every field is checked when a
``TypedGraph`` is made, so a bad one is one GraphError naming the node type or relation and the
field, not a wrong index deep inside a kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ..errors import GraphError
from ..graph import check_vertex_data
from ..relations import SEPARATOR

MASKS = ("train_mask", "val_mask", "test_mask")
# Joins a relation's three names into its name in the union graph ("paper__cites__paper"), so no
# name may hold it: the union's names must split back into the relation they came from.
NAME_JOINER = "__"


def check_name(name, what: str) -> None:
    """A node type's or relation's name: a non-empty string free of the reserved separators."""
    if not isinstance(name, str) or not name:
        raise GraphError(f"{what}: names must be non-empty strings, got {name!r}")
    for reserved, why in ((SEPARATOR, "it separates an operator from its relation, as in 'mean@cites'"),
                          (NAME_JOINER, "it joins a relation's names in the union graph")):
        if reserved in name:
            raise GraphError(f"{what}: {reserved!r} is reserved in names ({why}), got {name!r}")


@dataclass(eq=False)  # fields are tensors: equal means the same object
class NodeType:
    """One node type: ``count`` nodes with local ids ``0..count-1``. ``x``: float features
    [count, F] (F of its own); ``y``: int64 class ids [count] on a target type, which then has
    its three boolean masks [count] as well (a type is a target when it has labels)."""

    name: str
    count: int
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    train_mask: Optional[torch.Tensor] = None
    val_mask: Optional[torch.Tensor] = None
    test_mask: Optional[torch.Tensor] = None

    @property
    def is_target(self) -> bool:
        return self.y is not None

    @property
    def width(self) -> int:
        """Feature columns (0 without features)."""
        return 0 if self.x is None else int(self.x.shape[1])

    def check(self) -> None:
        where = f"node type {self.name!r}"
        check_name(self.name, where)
        if isinstance(self.count, bool) or not isinstance(self.count, (int, np.integer)) or self.count < 0:
            raise GraphError(f"{where}: field 'count' must be an integer >= 0, got {self.count!r}")
        if self.x is not None and (self.x.layout != torch.strided or not self.x.is_floating_point()):
            raise GraphError(f"{where}: field 'x' must be a dense float tensor, got {self.x.dtype} ({self.x.layout})")
        masks = {m: getattr(self, m) for m in MASKS}
        if self.y is not None:
            if self.y.dim() != 1 or self.y.is_floating_point() or self.y.dtype == torch.bool:
                raise GraphError(f"{where}: field 'y' must hold integer class ids [{self.count}], got "
                                 f"{self.y.dtype} of shape {list(self.y.shape)}")
            missing = [m for m, mask in masks.items() if mask is None]
            if missing:
                raise GraphError(f"{where}: has labels 'y' but no {', '.join(repr(m) for m in missing)}: a "
                                 "target type needs its train, validation and test masks")
        else:
            given = [m for m, mask in masks.items() if mask is not None]
            if given:
                raise GraphError(f"{where}: has {', '.join(repr(m) for m in given)} but no labels 'y': "
                                 "masks belong to a target type, which has labels")
        check_vertex_data(f"{where}: ", int(self.count), self.x, self.y, None, masks)


@dataclass(eq=False)  # fields are tensors: equal means the same object
class Relation:
    """The edges of one relation ``(src, name, dst)``: ``edge_index`` [2, E] in the types' local
    ids, row 0 the source (a node of type ``src``), row 1 the destination (of type ``dst``);
    ``edge_attr``: optional edge features, one row per edge ([E] or [E, D])."""

    src: str
    name: str
    dst: str
    edge_index: torch.Tensor
    edge_attr: Optional[torch.Tensor] = None

    @property
    def key(self) -> tuple:
        return (self.src, self.name, self.dst)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def check(self, counts: dict) -> None:
        where = f"relation {self.key!r}"
        check_name(self.name, where)
        for end in (self.src, self.dst):
            if end not in counts:
                raise GraphError(f"{where}: unknown node type {end!r}; the node types are {list(counts)}")
        ei = self.edge_index
        if not isinstance(ei, torch.Tensor) or ei.dim() != 2 or ei.shape[0] != 2:
            shape = list(ei.shape) if hasattr(ei, "shape") else type(ei).__name__
            raise GraphError(f"{where}: field 'edge_index' must have shape [2, E], got {shape}")
        if ei.is_floating_point() or ei.dtype == torch.bool or ei.is_complex():
            raise GraphError(f"{where}: field 'edge_index' must hold integer ids, got {ei.dtype}")
        for row, (end, what) in enumerate(((self.src, "source"), (self.dst, "destination"))):
            ids, n = ei[row], int(counts[end])
            bad = torch.nonzero((ids < 0) | (ids >= n)).flatten()
            if bad.numel():
                e = int(bad[0])
                raise GraphError(f"{where}: edge {e} has {what} id {int(ids[e])}, out of range for node type "
                                 f"{end!r} ({n} nodes)")
        attr = self.edge_attr
        if attr is not None:
            if not isinstance(attr, torch.Tensor) or attr.dim() not in (1, 2):
                raise GraphError(f"{where}: field 'edge_attr' must be a tensor [E] or [E, D]")
            if attr.shape[0] != self.num_edges:
                raise GraphError(f"{where}: field 'edge_attr' has {attr.shape[0]} rows, expected "
                                 f"{self.num_edges} (one per edge)")


@dataclass(eq=False)  # fields are tensors: equal means the same object
class TypedGraph:
    """Node types in a fixed order (the order of their id ranges in the union graph) and the
    relations between them. Checked when made."""

    node_types: list
    relations: list = field(default_factory=list)
    name: str = "typed"

    def __post_init__(self):
        self.node_types = list(self.node_types)
        self.relations = list(self.relations)
        self.check()

    def check(self) -> "TypedGraph":
        counts = {}
        for node_type in self.node_types:
            if not isinstance(node_type, NodeType):
                raise GraphError(f"{self.name}: node types must be NodeType, got {type(node_type).__name__}")
            node_type.check()
            if node_type.name in counts:
                raise GraphError(f"node type {node_type.name!r} is given twice")
            counts[node_type.name] = int(node_type.count)
        seen = set()
        for relation in self.relations:
            if not isinstance(relation, Relation):
                raise GraphError(f"{self.name}: relations must be Relation, got {type(relation).__name__}")
            relation.check(counts)
            if relation.key in seen:
                raise GraphError(f"relation {relation.key!r} is given twice")
            seen.add(relation.key)
        return self

    @property
    def num_nodes(self) -> int:
        return sum(int(t.count) for t in self.node_types)

    def node_type(self, name: str) -> NodeType:
        for node_type in self.node_types:
            if node_type.name == name:
                return node_type
        raise GraphError(f"no node type {name!r}; the graph has {[t.name for t in self.node_types]}")

    def relation(self, key: tuple) -> Relation:
        for relation in self.relations:
            if relation.key == tuple(key):
                return relation
        raise GraphError(f"no relation {tuple(key)!r}; the graph has {[r.key for r in self.relations]}")

    # -- PyG -----------------------------------------------------------------------------------
    @classmethod
    def from_pyg(cls, data, name: str = "pyg", edge_attr: bool = True) -> "TypedGraph":
        """From a ``torch_geometric.data.HeteroData``: each node type's ``num_nodes``, ``x``, ``y``
        (OGB's [n, 1] taken as [n]) and masks, each edge type's ``edge_index`` and ``edge_attr``
        (unless ``edge_attr=False``); other attributes are not read."""
        node_types = []
        for type_name in data.node_types:
            store = data[type_name]
            count = store.num_nodes
            if count is None:
                raise GraphError(f"node type {type_name!r}: no 'num_nodes' (nor 'x' to count them by)")
            y = store.get("y")
            if y is not None and y.dim() == 2 and y.shape[1] == 1:
                y = y[:, 0]
            node_types.append(NodeType(type_name, int(count), x=store.get("x"), y=y,
                                       **{m: store.get(m) for m in MASKS}))
        relations = []
        for key in data.edge_types:
            store = data[key]
            if store.get("edge_index") is None:
                raise GraphError(f"relation {tuple(key)!r}: no 'edge_index'")
            relations.append(Relation(*key, edge_index=store["edge_index"],
                                      edge_attr=store.get("edge_attr") if edge_attr else None))
        return cls(node_types, relations, name=name)

    def to_pyg(self):
        """A ``torch_geometric.data.HeteroData`` with the same types, vertex data and edges."""
        from torch_geometric.data import HeteroData  # optional dependency
        data = HeteroData()
        for node_type in self.node_types:
            store = data[node_type.name]
            store.num_nodes = int(node_type.count)
            for key in ("x", "y") + MASKS:
                if getattr(node_type, key) is not None:
                    store[key] = getattr(node_type, key)
        for relation in self.relations:
            store = data[relation.key]
            store.edge_index = relation.edge_index
            if relation.edge_attr is not None:
                store.edge_attr = relation.edge_attr
        return data

    def __repr__(self) -> str:
        types = ", ".join(f"{t.name}={t.count}" for t in self.node_types)
        rels = ", ".join(f"{r.src}-{r.name}->{r.dst}={r.num_edges}" for r in self.relations)
        return f"TypedGraph({self.name!r}, nodes: {types}; edges: {rels})"
