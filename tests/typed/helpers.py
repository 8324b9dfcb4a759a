"""A small typed graph with every kind of field, and an exact comparison of typed graphs."""

import torch

from gnnmesh.typed import NodeType, Relation, TypedGraph


def small_typed() -> TypedGraph:
    """Papers (features, labels, split), authors (features of another width), fields of study
    (nothing); cites lists a pair twice and holds a pair that cites also holds the other way."""
    g = torch.Generator().manual_seed(0)
    paper = NodeType("paper", 5, x=torch.randn(5, 3, generator=g), y=torch.tensor([0, 2, 1, 1, 0]),
                     train_mask=torch.tensor([1, 1, 0, 0, 0]).bool(), val_mask=torch.tensor([0, 0, 1, 0, 0]).bool(),
                     test_mask=torch.tensor([0, 0, 0, 1, 1]).bool())
    author = NodeType("author", 3, x=torch.randn(3, 2, generator=g))
    fos = NodeType("fos", 2)
    relations = [Relation("paper", "cites", "paper", torch.tensor([[0, 1, 3, 1, 4], [1, 0, 2, 0, 3]]),
                          edge_attr=torch.randn(5, 2, generator=g)),
                 Relation("paper", "written_by", "author", torch.tensor([[0, 2, 4, 4], [1, 0, 2, 0]])),
                 Relation("paper", "topic", "fos", torch.tensor([[1, 3], [0, 1]]))]
    return TypedGraph([paper, author, fos], relations, name="small")


def assert_same(a: TypedGraph, b: TypedGraph):
    """Every field equal, in order, dtypes included."""
    def same(u, v):
        if u is None or v is None:
            return u is None and v is None
        return u.dtype == v.dtype and torch.equal(u, v)
    assert [t.name for t in a.node_types] == [t.name for t in b.node_types]
    for s, t in zip(a.node_types, b.node_types):
        assert s.count == t.count, s.name
        for key in ("x", "y", "train_mask", "val_mask", "test_mask"):
            assert same(getattr(s, key), getattr(t, key)), (s.name, key)
    assert [r.key for r in a.relations] == [r.key for r in b.relations]
    for r, q in zip(a.relations, b.relations):
        assert torch.equal(r.edge_index.long(), q.edge_index.long()), r.key
        assert same(r.edge_attr, q.edge_attr), r.key
