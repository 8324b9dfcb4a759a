"""Every model against PyG's reference layer with the same weights, in eval mode."""

import pytest
import torch

from gnnmesh.models import build_model, names, options_of
from gnnmesh.view import GraphView

from tests.helpers import random_graph, typed_graph



@pytest.fixture(scope="module")
def pyg():
    """PyG's layers, the reference; only the comparisons need them (gnnmesh[pyg])."""
    return pytest.importorskip("torch_geometric.nn")


@pytest.fixture(scope="module", params=[False, True], ids=["unweighted", "weighted"])
def graph(request):
    return random_graph(n=40, e=160, features=6, weighted=request.param)


def _pyg_inputs(g):
    return g.x, g.edge_index(), g.adj.values


def test_gcn_matches_pyg(graph, pyg):
    model = build_model("gcn", 6, 3, hidden=5, layers=1).eval()
    ref = pyg.GCNConv(6, 3)
    ref.lin.weight.data.copy_(model.layers[0].lin.weight)
    ref.bias.data.copy_(torch.randn(3))
    model.layers[0].bias.data.copy_(ref.bias)
    x, ei, w = _pyg_inputs(graph)
    assert torch.allclose(model(GraphView(graph.adj), x), ref(x, ei, w), atol=1e-5)


def test_sage_matches_pyg(graph, pyg):
    model = build_model("sage", 6, 3, layers=1).eval()
    ref = pyg.SAGEConv(6, 3, aggr="mean")
    layer = model.layers[0]
    layer.lin_neigh.weight.data.copy_(ref.lin_l.weight)
    layer.lin_self.weight.data.copy_(ref.lin_r.weight)
    layer.lin_self.bias.data.copy_(ref.lin_l.bias)
    x, ei, w = _pyg_inputs(graph)
    if w is not None:  # PyG's mean aggregation ignores weights; compare on the pattern
        graph = graph.replace(adj=graph.adj.with_values(None))
    assert torch.allclose(model(GraphView(graph.adj), x), ref(x, ei), atol=1e-5)


def test_gat_matches_pyg(graph, pyg):
    model = build_model("gat", 6, 3, layers=1, out_heads=2).eval()
    ref = pyg.GATConv(6, 3, heads=2, concat=False)
    layer = model.layers[0]
    src_lin = ref.lin if getattr(ref, "lin", None) is not None else ref.lin_src
    layer.lin.weight.data.copy_(src_lin.weight)
    layer.att_src.data.copy_(ref.att_src.view(2, 3))
    layer.att_dst.data.copy_(ref.att_dst.view(2, 3))
    layer.bias.data.copy_(torch.randn(3))
    ref.bias.data.copy_(layer.bias)
    x, ei, _ = _pyg_inputs(graph)
    assert torch.allclose(model(GraphView(graph.adj), x), ref(x, ei), atol=1e-5)


def test_gin_matches_pyg(graph, pyg):
    for in_dim, out_dim in [(6, 3), (3, 6)]:  # both aggregation orders
        model = build_model("gin", in_dim, out_dim, layers=1).eval()
        layer = model.layers[0]
        layer.eps.data.fill_(0.3)
        ref = pyg.GINConv(layer.mlp, train_eps=True)
        ref.eps.data.fill_(0.3)
        x = torch.randn(graph.num_nodes, in_dim)
        g = graph.replace(adj=graph.adj.with_values(None))
        assert torch.allclose(model(GraphView(g.adj), x), ref(x, g.edge_index()), atol=1e-5)


def test_decoupled_propagation_matches_appnp(graph, pyg):
    model = build_model("gcn", 6, 3, decoupled=True, k=5, alpha=0.2).eval()
    view = GraphView(graph.adj)
    h0 = model.transform(view, graph.x)
    ref = pyg.APPNP(K=5, alpha=0.2)
    assert torch.allclose(model(view, graph.x), ref(h0, graph.edge_index(), graph.adj.values), atol=1e-5)


@pytest.mark.parametrize("name", names())
def test_every_model_trains_a_step(name):
    typed = "relations" in options_of(name)  # a model with a weight per relation trains on a typed graph
    g = typed_graph(features=7) if typed else random_graph(n=30, e=100, features=7)
    options = {"relations": g.adj.relations.names} if typed else {}
    if name == "gine":  # GINE's messages are made of edge features
        g = g.replace(adj=g.adj.with_edge_features(torch.randn(g.adj.nnz, 2)))
        options["edge_dim"] = 2
    torch.manual_seed(0)
    model = build_model(name, 7, 3, layers=3, hidden=4, **options)
    view = GraphView(g.adj)
    loss = torch.nn.functional.cross_entropy(model(view, g.x), g.y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)


def test_unknown_model():
    with pytest.raises(ValueError, match="choose from"):
        build_model("gcnn", 3, 2)
