"""Edge features on a graph's entries: checked on the way in (one line naming the field), an
entry made by several edges carries their sum, every operator's rows of them (an added loop:
its row's mean), renumbering keeps each edge's, and a typed graph's relations fill the union's."""

import numpy as np
import pytest
import torch

from gnnmesh import Graph
from gnnmesh.edge_features import operator_features
from gnnmesh.errors import ConfigError, GraphError
from gnnmesh.graph import entry_of_edges
from gnnmesh.transforms import permute
from gnnmesh.view import operator_of

EI = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])  # (source, target) pairs


def graph(attr, **kwargs) -> Graph:
    return Graph.from_edge_index(EI, 3, edge_attr=attr, **kwargs)


def by_edge(g: Graph) -> dict:
    """Each edge (source, target) with its features."""
    src, dst = g.edge_index()
    return {(int(s), int(d)): g.edge_features[e].tolist() for e, (s, d) in enumerate(zip(src, dst))}


def test_each_edge_keeps_its_features_in_any_order():
    attr = torch.arange(8.0).view(4, 2)
    assert by_edge(graph(attr)) == {(0, 1): [0.0, 1.0], (1, 2): [2.0, 3.0], (2, 0): [4.0, 5.0], (2, 1): [6.0, 7.0]}


@pytest.mark.parametrize("attr,message", [
    (torch.ones(3, 2), "edge_index: field 'edge_attr' has shape [3, 2], expected [4, F] (F >= 1 features on each "
                       "of the 4 edges)"),
    (torch.ones(4), "edge_index: field 'edge_attr' has shape [4], expected [4, F]"),
    (torch.ones(4, 2, dtype=torch.int64), "edge_index: field 'edge_attr' must hold floats, got torch.int64"),
    (torch.tensor([[0.0], [1.0], [float("nan")], [2.0]]),
     "edge_index: field 'edge_attr' has a non-finite value nan at edge 2, feature 0"),
])
def test_bad_features_are_refused_in_one_line_naming_the_field(attr, message):
    with pytest.raises(GraphError) as error:
        graph(attr)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_an_entry_made_by_several_edges_carries_their_sum():
    ei = torch.tensor([[0, 0, 1], [1, 1, 0]])
    g = Graph.from_edge_index(ei, 2, edge_attr=torch.tensor([[1.0], [2.0], [5.0]]))
    assert g.num_edges == 2 and by_edge(g) == {(0, 1): [3.0], (1, 0): [5.0]}


def test_undirected_loading_that_adds_reverse_edges_is_refused():
    with pytest.raises(GraphError, match="directed=False adds 2 reverse edges, which have no features"):
        graph(torch.ones(4, 1), directed=False)
    both = torch.cat([EI, EI.flip(0)], 1)
    assert Graph.from_edge_index(both, 3, edge_attr=torch.ones(8, 1), directed=False).num_edges == 6


def test_an_operator_carries_its_entries_features_and_an_added_loop_its_rows_mean():
    g = graph(torch.arange(8.0).view(4, 2))
    assert torch.equal(operator_features("sum", g.adj, operator_of), g.edge_features)
    assert torch.equal(operator_features("mean", g.adj, operator_of), g.edge_features)
    loop = operator_of("loop", g.adj)
    features = operator_features("loop", g.adj, operator_of)
    rows, cols = loop.row(), loop.indices
    carried = {(int(c), int(r)): features[e].tolist() for e, (r, c) in enumerate(zip(rows, cols))}
    # node 1's in-edges: 0 -> 1 [0, 1] and 2 -> 1 [6, 7]; node 2's: 1 -> 2 [2, 3]; node 0's: 2 -> 0 [4, 5]
    assert carried[(1, 1)] == [3.0, 4.0] and carried[(2, 2)] == [2.0, 3.0] and carried[(0, 0)] == [4.0, 5.0]
    assert carried[(2, 1)] == [6.0, 7.0]


def test_a_graph_without_features_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="operator 'loop': the graph has no edge features"):
        operator_features("loop", Graph.from_edge_index(EI, 3).adj, operator_of)


def test_renumbering_keeps_each_edges_features():
    g = graph(torch.arange(8.0).view(4, 2))
    order = np.array([2, 0, 1])  # new node k is old node order[k]
    moved = permute(g, order)
    new_of = {int(old): new for new, old in enumerate(order)}
    assert by_edge(moved) == {(new_of[s], new_of[d]): f for (s, d), f in by_edge(g).items()}


def test_entries_of_edges_that_are_none_are_minus_one():
    adj = graph(torch.ones(4, 1)).adj
    # entries by target: 2 -> 0, then 0 -> 1 and 2 -> 1, then 1 -> 2
    assert entry_of_edges(adj, np.array([1, 1, 0]), np.array([0, 1, 2])).tolist() == [1, -1, 0]


def test_a_typed_graphs_relations_fill_the_unions_features():
    from gnnmesh.typed import NodeType, Relation, TypedGraph, to_graph
    cites = Relation("p", "cites", "p", torch.tensor([[0, 1, 1], [1, 0, 0]]), torch.tensor([[1.0], [2.0], [4.0]]))
    wrote = Relation("a", "wrote", "p", torch.tensor([[0], [1]]), torch.tensor([[8.0]]))
    typed = TypedGraph([NodeType("p", 2), NodeType("a", 1)], [cites, wrote])
    g = to_graph(typed, add_reverse=True)
    # p1 -> p0 twice (2 + 4), p0 -> p1 by cites (1) and by the reverse of the other two (2 + 4)
    assert by_edge(g) == {(1, 0): [6.0 + 1.0], (0, 1): [1.0 + 6.0], (2, 1): [8.0], (1, 2): [8.0]}
    assert to_graph(typed).edge_features.shape == (3, 1)
    cites.edge_attr = torch.ones(3, 2)  # widths differ: the union has none, each relation keeps its own
    assert to_graph(TypedGraph(typed.node_types, [cites, wrote])).edge_features is None
