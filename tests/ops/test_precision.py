"""The graph primitives under mixed precision (``gnnmesh.ops.precision``): bfloat16 rows in,
float32 arithmetic, the given dtype out, gradients in each input's own dtype."""

import numpy as np
import pytest
import torch

from gnnmesh import ops
from gnnmesh.graph import Adjacency
from gnnmesh.ops import compiled
from gnnmesh.ops.precision import in_float32
from gnnmesh.view import GraphView

from tests.helpers import random_graph


def adjacency():
    rng = np.random.default_rng(0)
    row, col = rng.integers(0, 20, 80), rng.integers(0, 20, 80)
    return Adjacency.from_coo(row, col, (20, 20), values=rng.random(80))


@pytest.mark.parametrize("kernels", ["torch", "compiled"])
def test_spmm_takes_bfloat16_rows_and_returns_them(kernels, monkeypatch):
    monkeypatch.setenv("GNNMESH_KERNELS", kernels)
    adj = adjacency()
    x = torch.randn(20, 6)
    wide = ops.spmm(adj, x)
    narrow = x.bfloat16().requires_grad_()
    out = ops.spmm(adj, narrow)
    assert out.dtype == torch.bfloat16
    # computed from the bfloat16 rows in float32, rounded once: within bfloat16's rounding of the float32 product
    assert torch.allclose(out.float(), wide, rtol=2e-2, atol=2e-2)
    out.float().sum().backward()
    assert narrow.grad.dtype == torch.bfloat16


def test_attention_primitives_take_bfloat16():
    adj = adjacency()
    a, b = torch.randn(20, 4, requires_grad=True), torch.randn(20, 4, requires_grad=True)
    scores = ops.sddmm(adj, a.bfloat16(), b.bfloat16(), "dot")
    weights = ops.edge_softmax(adj, scores)
    out = ops.spmm(adj, a.bfloat16(), weights)
    assert scores.dtype == weights.dtype == out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert a.grad.dtype == b.grad.dtype == torch.float32 and torch.isfinite(a.grad).all()


def test_under_autocast_a_layer_stays_bfloat16_and_aggregates_in_float32():
    """Inside autocast the sparse product (on autocast's bfloat16 list) must not run in
    bfloat16: the view's spmm of float32 rows gives float32, exactly as without autocast."""
    graph = random_graph(n=30, e=120, features=8)
    view = GraphView(graph.adj)
    lin = torch.nn.Linear(8, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        aggregated = view.spmm(graph.x)
        h = lin(aggregated)
        out = view.spmm(h)
    assert aggregated.dtype == torch.float32 and torch.equal(aggregated, view.spmm(graph.x))
    assert h.dtype == out.dtype == torch.bfloat16
    with compiled.disabled():  # torch's CSR product: the one autocast would have narrowed
        with torch.autocast("cpu", dtype=torch.bfloat16):
            again = view.spmm(graph.x)
    assert torch.equal(again, aggregated)


def test_a_parallel_views_own_primitives_are_wrapped_too():
    class Doubling(GraphView):
        def spmm(self, x, op="gcn", values=None):
            assert x.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
            return 2 * x

    out = Doubling(adjacency()).spmm(torch.ones(20, 3, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and float(out[0, 0]) == 2.0


def test_float32_inputs_outside_autocast_run_untouched():
    seen = []
    wrapped = in_float32(lambda x: seen.append(x) or x)
    x = torch.ones(3)
    assert wrapped(x) is x and seen[0] is x
    pair = in_float32(lambda x: (x, x))(torch.ones(2, dtype=torch.bfloat16))
    assert [t.dtype for t in pair] == [torch.bfloat16] * 2
