"""GAT's attention as one op, on the CPU (the torch path; the fused kernels: test_fused), and
as the view runs it: fused only on a view whose primitives are GraphView's own."""

import pytest
import torch
import torch.nn.functional as F

from gnnmesh.ops import attention, edge_softmax, sddmm, spmm
from gnnmesh.transforms import add_self_loops
from gnnmesh.view import GraphView

from tests.helpers import random_graph


@pytest.fixture(scope="module")
def adj():
    return add_self_loops(random_graph(n=20, e=80).adj).with_values(None)


def inputs(adj, heads=2, width=3):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(adj.shape[1], heads, width, generator=gen), torch.randn(adj.shape[0], heads, generator=gen),
            torch.randn(adj.shape[1], heads, generator=gen))


def test_it_is_the_composition_it_replaces(adj):
    z, s_dst, s_src = inputs(adj)
    keep = torch.rand(adj.nnz, 2, generator=torch.Generator().manual_seed(1)) > 0.5
    alpha = edge_softmax(adj, F.leaky_relu(sddmm(adj, s_dst, s_src, "add"), 0.1))
    assert torch.equal(attention(adj, z, s_dst, s_src, 0.1), spmm(adj, z, alpha))
    dropped = torch.where(keep, alpha * (1 / (1 - 0.3)), 0.0)
    assert torch.equal(attention(adj, z, s_dst, s_src, 0.1, keep, 0.3), spmm(adj, z, dropped))


def test_misshapen_inputs_are_refused_in_one_line(adj):
    z, s_dst, s_src = inputs(adj)
    with pytest.raises(ValueError, match=r"attention: z \(20, 2, 3\), s_dst \(19, 2\), s_src \(20, 2\) do not "
                                         r"fit a 20 x 20 operator"):
        attention(adj, z, s_dst[1:], s_src)


def test_the_view_draws_the_mask_its_edge_dropout_draws():
    graph = random_graph(n=20, e=80)
    z, s_dst, s_src = inputs(graph.adj)
    views = [GraphView(graph.adj, seed=5) for _ in range(2)]
    got = views[0].attention(z, s_dst, s_src, "loop", 0.2, 0.5, True)
    view = views[1]
    alpha = view.edge_softmax(F.leaky_relu(view.sddmm(s_dst, s_src, "loop", "add"), 0.2), "loop")
    assert torch.equal(got, view.spmm(z, "loop", values=view.edge_dropout(alpha, 0.5, True, "loop")))
    assert views[0].draws == views[1].draws == 1


def test_only_a_view_of_graphviews_own_primitives_fuses_it():
    class Exchanging(GraphView):
        def spmm(self, x, op="gcn", values=None):  # a strategy's own, with its collectives
            return super().spmm(x, op, values)

    graph = random_graph(n=10, e=30)
    assert GraphView(graph.adj)._attends_locally()
    assert not Exchanging(graph.adj)._attends_locally()
