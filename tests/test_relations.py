"""A typed graph's per-relation operators: each relation's entries of the union, normalised
alone, as a brute force over the tagged edges builds them; malformed tags and unknown names
refused in one line."""

import numpy as np
import pytest
import torch

from gnnmesh.errors import GraphError
from gnnmesh.graph import Adjacency
from gnnmesh.relations import Relations
from gnnmesh.view import operator_of, operators_of

from tests.helpers import dense, random_graph, typed_graph


def tagged_edges(adj):
    """``{relation name: set of (dst, src)}`` from the union's tags."""
    rel = adj.relations
    rows, cols = adj.row().numpy(), adj.indices.numpy()
    out = {name: set() for name in rel.names}
    for e in range(adj.nnz):
        for r in rel.ids[rel.ptr[e]:rel.ptr[e + 1]].tolist():
            out[rel.names[r]].add((int(rows[e]), int(cols[e])))
    return out


def test_each_relations_operators_are_its_entries_normalised_alone():
    graph = typed_graph()
    edges = tagged_edges(graph.adj)
    assert any(np.diff(graph.adj.relations.ptr.numpy()) > 1), "some entry should hold two relations"
    n = graph.num_nodes
    for name, pairs in edges.items():
        pattern = torch.zeros(n, n)
        for i, j in pairs:
            pattern[i, j] = 1
        degree = pattern.sum(1, keepdim=True)
        assert torch.equal(dense(operator_of(f"sum@{name}", graph.adj)), pattern)
        assert torch.allclose(dense(operator_of(f"mean@{name}", graph.adj)),
                              torch.where(degree > 0, pattern / degree.clamp(min=1), pattern), atol=1e-7)
        assert torch.equal(dense(operator_of(f"loop@{name}", graph.adj)), torch.maximum(pattern, torch.eye(n)))
    names = operators_of(graph.adj)
    assert {"gcn", "mean@a__x__a", "loop@a__rev_w__c"} <= set(names)
    assert operators_of(random_graph().adj) == [name for name in names if "@" not in name]


def test_tags_survive_new_values_and_not_a_new_structure():
    adj = typed_graph().adj
    assert adj.with_values(torch.ones(adj.nnz)).relations is adj.relations
    assert adj.t().relations is None


@pytest.mark.parametrize("ptr,ids,names,fragment", [
    ([0, 1, 2], [0, 0], ("r",), "every one of the 3 entries"),
    ([0, 1, 1, 2], [0, 0], ("r",), "one or more relations"),
    ([0, 1, 2, 3], [0, 1, 0], ("r",), "relation ids must be 0 to 0"),
    ([0, 1, 2, 3], [0, 0, 0], ("r", "r"), "names must differ"),
    ([0, 1, 2, 3], [0, 0, 0], ("a@b",), "without '@'"),
])
def test_malformed_tags_are_one_line(ptr, ids, names, fragment):
    adj = Adjacency.from_coo([0, 1, 2], [1, 2, 0], (3, 3))
    with pytest.raises(GraphError, match=fragment):
        adj.with_relations(Relations(names, torch.tensor(ptr), torch.tensor(ids)))


def test_unknown_relation_or_norm_or_untyped_graph_is_one_line():
    graph = typed_graph()
    with pytest.raises(GraphError, match="no relation 'nope'; the graph has"):
        operator_of("mean@nope", graph.adj)
    with pytest.raises(GraphError, match="unknown normalisation 'gcn'"):
        operator_of("gcn@a__x__a", graph.adj)
    with pytest.raises(GraphError, match="has no relations"):
        operator_of("mean@a__x__a", random_graph().adj)
