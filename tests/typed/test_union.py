"""The union Graph of a typed graph: global ids, one entry per joined pair with all its relations,
reverses, vertex data, and the typed graph back exactly (directly and through PyG)."""

import numpy as np
import pytest
import torch

from gnnmesh.errors import GraphError
from gnnmesh.graph import Graph
from gnnmesh.typed import NodeType, NodeTypes, Relation, TypedGraph, from_graph, to_graph
from tests.typed.helpers import assert_same, small_typed


def entries_of(graph) -> dict:
    """{(src, dst) global: sorted relation names} of every union entry."""
    rel, names = graph.adj.relations, graph.adj.relations.names
    src, dst = graph.adj.indices.tolist(), graph.adj.row().tolist()
    ptr, ids = rel.ptr.tolist(), rel.ids.tolist()
    return {(s, d): [names[i] for i in ids[ptr[e]:ptr[e + 1]]] for e, (s, d) in enumerate(zip(src, dst))}


def test_global_ids_union_and_vertex_data():
    typed = small_typed()
    graph = to_graph(typed)
    types = graph.meta["node_types"]
    assert isinstance(types, NodeTypes) and types.names == ("paper", "author", "fos")
    assert types.offsets.tolist() == [0, 5, 8, 10] and types.widths == (3, 2, 0) and types.targets == ("paper",)
    assert types.ids("author") == slice(5, 8) and types.type_of([0, 5, 9]).tolist() == [0, 1, 2]
    assert graph.directed and graph.num_nodes == 10 and graph.adj.values is None
    cites, wrote, topic = "paper__cites__paper", "paper__written_by__author", "paper__topic__fos"
    assert entries_of(graph) == {(0, 1): [cites], (1, 0): [cites], (3, 2): [cites], (4, 3): [cites],
                                 (0, 6): [wrote], (2, 5): [wrote], (4, 7): [wrote], (4, 5): [wrote],
                                 (1, 8): [topic], (3, 9): [topic]}
    assert graph.num_edges == 10  # cites lists (1, 0) twice: one entry
    assert graph.x.dtype == torch.float32 and graph.x.shape == (10, 3)
    assert torch.equal(graph.x[:5], typed.node_types[0].x) and torch.equal(graph.x[5:8, :2], typed.node_types[1].x)
    assert not graph.x[5:8, 2:].any() and not graph.x[8:].any()
    assert graph.y.tolist() == [0, 2, 1, 1, 0] + [0] * 5 and graph.num_classes == 3
    assert graph.train_mask.tolist() == [True, True] + [False] * 8 and not graph.test_mask[5:].any()


def test_a_pair_of_several_relations_is_one_entry_with_each():
    a = NodeType("a", 2)
    typed = TypedGraph([a], [Relation("a", "likes", "a", torch.tensor([[0, 1], [1, 0]])),
                             Relation("a", "knows", "a", torch.tensor([[0], [1]]))])
    graph = to_graph(typed)
    assert entries_of(graph) == {(0, 1): ["a__likes__a", "a__knows__a"], (1, 0): ["a__likes__a"]}
    assert graph.adj.relations.ptr.tolist() == [0, 1, 3]  # ids ascending within an entry
    assert_same(from_graph(graph), typed)


def test_add_reverse_adds_every_relation_reversed():
    typed = small_typed()
    graph = to_graph(typed, add_reverse=True)
    names = graph.adj.relations.names
    assert names == ("paper__cites__paper", "paper__written_by__author", "paper__topic__fos",
                     "paper__rev_cites__paper", "author__rev_written_by__paper", "fos__rev_topic__paper")
    entries = entries_of(graph)
    assert entries[(0, 1)] == ["paper__cites__paper", "paper__rev_cites__paper"]  # cited both ways
    assert entries[(2, 3)] == ["paper__rev_cites__paper"] and entries[(6, 0)] == ["author__rev_written_by__paper"]
    assert entries[(8, 1)] == ["fos__rev_topic__paper"] and graph.num_edges == 18
    for name in names:  # each relation's reverse holds exactly its edges turned round
        rel = graph.adj.relations.entries(graph.adj.relations.index(name))
        pairs = set(zip(graph.adj.indices[rel].tolist(), graph.adj.row()[rel].tolist()))
        if "rev_" not in name:
            reverse = name.split("__")[2] + "__rev_" + name.split("__")[1] + "__" + name.split("__")[0]
            back = graph.adj.relations.entries(graph.adj.relations.index(reverse))
            assert pairs == set(zip(graph.adj.row()[back].tolist(), graph.adj.indices[back].tolist()))
    assert_same(from_graph(graph), typed)  # the reverses are not the typed graph's


def test_a_reverse_named_as_a_relation_is_refused():
    a = NodeType("a", 2)
    typed = TypedGraph([a], [Relation("a", "cites", "a", torch.tensor([[0], [1]])),
                             Relation("a", "rev_cites", "a", torch.tensor([[1], [0]]))])
    with pytest.raises(GraphError, match="relation \\('a', 'cites', 'a'\\): its reverse 'a__rev_cites__a'"):
        to_graph(typed, add_reverse=True)


def test_round_trip_is_exact_edge_order_repeats_and_edge_features():
    typed = small_typed()
    graph = to_graph(typed)
    back = from_graph(graph)
    assert_same(back, typed)
    assert back.relations[0].edge_index.tolist() == [[0, 1, 3, 1, 4], [1, 0, 2, 0, 3]]  # as given, repeat kept
    edges = graph.meta["relation_edges"]["paper__cites__paper"]
    assert edges[1] == edges[3]  # the repeated edge names its entry twice
    assert torch.equal(graph.meta["edge_features"]["paper__cites__paper"], typed.relations[0].edge_attr)


def test_a_union_graph_without_typed_meta_gives_its_relations_in_union_order():
    graph = to_graph(small_typed())
    for key in ("typed_relations", "relation_edges"):
        del graph.meta[key]
    back = from_graph(graph)
    cites = back.relation(("paper", "cites", "paper")).edge_index
    assert cites.tolist() == [[1, 0, 3, 4], [0, 1, 2, 3]]  # by destination, repeats merged
    with pytest.raises(GraphError, match="not a typed graph"):
        from_graph(Graph.from_edge_index(torch.tensor([[0], [1]]), 2))


def test_empty_types_and_relations():
    typed = TypedGraph([NodeType("a", 0), NodeType("b", 3, x=torch.ones(3, 1))],
                       [Relation("b", "r", "a", torch.zeros(2, 0, dtype=torch.long))])
    graph = to_graph(typed, add_reverse=True)
    assert graph.num_nodes == 3 and graph.num_edges == 0 and graph.y is None and graph.x.shape == (3, 1)
    assert_same(from_graph(graph), typed)


def test_graph_pyg_round_trip_and_edge_attr():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data
    typed = small_typed()
    graph = Graph.from_pyg(typed.to_pyg(), name="small", add_reverse=True)
    assert graph.adj.relations is not None and len(graph.adj.relations.names) == 6
    assert_same(from_graph(graph), typed)
    assert_same(TypedGraph.from_pyg(graph.to_pyg(), name="small"), typed)
    assert Graph.from_pyg(typed.to_pyg(), edge_attr=False).meta["edge_features"] == {}

    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    attr = torch.arange(12.0).view(3, 4)
    featured = Graph.from_pyg(Data(edge_index=ei, edge_attr=attr, num_nodes=3))
    assert featured.adj.values is None and torch.equal(featured.edge_features, attr[[2, 0, 1]])  # CSR: by target
    back = featured.to_pyg()
    assert {(int(s), int(d)): tuple(a.tolist()) for s, d, a in zip(*back.edge_index, back.edge_attr)} == \
        {(int(s), int(d)): tuple(a.tolist()) for s, d, a in zip(*ei, attr)}
    plain = Graph.from_pyg(Data(edge_index=ei, edge_attr=torch.ones(3, 4), num_nodes=3), edge_attr=False)
    assert plain.num_edges == 3 and plain.adj.values is None
    weighted = Graph.from_pyg(Data(edge_index=ei, edge_attr=torch.tensor([[2.0], [3.0], [4.0]]), num_nodes=3))
    assert sorted(weighted.adj.values.tolist()) == [2.0, 3.0, 4.0]
    assert Graph.from_pyg(Data(edge_index=ei, edge_attr=torch.tensor([[2.0], [3.0], [4.0]]), num_nodes=3),
                          edge_attr=False).adj.values is None


def test_relation_ids_match_a_brute_force_union():
    rng = np.random.default_rng(1)
    types = [NodeType("a", 7), NodeType("b", 5)]
    rels = [Relation(s, f"r{i}", d, torch.from_numpy(np.stack([rng.integers(0, ns, 40), rng.integers(0, nd, 40)])))
            for i, (s, ns, d, nd) in enumerate([("a", 7, "a", 7), ("a", 7, "b", 5), ("b", 5, "a", 7), ("a", 7, "a", 7)])]
    typed = TypedGraph(types, rels)
    graph = to_graph(typed, add_reverse=True)
    offset = {"a": 0, "b": 7}
    expected = {}
    for r in rels:
        for s, d in r.edge_index.t().tolist():
            for name, pair in ((f"{r.src}__{r.name}__{r.dst}", (s + offset[r.src], d + offset[r.dst])),
                               (f"{r.dst}__rev_{r.name}__{r.src}", (d + offset[r.dst], s + offset[r.src]))):
                expected.setdefault(pair, set()).add(name)
    got = entries_of(graph)
    assert {k: set(v) for k, v in got.items()} == expected
    order = list(graph.adj.relations.names)
    assert all(v == sorted(v, key=order.index) for v in got.values())
    assert_same(from_graph(graph), typed)


def test_gnnmesh_graph_reads_heterodata_in_a_fresh_process():
    """graph.py cannot import gnnmesh.typed (it sits above): ``gnnmesh.Graph`` brings the converters."""
    pytest.importorskip("torch_geometric")
    import subprocess
    import sys
    code = ("import torch, gnnmesh\nfrom torch_geometric.data import HeteroData\nd = HeteroData()\n"
            "d['a'].num_nodes = 2\nd['a', 'r', 'a'].edge_index = torch.tensor([[0], [1]])\n"
            "g = gnnmesh.Graph.from_pyg(d)\nprint(g.adj.relations.names, g.to_pyg().edge_types)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "('a__r__a',) [('a', 'r', 'a')]"
