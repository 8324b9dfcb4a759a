"""Typed (heterogeneous) graphs: node types and the relations between them.

    >>> from gnnmesh.typed import NodeType, Relation, TypedGraph, to_graph, from_graph
    >>> typed = TypedGraph([NodeType("paper", 3, x=x, y=y, train_mask=..., val_mask=..., test_mask=...),
    ...                     NodeType("author", 2)],
    ...                    [Relation("paper", "written_by", "author", edge_index)])
    >>> graph = to_graph(typed, add_reverse=True)   # the one Graph gnnmesh trains on
    >>> from_graph(graph)                            # the typed graph back

``typed_graph.py``: the data model and its checks (and PyG's ``HeteroData`` both ways);
``union.py``: the union graph over global ids, its relations and ``meta``, and back.
"""

from ..graph import TYPED_PYG
from ..registries import add
from .typed_graph import NodeType, Relation, TypedGraph
from .union import NodeTypes, REVERSE_PREFIX, from_graph, to_graph, union_name, untyped

__all__ = ["NodeType", "Relation", "TypedGraph", "NodeTypes", "to_graph", "from_graph", "union_name", "untyped",
           "REVERSE_PREFIX", "register_pyg"]


def graph_from_pyg(data, name: str = "pyg", edge_attr: bool = True, add_reverse: bool = False):
    """``Graph.from_pyg`` of a ``HeteroData``: its union graph."""
    return to_graph(TypedGraph.from_pyg(data, name=name, edge_attr=edge_attr), add_reverse=add_reverse)


def graph_to_pyg(graph):
    """``Graph.to_pyg`` of a typed union graph: its ``HeteroData``."""
    return from_graph(graph).to_pyg()


def register_pyg() -> None:
    """Hand ``Graph.from_pyg``/``to_pyg`` the converters of typed graphs (once per process)."""
    if "from_pyg" not in TYPED_PYG:
        add(TYPED_PYG, "from_pyg", graph_from_pyg, "typed PyG converter")
        add(TYPED_PYG, "to_pyg", graph_to_pyg, "typed PyG converter")


register_pyg()
