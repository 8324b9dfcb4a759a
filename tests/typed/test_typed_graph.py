"""TypedGraph: every bad field is one GraphError naming the node type or relation and the field;
PyG's HeteroData both ways."""

import pytest
import torch

from gnnmesh.errors import GraphError
from gnnmesh.typed import NodeType, Relation, TypedGraph
from tests.typed.helpers import assert_same, small_typed


def masks(n, train):
    split = torch.zeros(3, n, dtype=torch.bool)
    split[0, :train], split[1, train:] = True, True
    return dict(train_mask=split[0], val_mask=split[1], test_mask=split[2])


def build(node_types=None, relations=None):
    node_types = node_types or [NodeType("paper", 3), NodeType("fos", 2)]
    relations = relations if relations is not None else [Relation("paper", "topic", "fos", torch.tensor([[0, 2], [1, 0]]))]
    return TypedGraph(node_types, relations)


def test_a_good_graph_passes():
    typed = small_typed()
    assert typed.num_nodes == 10 and typed.node_type("author").width == 2
    assert typed.relation(("paper", "cites", "paper")).num_edges == 5


@pytest.mark.parametrize("make, message", [
    (lambda: build(relations=[Relation("paper", "cites", "fieldx", torch.zeros(2, 0, dtype=torch.long))]),
     "relation ('paper', 'cites', 'fieldx'): unknown node type 'fieldx'"),
    (lambda: build(relations=[Relation("paper", "topic", "fos", torch.tensor([[0, 1, 2], [1, 2, 0]]))]),
     "relation ('paper', 'topic', 'fos'): edge 1 has destination id 2, out of range for node type 'fos' (2 nodes)"),
    (lambda: build(relations=[Relation("paper", "topic", "fos", torch.tensor([[0, -1], [1, 0]]))]),
     "relation ('paper', 'topic', 'fos'): edge 1 has source id -1, out of range for node type 'paper' (3 nodes)"),
    (lambda: build(relations=[Relation("paper", "topic", "fos", torch.tensor([[0.0], [1.0]]))]),
     "relation ('paper', 'topic', 'fos'): field 'edge_index' must hold integer ids, got torch.float32"),
    (lambda: build(relations=[Relation("paper", "topic", "fos", torch.tensor([0, 1]))]),
     "relation ('paper', 'topic', 'fos'): field 'edge_index' must have shape [2, E], got [2]"),
    (lambda: build([NodeType("paper", 3, x=torch.zeros(4, 2)), NodeType("fos", 2)]),
     "node type 'paper': field 'x' has shape [4, 2], expected [3, F]"),
    (lambda: build([NodeType("paper", 3, x=torch.zeros(3, 2, dtype=torch.long)), NodeType("fos", 2)]),
     "node type 'paper': field 'x' must be a dense float tensor"),
    (lambda: build([NodeType("paper", 3, y=torch.tensor([0, 1, 1])), NodeType("fos", 2)]),
     "node type 'paper': has labels 'y' but no 'train_mask', 'val_mask', 'test_mask': a target type needs"),
    (lambda: build([NodeType("paper", 3), NodeType("fos", 2, **masks(2, 1))]),
     "node type 'fos': has 'train_mask', 'val_mask', 'test_mask' but no labels 'y'"),
    (lambda: build([NodeType("paper", 3, y=torch.tensor([0.5, 1, 1]), **masks(3, 2)), NodeType("fos", 2)]),
     "node type 'paper': field 'y' must hold integer class ids [3], got torch.float32"),
    (lambda: build([NodeType("paper", 3, y=torch.tensor([0, -1, 1]), **masks(3, 2)), NodeType("fos", 2)]),
     "node type 'paper': field 'y' has a negative label -1 at node 1"),
    (lambda: build(relations=[Relation("paper", "topic", "fos", torch.tensor([[0, 2], [1, 0]]),
                                       edge_attr=torch.zeros(3, 4))]),
     "relation ('paper', 'topic', 'fos'): field 'edge_attr' has 3 rows, expected 2 (one per edge)"),
    (lambda: build(relations=[Relation("paper", "topic", "fos", torch.tensor([[0], [1]]))] * 2),
     "relation ('paper', 'topic', 'fos') is given twice"),
    (lambda: build([NodeType("paper", 3), NodeType("paper", 2)], relations=[]),
     "node type 'paper' is given twice"),
    (lambda: build(relations=[Relation("paper", "top@ic", "fos", torch.tensor([[0], [1]]))]),
     "relation ('paper', 'top@ic', 'fos'): '@' is reserved in names"),
    (lambda: build([NodeType("pa@per", 3)], relations=[]),
     "node type 'pa@per': '@' is reserved in names"),
    (lambda: build([NodeType("paper__x", 3)], relations=[]),
     "node type 'paper__x': '__' is reserved in names"),
    (lambda: build([NodeType("paper", -1)], relations=[]),
     "node type 'paper': field 'count' must be an integer >= 0, got -1"),
])
def test_a_bad_field_is_one_line_naming_it(make, message):
    with pytest.raises(GraphError) as error:
        make()
    text = str(error.value)
    assert "\n" not in text and text.startswith(message), text


def test_heterodata_round_trip():
    pytest.importorskip("torch_geometric")
    typed = small_typed()
    data = typed.to_pyg()
    assert data["paper"].x.shape == (5, 3) and data["fos"].num_nodes == 2
    assert data["paper", "cites", "paper"].edge_attr.shape == (5, 2)
    assert_same(TypedGraph.from_pyg(data, name="small"), typed)
    again = TypedGraph.from_pyg(data).to_pyg()
    assert set(again.node_types) == set(data.node_types) and set(again.edge_types) == set(data.edge_types)


def test_heterodata_ogb_labels_and_a_missing_count():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import HeteroData
    data = HeteroData()
    data["paper"].num_nodes = 3
    data["paper"].y = torch.tensor([[1], [0], [2]])  # OGB's [n, 1]
    for key, value in masks(3, 2).items():
        data["paper"][key] = value
    data["paper", "cites", "paper"].edge_index = torch.tensor([[0], [1]])
    assert TypedGraph.from_pyg(data).node_type("paper").y.tolist() == [1, 0, 2]
    data["venue"].year = torch.tensor([2000])  # no num_nodes, no x
    del data["venue"]
    data["paper", "at", "venue"].edge_index = torch.tensor([[0], [0]])
    with pytest.raises(GraphError, match="relation \\('paper', 'at', 'venue'\\): unknown node type 'venue'"):
        TypedGraph.from_pyg(data)
