"""A typed union graph through the dataset cache: its relations and the meta that types it
(node types, typed relations, each relation's edges and edge features) come back exactly, and
a damaged node-type record is refused as a damaged entry."""

import json

import pytest
import torch

from gnnmesh.datasets import cache
from gnnmesh.typed import from_graph, to_graph
from gnnmesh.typed.stored_meta import restored

from tests.typed.helpers import assert_same, small_typed


@pytest.mark.parametrize("add_reverse", [False, True])
def test_a_cached_typed_graph_is_the_typed_graph_it_was(tmp_path, add_reverse):
    graph = to_graph(small_typed(), add_reverse=add_reverse)
    assert cache.save(graph, tmp_path / "entry")
    read = cache.load(tmp_path / "entry")
    assert read.adj.relations.names == graph.adj.relations.names
    assert (read.adj.edge_features is None) == (graph.adj.edge_features is None)
    if graph.adj.edge_features is not None:
        assert torch.equal(read.adj.edge_features, graph.adj.edge_features)
    assert_same(from_graph(read), small_typed())


def test_damaged_node_types_are_a_damaged_entry(tmp_path):
    assert cache.save(to_graph(small_typed()), tmp_path / "entry")
    info = json.loads((tmp_path / "entry" / "graph.json").read_text())
    info["meta"]["node_types"]["offsets"] = [0, 5]
    (tmp_path / "entry" / "graph.json").write_text(json.dumps(info))
    with pytest.warns(UserWarning, match="node types' offsets do not match"):
        assert cache.load(tmp_path / "entry") is None
    with pytest.raises(ValueError, match="node types are damaged"):
        restored({"node_types": {"names": ["a"]}}, None)


def test_a_plain_graphs_edge_features_are_cached_too(tmp_path):
    from gnnmesh.graph import Graph
    attr = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    graph = Graph.from_edge_index(torch.tensor([[0, 1, 2, 3, 0, 2], [1, 2, 3, 0, 2, 0]]), 4, edge_attr=attr,
                                  directed=True)
    assert cache.save(graph, tmp_path / "entry")
    read = cache.load(tmp_path / "entry")
    assert torch.equal(read.adj.edge_features, graph.adj.edge_features) and read.adj.relations is None
