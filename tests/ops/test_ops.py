import pytest
import torch

from gnnmesh.ops import edge_softmax, sddmm, spmm
from gnnmesh.transforms import add_self_loops

from tests.helpers import dense, random_graph


@pytest.fixture(scope="module")
def adj():
    return add_self_loops(random_graph(n=20, e=80, weighted=True).adj)


def f64(*shape, grad=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=torch.float64, generator=gen).requires_grad_(grad)


def test_spmm_matches_dense_and_gradcheck(adj):
    x = f64(adj.shape[1], 5)
    values = adj.values.double().requires_grad_()
    assert torch.allclose(spmm(adj, x, values), dense(adj).double() @ x)
    assert torch.autograd.gradcheck(lambda v, x: spmm(adj, x, v), (values, x), fast_mode=True)


def test_spmm_uses_stored_values_by_default(adj):
    x = torch.randn(adj.shape[1], 4)
    assert torch.allclose(spmm(adj, x), dense(adj) @ x, atol=1e-6)
    assert torch.allclose(spmm(adj.with_values(None), x), (dense(adj) != 0).float() @ x, atol=1e-6)


def test_spmm_multihead_gradcheck():
    adj = add_self_loops(random_graph(n=8, e=16, weighted=True).adj)
    x, values = f64(adj.shape[1], 3, 4), f64(adj.nnz, 3, seed=1)
    out = spmm(adj, x, values)
    for h in range(3):
        assert torch.allclose(out[:, h], dense(adj, values[:, h].detach()) @ x[:, h].detach())
    assert torch.autograd.gradcheck(lambda v, x: spmm(adj, x, v), (values, x), fast_mode=True)


def test_spmm_rectangular():
    from gnnmesh.transforms import row_block
    g = random_graph(n=25, e=90, weighted=True)
    block = row_block(g.adj, [3, 7, 8, 20])
    x = f64(25, 3)
    assert block.shape == (4, 25)
    assert torch.allclose(spmm(block, x), dense(g.adj).double()[[3, 7, 8, 20]] @ x)
    assert torch.autograd.gradcheck(lambda x: spmm(block, x), (x,), fast_mode=True)


def test_sddmm_dot_and_add(adj):
    a, b = f64(adj.shape[0], 6), f64(adj.shape[1], 6, seed=2)
    row, col = adj.row(), adj.indices
    assert torch.allclose(sddmm(adj, a, b, "dot"), (a[row] * b[col]).sum(-1))
    assert torch.autograd.gradcheck(lambda a, b: sddmm(adj, a, b, "dot"), (a, b), fast_mode=True)
    s, t = f64(adj.shape[0], 2), f64(adj.shape[1], 2, seed=3)
    assert torch.allclose(sddmm(adj, s, t, "add"), s[row] + t[col])
    assert torch.autograd.gradcheck(lambda s, t: sddmm(adj, s, t, "add"), (s, t), fast_mode=True)
    with pytest.raises(ValueError, match="unknown op"):
        sddmm(adj, a, b, "mul")


def test_edge_softmax_matches_dense_and_gradcheck(adj):
    scores = f64(adj.nnz, 2)
    out = edge_softmax(adj, scores)
    for h in range(2):
        logits = torch.full(adj.shape, float("-inf"), dtype=torch.float64)
        logits[adj.row(), adj.indices] = scores[:, h].detach()
        expected = torch.softmax(logits, dim=1)[adj.row(), adj.indices]
        assert torch.allclose(out[:, h], expected)
    assert torch.autograd.gradcheck(lambda s: edge_softmax(adj, s), (scores,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda s: edge_softmax(adj, s), (f64(adj.nnz),), fast_mode=True)


def test_edge_softmax_is_stable_for_large_scores(adj):
    out = edge_softmax(adj, torch.full((adj.nnz,), 1e4))
    assert torch.isfinite(out).all()


def test_spmm_rejects_shape_mismatch(adj):
    with pytest.raises(ValueError, match="rows"):
        spmm(adj, torch.randn(adj.shape[1] + 1, 2))
