"""A typed graph as the one ``Graph`` gnnmesh trains on, and back.

The union graph numbers the nodes globally: the node types' id ranges one after another, in the
typed graph's order (type ``t``'s local id ``i`` is global id ``offsets[t] + i``). Its adjacency is
the union of every relation's edges, unweighted; a pair joined by several relations is one entry
carrying several relation ids (``gnnmesh.relations.Relations``, names ``src__name__dst``). ``x`` is
one float32 matrix as wide as the widest type's features, each type's in its first columns and
zeros elsewhere; ``y`` and the masks hold the target types' labels and splits (label 0 and no set
on every other row).

``graph.meta`` keeps what the union alone cannot say, so that ``from_graph`` gives the typed graph
back exactly:

- ``"node_types"``: ``NodeTypes`` (names, offsets, feature widths, target types);
- ``"typed_relations"``: the typed graph's own relations ``(src, name, dst)``, in order (reverses
  added by ``add_reverse`` are not among them);
- ``"relation_edges"``: per union relation name, the union entry of each of the relation's edges,
  in the order its ``edge_index`` gave them (int64 [E]; a repeated edge names its entry again);
- ``"edge_features"``: per union relation name, its ``edge_attr`` as given: row ``k`` belongs to
  the relation's ``k``-th edge, whose entry is ``relation_edges[name][k]``.

The union's entries carry the relations' edge features too (``Adjacency.edge_features``, what
models read): when every relation with an ``edge_attr`` has F features per edge (``[E]`` is one),
an entry's are the sum of its edges' (a relation without ``edge_attr`` adds zeros; a reverse
added by ``add_reverse`` carries its relation's, as PyG's ``ToUndirected`` copies them). Relations
of different widths leave the union without features (each relation's stay in the meta).

These stay true of the graph ``to_graph`` returns; a graph derived from it (a part, a permutation)
has other entries and starts without relations (see ``Adjacency.relations``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Adjacency, Graph, check_edge_features
from ..relations import Relations
from .typed_graph import MASKS, NAME_JOINER, NodeType, Relation, TypedGraph

REVERSE_PREFIX = "rev_"
TYPED_META = ("node_types", "typed_relations", "relation_edges", "edge_features")


@dataclass(frozen=True, eq=False)
class NodeTypes:
    """The node types of a union graph: type ``names[t]`` holds global ids
    ``offsets[t]:offsets[t + 1]`` (``offsets`` int64, T + 1 of them), its features in the first
    ``widths[t]`` columns of ``x`` (0: none); ``targets`` name the types with labels and masks."""

    names: tuple
    offsets: np.ndarray
    widths: tuple
    targets: tuple

    def index(self, name: str) -> int:
        if name not in self.names:
            raise GraphError(f"no node type {name!r}; the graph has {list(self.names)}")
        return self.names.index(name)

    def ids(self, name: str) -> slice:
        """The global ids of type ``name``."""
        t = self.index(name)
        return slice(int(self.offsets[t]), int(self.offsets[t + 1]))

    def type_of(self, ids) -> np.ndarray:
        """The type index of every global id in ``ids``."""
        return np.searchsorted(self.offsets, np.asarray(ids), side="right") - 1


def union_name(src: str, name: str, dst: str) -> str:
    return NAME_JOINER.join((src, name, dst))


def to_graph(typed: TypedGraph, add_reverse: bool = False) -> Graph:
    """The union ``Graph`` of ``typed`` (directed). ``add_reverse``: every relation ``(s, r, d)``
    also gets its reverse ``(d, rev_r, s)`` (one from a type to itself too), so that messages
    flow both ways; the reverses follow the relations in the relation names."""
    counts = np.array([int(t.count) for t in typed.node_types], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    start = {t.name: int(offsets[i]) for i, t in enumerate(typed.node_types)}
    n = int(offsets[-1])

    names, ends = [], []
    for r in typed.relations:
        ei = r.edge_index.to(torch.int64).numpy()
        src, dst = ei[0] + start[r.src], ei[1] + start[r.dst]
        names.append(union_name(*r.key))
        ends.append((src, dst))
    if add_reverse:
        for r, (src, dst) in zip(list(typed.relations), list(ends)):
            reverse = union_name(r.dst, REVERSE_PREFIX + r.name, r.src)
            if reverse in names:
                raise GraphError(f"relation {r.key!r}: its reverse {reverse!r} (add_reverse) is a relation of the "
                                 "graph already")
            names.append(reverse)
            ends.append((dst, src))

    adj, entries = union_adjacency(n, names, ends)
    own = len(typed.relations)
    features = union_features(adj.nnz, typed.relations, entries, add_reverse)
    if features is not None:
        adj = adj.with_edge_features(features, typed.name)
    x, y, masks = _vertex_data(typed, offsets, n)
    node_types = NodeTypes(tuple(t.name for t in typed.node_types), offsets,
                           tuple(t.width for t in typed.node_types),
                           tuple(t.name for t in typed.node_types if t.is_target))
    meta = {"node_types": node_types,
            "typed_relations": tuple(r.key for r in typed.relations),
            "relation_edges": {names[i]: torch.from_numpy(entries[i]) for i in range(own)},
            "edge_features": {names[i]: r.edge_attr for i, r in enumerate(typed.relations)
                              if r.edge_attr is not None}}
    # validate=False: the vertex data is the typed graph's, checked type by type when it was made
    return Graph.from_adjacency(adj, directed=True, validate=False, source=typed.name, name=typed.name,
                                x=x, y=y, meta=meta, **masks)


def union_adjacency(n: int, names: list, ends: list) -> tuple:
    """(the union adjacency of the relations' ``(src, dst)`` global id arrays over ``n`` nodes,
    tagged with ``Relations(names, ...)``; per relation, the entry of each of its edges).

    One sort of every edge by (destination, source, relation) gives the CSR order of the union's
    entries, each entry's relations ascending, and each edge's entry at once."""
    sizes = [int(src.shape[0]) for src, _ in ends]
    total = sum(sizes)
    count = max(len(names), 1)
    src = np.concatenate([s for s, _ in ends]) if ends else np.zeros(0, dtype=np.int64)
    dst = np.concatenate([d for _, d in ends]) if ends else np.zeros(0, dtype=np.int64)
    rel = np.repeat(np.arange(len(names), dtype=np.int64), sizes)
    key = dst * n + src
    if n * n * count < 2 ** 62:  # one int64 key per edge: the fastest sort
        combined = key * count + rel
        order = np.argsort(combined)
        combined = combined[order]
        key_sorted = combined // count
        rel_sorted = combined - key_sorted * count
        del combined
    else:
        order = np.lexsort((rel, key))
        key_sorted, rel_sorted = key[order], rel[order]
    new_entry = np.ones(total, dtype=bool)
    np.not_equal(key_sorted[1:], key_sorted[:-1], out=new_entry[1:])
    new_pair = new_entry.copy()
    new_pair[1:] |= rel_sorted[1:] != rel_sorted[:-1]
    entry_sorted = np.cumsum(new_entry) - 1
    entry_of_edge = np.empty(total, dtype=np.int64)
    entry_of_edge[order] = entry_sorted
    keys = key_sorted[new_entry]
    nnz = int(keys.shape[0])
    rows = keys // max(n, 1)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    ptr = np.zeros(nnz + 1, dtype=np.int64)
    np.cumsum(np.bincount(entry_sorted[new_pair], minlength=nnz), out=ptr[1:])
    relations = Relations(tuple(names), torch.from_numpy(ptr), torch.from_numpy(rel_sorted[new_pair]))
    adj = Adjacency(torch.from_numpy(indptr), torch.from_numpy(keys - rows * n), None, (n, n))
    bounds = np.cumsum([0] + sizes)
    return adj.with_relations(relations), [entry_of_edge[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]


def union_features(nnz: int, relations: list, entries: list, add_reverse: bool):
    """The union's ``[nnz, F]`` edge features: each entry the sum of its edges' (reverses
    included), or None when no relation has features or their widths differ."""
    attrs = [None if r.edge_attr is None else
             check_edge_features(r.edge_attr if r.edge_attr.dim() == 2 else r.edge_attr[:, None], r.num_edges,
                                 f"relation {r.key!r}") for r in relations]
    widths = {int(a.shape[1]) for a in attrs if a is not None}
    if len(widths) != 1:
        return None
    table = torch.zeros(nnz, widths.pop(), dtype=torch.float32)
    for i, attr in enumerate(attrs * (2 if add_reverse else 1)):  # a reverse follows its relation's order
        if attr is not None:
            table.index_add_(0, torch.from_numpy(entries[i]), attr)
    return table


def _vertex_data(typed: TypedGraph, offsets: np.ndarray, n: int) -> tuple:
    """(x, y, masks) of the union: each type's rows at its offset."""
    width = max((t.width for t in typed.node_types), default=0)
    x = torch.zeros(n, width, dtype=torch.float32) if width else None
    targets = [t for t in typed.node_types if t.is_target]
    y = torch.zeros(n, dtype=torch.int64) if targets else None
    masks = {m: torch.zeros(n, dtype=torch.bool) if targets else None for m in MASKS}
    for i, t in enumerate(typed.node_types):
        rows = slice(int(offsets[i]), int(offsets[i + 1]))
        if t.x is not None:
            x[rows, :t.width] = t.x
        if t.is_target:
            y[rows] = t.y
            for m in MASKS:
                masks[m][rows] = getattr(t, m)
    return x, y, masks


def untyped(graph: Graph) -> Graph:
    """The union graph as one node type and one edge type: the same entries and vertex data,
    without relations or types (what a model with no notion of types trains on)."""
    adj = graph.adj
    meta = {k: v for k, v in graph.meta.items() if k not in TYPED_META}
    plain = Adjacency(adj.indptr, adj.indices, adj.values, adj.shape)
    if adj.edge_features is not None:  # the same entries: the same features
        plain = plain.with_edge_features(adj.edge_features, graph.name)
    return graph.replace(adj=plain, meta=meta)


def from_graph(graph: Graph) -> TypedGraph:
    """The typed graph ``graph`` was made from by ``to_graph`` (relations added by ``add_reverse``
    left out). A union graph without ``meta['typed_relations']`` (built otherwise) gives back
    every relation of its adjacency, named ``src__name__dst``; one without a relation's
    ``meta['relation_edges']`` gives its edges in the union's order, without edge features."""
    types, relations = graph.meta.get("node_types"), graph.adj.relations
    if not isinstance(types, NodeTypes) or relations is None:
        raise GraphError(f"{graph.name}: not a typed graph (it needs meta['node_types'] and its adjacency's "
                         "relations); gnnmesh.typed.to_graph makes one")
    offsets = types.offsets
    node_types = []
    for t, name in enumerate(types.names):
        rows = slice(int(offsets[t]), int(offsets[t + 1]))
        width = types.widths[t]
        fields = {"x": graph.x[rows, :width].clone() if width else None}
        if name in types.targets:
            fields["y"] = graph.y[rows].clone()
            fields.update({m: getattr(graph, m)[rows].clone() for m in MASKS})
        node_types.append(NodeType(name, int(offsets[t + 1] - offsets[t]), **fields))

    keys = graph.meta.get("typed_relations")
    if keys is None:
        keys = [_split_name(name) for name in relations.names]
    edges, features = graph.meta.get("relation_edges", {}), graph.meta.get("edge_features", {})
    indices, row = graph.adj.indices, graph.adj.row()
    typed_relations = []
    for src, name, dst in keys:
        joined = union_name(src, name, dst)
        entries, attr = edges.get(joined), features.get(joined)
        if entries is None:  # the union's order: edge features, which follow the given order, cannot
            entries, attr = torch.from_numpy(relations.entries(relations.index(joined))), None
        s, d = offsets[types.index(src)], offsets[types.index(dst)]
        edge_index = torch.stack([indices[entries] - int(s), row[entries] - int(d)])
        typed_relations.append(Relation(src, name, dst, edge_index, attr))
    return TypedGraph(node_types, typed_relations, name=graph.name)


def _split_name(joined: str) -> tuple:
    parts = joined.split(NAME_JOINER)
    if len(parts) != 3:
        raise GraphError(f"relation {joined!r}: a typed graph's relations are named 'src{NAME_JOINER}name"
                         f"{NAME_JOINER}dst'")
    return tuple(parts)
