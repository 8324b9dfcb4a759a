"""The compiled CPU kernels against the ops' torch implementation (torch CSR and indexing),
on graphs with empty rows, one row holding most entries, one column and several heads; and
the fallback when numba cannot be imported."""

import sys
import warnings

import numpy as np
import pytest
import torch

from gnnmesh.errors import ConfigError
from gnnmesh.graph import Adjacency
from gnnmesh.ops import compiled, edge_softmax, sddmm, spmm

pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def every_size(monkeypatch):
    """The compiled kernels on these small graphs too (by default only from MIN_ENTRIES on)."""
    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")


def graph(n_rows=40, n_cols=30, nnz=150, giant=False, seed=0) -> Adjacency:
    """Random weighted CSR with every fourth row empty; ``giant``: row 1 holds every column."""
    rng = np.random.default_rng(seed)
    row = rng.choice(np.arange(n_rows)[np.arange(n_rows) % 4 != 0], nnz)
    col = rng.integers(0, n_cols, nnz)
    if giant:
        row, col = np.concatenate([row, np.ones(n_cols, int)]), np.concatenate([col, np.arange(n_cols)])
    return Adjacency.from_coo(row, col, (n_rows, n_cols), values=rng.random(len(row)) + 0.5)


GRAPHS = {"power-law rows": graph(), "giant row": graph(giant=True, nnz=40), "square": graph(50, 50, 400)}


def both(fn, *inputs):
    """``fn`` and its gradients with the compiled kernels and without; the two results."""
    results = []
    for off in (False, True):
        leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        if off:
            with compiled.disabled():
                out = fn(*leaves)
                grads = torch.autograd.grad(out, [t for t in leaves if t.requires_grad], torch.ones_like(out))
        else:
            out = fn(*leaves)
            grads = torch.autograd.grad(out, [t for t in leaves if t.requires_grad], torch.ones_like(out))
        results.append((out.detach(), grads))
    return results


def assert_same(fn, *inputs):
    (out, grads), (ref, ref_grads) = both(fn, *inputs)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    for g, r in zip(grads, ref_grads):
        assert torch.allclose(g, r, rtol=1e-5, atol=1e-5)


def rand(*shape, seed=0, grad=True, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(grad)


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("width", [1, 7, 64])
def test_spmm_equals_torch_csr(name, width):
    adj = GRAPHS[name]
    x, values = rand(adj.shape[1], width), rand(adj.nnz, seed=1).abs()
    assert compiled.available(adj, x)
    assert_same(lambda v, x: spmm(adj, x, v), values, x)
    assert_same(lambda x: spmm(adj, x), x)


@pytest.mark.parametrize("name", GRAPHS)
@pytest.mark.parametrize("heads,width", [(1, 1), (4, 8), (3, 5)])
def test_multihead_spmm_equals_one_head_at_a_time(name, heads, width):
    adj = GRAPHS[name]
    x, values = rand(adj.shape[1], heads, width), rand(adj.nnz, heads, seed=1)
    assert_same(lambda v, x: spmm(adj, x, v), values, x)


@pytest.mark.parametrize("name", GRAPHS)
def test_sddmm_and_edge_softmax_equal_torch(name):
    adj = GRAPHS[name]
    a, b = rand(adj.shape[0], 3, 6), rand(adj.shape[1], 3, 6, seed=1)
    assert_same(lambda a, b: sddmm(adj, a, b, "dot"), a, b)
    assert_same(lambda a, b: sddmm(adj, a, b, "dot"), a[:, 0].detach().requires_grad_(), b[:, 0].detach())
    s, t = rand(adj.shape[0], 4), rand(adj.shape[1], 4, seed=2)
    assert_same(lambda s, t: sddmm(adj, s, t, "add"), s, t)
    assert_same(lambda s, t: sddmm(adj, s, t, "add"), s[:, 0].detach().requires_grad_(), t[:, 0].detach())
    # softmax against a fixed upstream gradient that is not constant per row
    weights = rand(adj.nnz, 4, seed=4, grad=False)
    assert_same(lambda s: edge_softmax(adj, s) * weights, rand(adj.nnz, 4, seed=3))
    assert_same(lambda s: edge_softmax(adj, s) * weights[:, 0], rand(adj.nnz, seed=3))


def test_empty_graph_and_no_columns():
    adj = Adjacency.from_coo([], [], (5, 4))
    x = rand(4, 3)
    assert torch.equal(spmm(adj, x), torch.zeros(5, 3))
    assert spmm(GRAPHS["square"], rand(50, 0)).shape == (50, 0)
    assert edge_softmax(adj, torch.zeros(0, 2)).shape == (0, 2)


def test_float64_gradcheck():
    adj = graph(8, 6, 20, giant=True)
    x, v = rand(6, 2, 3, dtype=torch.float64), rand(adj.nnz, 2, seed=1, dtype=torch.float64)
    assert compiled.available(adj, x, v)
    assert torch.autograd.gradcheck(lambda v, x: spmm(adj, x, v), (v, x))
    a, b = rand(8, 2, 3, seed=2, dtype=torch.float64), rand(6, 2, 3, seed=3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b: sddmm(adj, a, b, "dot"), (a, b))
    assert torch.autograd.gradcheck(lambda a, b: sddmm(adj, a, b, "add"), (a[:, :, 0], b[:, :, 0]))
    assert torch.autograd.gradcheck(lambda s: edge_softmax(adj, s), (v,))


def test_fallback_without_numba(monkeypatch):
    """With numba unimportable: one warning, then the torch implementation, same results."""
    adj = GRAPHS["giant row"]
    x, values = rand(adj.shape[1], 2, 5), rand(adj.nnz, 2, seed=1)
    expected = spmm(adj, x, values)
    monkeypatch.setitem(sys.modules, "numba", None)
    monkeypatch.delitem(sys.modules, "gnnmesh.ops._numba", raising=False)
    monkeypatch.delattr(sys.modules["gnnmesh.ops"], "_numba", raising=False)
    monkeypatch.setattr(compiled, "_module", {})
    with pytest.warns(RuntimeWarning, match="compiled CPU sparse kernels unavailable"):
        assert not compiled.available(adj, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the note is given once
        assert torch.allclose(spmm(adj, x, values), expected, rtol=1e-5, atol=1e-6)


def test_cuda_and_other_dtypes_use_torch():
    adj = GRAPHS["square"]
    assert compiled.available(adj, torch.zeros(2))
    assert not compiled.available(adj, torch.zeros(2, dtype=torch.float16))
    assert not compiled.available(adj, torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    if torch.cuda.is_available():
        assert not compiled.available(adj, torch.zeros(2, device="cuda"))


def test_by_default_only_large_adjacencies_use_them(monkeypatch):
    x = torch.zeros(2)
    small, large = GRAPHS["square"], Adjacency.from_coo(np.arange(compiled.MIN_ENTRIES) % 1000,
                                                         np.arange(compiled.MIN_ENTRIES) // 1000, (1000, 1000))
    monkeypatch.setenv("GNNMESH_KERNELS", "auto")
    assert not compiled.available(small, x) and compiled.available(large, x)
    monkeypatch.setenv("GNNMESH_KERNELS", "torch")
    assert not compiled.available(large, x)
    monkeypatch.setenv("GNNMESH_KERNELS", "numba")
    with pytest.raises(ConfigError, match="GNNMESH_KERNELS: .numba. is not one of auto, compiled, torch, triton"):
        compiled.available(large, x)


def test_pooling_is_off_unless_turned_on():
    from gnnmesh.ops import buffers
    buffers.pool(False)  # as a fresh process has it (an in-process run may have turned it on)
    first = buffers.empty((1 << 18, 2), torch.float32)
    del first
    assert buffers.idle_bytes() == 0


@pytest.fixture
def pooled():
    from gnnmesh.ops import buffers
    buffers.pool(True)
    yield buffers
    buffers.pool(False)


def test_kernel_outputs_reuse_memory_only_once_free(pooled):
    buffers = pooled
    first = buffers.empty((1 << 18, 2), torch.float32)  # 2 MiB: pooled
    address = first.data_ptr()
    view = first[10:]
    del first
    assert buffers.empty((1 << 18, 2), torch.float32).data_ptr() != address  # a view still uses it
    del view
    again = buffers.empty((1 << 19,), torch.float32)  # same size, other shape
    assert again.data_ptr() == address and again.shape == (1 << 19,)
    assert buffers.empty((3, 4), torch.float64).shape == (3, 4)  # small: plain torch memory
    buffers.clear()


def test_an_unpooled_product_leaves_the_pool_alone(pooled):
    buffers = pooled
    buffers.clear()
    adj, x = graph(n_rows=1 << 12, n_cols=64, nnz=1 << 14), torch.randn(64, 128)  # a 2 MiB output
    values = adj.values
    own = compiled.spmm(adj, values, x, transpose=False, pooled=False)
    del own
    assert buffers.idle_bytes() == 0
    kept = compiled.spmm(adj, values, x, transpose=False)
    assert torch.equal(kept, compiled.spmm(adj, values, x, transpose=False, pooled=False))
    del kept
    assert buffers.idle_bytes() > 0
    buffers.clear()


def test_varying_outputs_reuse_a_bounded_pool(pooled):
    """Sampled mini-batches give a slightly different size every step: they reuse buffers of
    their size class, and the idle pool never outgrows the most pooled memory in use at once."""
    buffers = pooled
    rng = np.random.default_rng(0)
    addresses = set()
    for step in range(200):
        rows = int(rng.integers(30_000, 34_000))  # 3.7-4.2 MiB of float32 [rows, 32]
        out = buffers.empty((rows, 32), torch.float32)
        out.fill_(step)  # written whole: the class covers the size asked
        addresses.add(out.data_ptr())
        del out
        assert buffers.idle_bytes() <= buffers.size_class(34_000 * 32 * 4)
    assert len(addresses) <= 3  # a handful of classes, not a buffer per step
    assert buffers.size_class(1 << 21) == 1 << 21 and buffers.size_class((1 << 21) + 1) == (1 << 21) + (1 << 18)
    buffers.clear()


WARM_THEN_TRAIN = """
import json
from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.ops import _numba, compiled
from gnnmesh.train import Trainer
names = ["spmm", "edge_dot", "edge_add", "row_sum", "softmax", "softmax_backward"]
def signatures():
    return {n: [str(s) for s in getattr(_numba, n).signatures] for n in names}
assert compiled.load()
loaded = signatures()
for model in ("gcn", "gat", "sage", "gin"):
    Trainer(Config.of(model=model, epochs=1), datasets.load("sbm:nodes=300,features=8")).fit()
print(json.dumps([loaded, signatures()]))
"""


@pytest.mark.timeout(300)
def test_loading_compiles_what_training_runs():
    """``load`` (which the train command calls before measuring anything) leaves no kernel to
    compile during training: in a fresh process, training every model after it adds no types."""
    import json
    import os
    import subprocess
    env = {**os.environ, "GNNMESH_KERNELS": "compiled"}
    out = subprocess.run([sys.executable, "-c", WARM_THEN_TRAIN], env=env, capture_output=True, text=True,
                         timeout=280)
    assert out.returncode == 0, out.stderr
    loaded, trained = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(loaded.values()) and loaded == trained
