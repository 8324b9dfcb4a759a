import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnmesh import Adjacency, Graph, GraphError
from gnnmesh.models import build_model
from gnnmesh.transforms import (add_self_loops, gcn_norm, induced_subgraph, mean_norm, permute,
                                rcm_order, remove_self_loops, reorder, row_block, to_undirected)
from gnnmesh.view import GraphView

from tests.helpers import dense, random_graph


def test_edge_index_convention_and_transpose():
    g = Graph.from_edge_index(torch.tensor([[0, 1, 2, 2], [1, 0, 0, 1]]), 4)
    a = dense(g.adj)
    assert a[1, 0] == 1 and a[0, 2] == 1 and a[2, 0] == 0  # edge j -> i is A[i, j]
    t = g.adj.t()
    assert torch.equal(dense(t), a.T)
    assert g.directed and g.num_nodes == 4 and g.num_edges == 4
    assert torch.equal(g.edge_index(), torch.tensor([[1, 2, 0, 2], [0, 0, 1, 1]]))


def test_transpose_perm_maps_values():
    g = random_graph(weighted=True)
    indptr_t, indices_t, perm = g.adj.transpose_structure()
    assert torch.equal(dense(g.adj.t()), dense(g.adj).T)
    assert torch.equal(g.adj.t().values, g.adj.values[perm])


def test_duplicates_merge_and_weights_sum():
    ei = torch.tensor([[0, 0, 1], [1, 1, 0]])
    assert Graph.from_edge_index(ei, 2).num_edges == 2
    g = Graph.from_edge_index(ei, 2, edge_weight=torch.tensor([1.0, 2.0, 5.0]))
    assert dense(g.adj)[1, 0] == 3.0
    assert g.directed  # weights 3 vs 5 make it directed


def test_from_scipy_and_pyg_round_trip():
    g = random_graph(weighted=True)
    g2 = Graph.from_scipy(g.adj.to_scipy(), x=g.x)
    assert torch.equal(dense(g2.adj), dense(g.adj))
    pytest.importorskip("torch_geometric")
    g3 = Graph.from_pyg(g.to_pyg())
    assert torch.equal(dense(g3.adj), dense(g.adj))
    assert torch.equal(g3.y, g.y) and torch.equal(g3.train_mask, g.train_mask)


def test_undirected_inferred():
    g = random_graph(directed=False)
    assert not g.directed and g.adj.is_symmetric()


@pytest.mark.parametrize("weighted", [False, True])
def test_gcn_norm_formula(weighted):
    g = random_graph(weighted=weighted)
    a = dense(g.adj)
    a_hat = a + torch.diag((torch.diagonal(a) == 0).float())
    d = a_hat.sum(1)
    inv = torch.where(d > 0, d.pow(-0.5), torch.zeros_like(d))
    assert torch.allclose(dense(gcn_norm(g.adj)), inv[:, None] * a_hat * inv[None, :], atol=1e-6)


def test_mean_norm_rows_average():
    g = random_graph(weighted=True)
    m = dense(mean_norm(g.adj))
    sums = m.sum(1)
    has = g.adj.degrees() > 0
    assert torch.allclose(sums[has], torch.ones(int(has.sum())), atol=1e-6)
    assert torch.all(sums[~has] == 0)


def test_self_loops_added_once():
    g = random_graph()
    a = dense(add_self_loops(g.adj))
    assert torch.all(torch.diagonal(a) >= 1)
    assert torch.equal(torch.diagonal(dense(remove_self_loops(g).adj)), torch.zeros(g.num_nodes))


def test_to_undirected():
    g = random_graph()
    u = to_undirected(g)
    a = dense(u.adj)
    assert torch.equal(a, a.T) and not u.directed
    assert torch.all(a[dense(g.adj) != 0] != 0)


def test_permutation_is_equivariant():
    g = random_graph(weighted=True)
    order = np.random.default_rng(0).permutation(g.num_nodes)
    p = permute(g, order)
    assert torch.equal(dense(p.adj), dense(g.adj)[order][:, order])
    torch.manual_seed(0)
    model = build_model("gcn", g.num_features, 3).eval()
    out, out_p = model(GraphView(g.adj), g.x), model(GraphView(p.adj), p.x)
    assert torch.allclose(out[order], out_p, atol=1e-5)
    with pytest.raises(ValueError, match="permutation"):
        permute(g, [0] * g.num_nodes)


def test_rcm_reduces_bandwidth():
    # a ring whose ids are shuffled: RCM recovers a small bandwidth
    n = 200
    shuffle = np.random.default_rng(1).permutation(n)
    ring = np.stack([shuffle, np.roll(shuffle, 1)])
    g = Graph.from_edge_index(np.concatenate([ring, ring[::-1]], axis=1), n)

    def bandwidth(graph):
        return int((graph.adj.row() - graph.adj.indices).abs().max())

    assert sorted(rcm_order(g)) == list(range(n))
    assert bandwidth(reorder(g, "rcm")) <= 2 < bandwidth(g)
    assert reorder(g, "degree").num_edges == g.num_edges


def test_row_block_and_induced_subgraph():
    g = random_graph(weighted=True)
    rows = [1, 5, 9]
    assert torch.equal(dense(row_block(g.adj, rows)), dense(g.adj)[rows])
    sub = induced_subgraph(g, rows)
    assert torch.equal(dense(sub.adj), dense(g.adj)[rows][:, rows])
    assert torch.equal(sub.x, g.x[rows])


@pytest.mark.parametrize("edges, message", [
    ([[0, -1], [1, 0]], "negative node id"),
    ([[0, 9], [1, 0]], "out of range"),
    ([[0, 1.5], [1, 0]], "non-integer"),
])
def test_bad_edges(edges, message):
    with pytest.raises(GraphError, match=message):
        Graph.from_edge_index(np.array(edges), 3, source="edges.txt")


@pytest.mark.parametrize("field, value, message", [
    ("x", torch.zeros(4, 2), "field 'x'"),
    ("y", torch.zeros(2, dtype=torch.long), "field 'y'"),
    ("train_mask", torch.zeros(2, dtype=torch.bool), "field 'train_mask'"),
    ("x", torch.tensor([[0.0], [float("nan")], [0.0]]), "non-finite"),
    ("x", torch.tensor([[0.0], [float("inf")], [0.0]]), "non-finite"),
    ("y", torch.tensor([0, -1, 0]), "negative label"),
])
def test_bad_vertex_data(field, value, message):
    with pytest.raises(GraphError, match=message):
        Graph.from_edge_index(torch.tensor([[0, 1], [1, 2]]), 3, **{field: value})


def test_labels_out_of_range_and_overlapping_masks():
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(GraphError, match="out of range for 2 classes"):
        Graph.from_edge_index(ei, 3, y=torch.tensor([0, 1, 2]), num_classes=2)
    m = torch.tensor([True, True, False])
    with pytest.raises(GraphError, match="overlap"):
        Graph.from_edge_index(ei, 3, train_mask=m, val_mask=m.clone())


def test_empty_graph():
    with pytest.raises(GraphError, match="empty"):
        Graph.from_edge_index(np.zeros((2, 0), dtype=np.int64), 0)
    with pytest.raises(GraphError, match="must be square"):
        Graph.from_scipy(sp.csr_matrix((2, 3)))


@pytest.mark.parametrize("shape", [(40, 40), (30, 45), (45, 30)])
@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_self_loops_and_norms_match_scipy_at_any_block_size(shape, block, monkeypatch):
    """Built block by block of rows: the same sorted CSR as scipy's A + (missing loops),
    whatever the block size, on rectangular shapes, empty rows and existing loops."""
    from gnnmesh import transforms
    rng = np.random.default_rng(sum(shape) + block)
    mat = sp.random(*shape, density=0.15, random_state=rng, format="csr", dtype=np.float32)
    mat[3, :] = 0  # an empty row
    mat[5, 5] = 2.5  # an existing loop keeps its weight
    mat.eliminate_zeros()
    adj = Adjacency.from_scipy(mat)
    monkeypatch.setattr(transforms, "ENTRY_BLOCK", block)
    got = add_self_loops(adj, fill=1.5)
    diag = np.zeros(min(shape), dtype=np.float32)
    diag[mat.diagonal() == 0] = 1.5
    want = (mat + sp.eye(*shape, dtype=np.float32, format="csr").multiply(np.pad(diag, (0, shape[0] - min(shape)))[:, None])).tocsr()
    want.sort_indices()
    assert np.array_equal(got.indptr.numpy(), want.indptr) and np.array_equal(got.indices.numpy(), want.indices)
    assert np.array_equal(got.values.numpy(), want.data.astype(np.float32))
    if shape[0] == shape[1]:
        monkeypatch.setattr(transforms, "ENTRY_BLOCK", 1 << 20)
        whole = gcn_norm(adj).values, mean_norm(adj).values
        monkeypatch.setattr(transforms, "ENTRY_BLOCK", block)
        assert torch.equal(gcn_norm(adj).values, whole[0]) and torch.equal(mean_norm(adj).values, whole[1])


def test_targets_as_labels_and_the_output_width():
    """Labels may be targets: [N, T] (multilabel or regression) or [N] floats; num_classes is
    then the output width; a PyG Data.y of [N, T] loads as targets and [N, 1] class ids as [N]."""
    from types import SimpleNamespace as Data  # what from_pyg reads of a torch_geometric Data
    ei = torch.tensor([[0, 1], [1, 2]])
    matrix = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    assert Graph.from_edge_index(ei, 3, y=matrix).num_classes == 2
    assert Graph.from_edge_index(ei, 3, y=torch.tensor([0.5, 1.5, 2.0])).num_classes == 1
    graph = random_graph(n=10, e=20)
    assert graph.replace(y=torch.zeros(10, 4)).num_classes == 4  # new targets take their own width
    proteins = Graph.from_pyg(Data(edge_index=ei, y=torch.tensor([[0, 1], [1, 1], [0, 0]]), num_nodes=3))
    assert proteins.y.dtype == torch.float32 and torch.equal(proteins.y, matrix) and proteins.num_classes == 2
    arxiv = Graph.from_pyg(Data(edge_index=ei, y=torch.tensor([[2], [0], [1]]), num_nodes=3))
    assert arxiv.y.tolist() == [2, 0, 1] and arxiv.num_classes == 3
    with pytest.raises(GraphError, match=r"field 'y' has shape \[3, 2, 1\], expected \[3\]"):
        Graph.from_edge_index(ei, 3, y=torch.zeros(3, 2, 1))
    with pytest.raises(GraphError, match=r"field 'y' must hold class ids or numeric targets, got torch.bool"):
        Graph.from_edge_index(ei, 3, y=torch.zeros(3, 2, dtype=torch.bool))


# -- sizes bounded before they allocate ---------------------------------------------------------

@pytest.mark.parametrize("label", [10**9, 2**62])
def test_a_huge_label_is_refused_naming_the_node(label):
    """The output width comes from the largest label: a label of 10^9 would build a model and
    logits of 10^9 columns (terabytes), so it is refused as a label, naming the node."""
    g = random_graph(n=20, e=60, seed=0, features=3, classes=3)
    y = g.y.clone()
    y[7] = label
    with pytest.raises(GraphError, match=f"field 'y' has label {label} at node 7: class ids must be below 65,536"):
        Graph(g.adj, x=g.x, y=y).validate()


def test_an_output_width_beyond_the_bound_is_refused():
    g = random_graph(n=20, e=60, seed=0, features=3, classes=3)
    with pytest.raises(GraphError, match="num_classes .the output width. is 1,000,000,000,000, more than"):
        Graph(g.adj, x=g.x, y=g.y, num_classes=10**12).validate()


def test_zero_width_targets_are_bad_labels():
    """[N, 0] targets hold nothing to learn: refused as labels, not trained into a loss of no number."""
    g = random_graph(n=20, e=60, seed=0, features=3, classes=3)
    with pytest.raises(GraphError, match=r"field 'y' has shape \[20, 0\]: no targets per node"):
        Graph(g.adj, x=g.x, y=torch.zeros(20, 0)).validate()


def test_the_random_split_is_sized_by_the_nodes_not_the_labels():
    """Stratifying by class counts no class id past the labels present: a label of 2^62 splits as
    its rank among them does (it used to count up to it: an OOM kill at 10^9, an error at 2^62)."""
    from gnnmesh.datasets._build import random_split
    y = np.array([0, 1, 1, 0, 2, 2, 1, 0, 2, 1] * 3, dtype=np.int64)
    huge = np.where(y == 2, 2**62, np.where(y == 1, 10**9, 0))
    masks, info = random_split(len(y), y, 0.6, 0.2, seed=3)
    same, same_info = random_split(len(y), huge, 0.6, 0.2, seed=3)
    assert info == same_info and all(torch.equal(masks[m], same[m]) for m in masks)
