"""Models that read edge features: a layer of GAT, GATv2 and GINE is PyG's GATConv, GATv2Conv
and GINEConv with ``edge_dim`` (R-GAT's is HeteroConv of GATConv with edge_dim); training
under partition (3 ranks), tensor and offload gives the single process's losses; the model's
``edge_dim`` is the graph's, recorded in checkpoints; what cannot carry the features refuses
in one line."""

import pytest
import torch

from gnnmesh import Graph
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models.gat import GATLayer
from gnnmesh.models.gatv2 import GATv2Layer
from gnnmesh.models.gine import GINELayer
from gnnmesh.models.rgat import RGATLayer
from gnnmesh.train import Trainer
from gnnmesh.train.minibatch import MiniBatchTrainer
from gnnmesh.view import GraphView

from tests.dist import run_ranks
from tests.helpers import random_graph, typed_graph

EPOCHS = 3
EDGE_DIM = 3


def featured(graph: Graph, width: int = EDGE_DIM, seed: int = 0) -> Graph:
    """``graph`` with random features on each of its entries."""
    features = torch.randn(graph.adj.nnz, width, generator=torch.Generator().manual_seed(seed))
    return graph.replace(adj=graph.adj.with_edge_features(features))


def loopless(n: int = 24, e: int = 90, seed: int = 0) -> Graph:
    """A graph with neither self-loops nor repeated edges, as PyG's layers see the same edges."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=gen)
    keys = torch.unique((ei[1] * n + ei[0])[ei[0] != ei[1]])
    ei = torch.stack([keys % n, keys // n])
    return Graph.from_edge_index(ei, n, edge_attr=torch.randn(ei.shape[1], EDGE_DIM, generator=gen),
                                 x=torch.randn(n, 6, generator=gen))


def test_a_gat_layer_is_pygs_gatconv_with_edge_dim():
    pyg = pytest.importorskip("torch_geometric.nn")
    graph = loopless()
    layer = GATLayer(6, 4, 2, True, 0.0, edge_dim=EDGE_DIM)
    conv = pyg.GATConv(6, 4, heads=2, edge_dim=EDGE_DIM)  # its loops carry their row's mean (fill_value="mean")
    with torch.no_grad():
        conv.lin.weight.copy_(layer.lin.weight)
        conv.att_src.copy_(layer.att_src[None])
        conv.att_dst.copy_(layer.att_dst[None])
        conv.lin_edge.weight.copy_(layer.edge_logits.lin.weight)
        conv.att_edge.copy_(layer.edge_logits.att[None])
        layer.bias.copy_(torch.randn(8))
        conv.bias.copy_(layer.bias)
    want = conv(graph.x, graph.edge_index(), graph.edge_features)
    assert torch.allclose(layer(GraphView(graph.adj), graph.x), want, atol=1e-5)
    with torch.no_grad():
        layer.edge_logits.att.mul_(2)  # the features move the logits: the check can fail
    assert not torch.allclose(layer(GraphView(graph.adj), graph.x), want, atol=1e-5)


def test_a_gatv2_layer_is_pygs_gatv2conv_with_edge_dim():
    pyg = pytest.importorskip("torch_geometric.nn")
    graph = loopless(seed=1)
    layer = GATv2Layer(6, 4, 2, False, 0.0, edge_dim=EDGE_DIM)
    conv = pyg.GATv2Conv(6, 4, heads=2, concat=False, edge_dim=EDGE_DIM)
    with torch.no_grad():
        for name in ("lin_l", "lin_r"):
            getattr(layer, name).bias.copy_(torch.randn(8))
            getattr(conv, name).load_state_dict(getattr(layer, name).state_dict())
        conv.att.copy_(layer.att[None])
        conv.lin_edge.weight.copy_(layer.lin_edge.weight)
        layer.bias.copy_(torch.randn(4))
        conv.bias.copy_(layer.bias)
    got = layer(GraphView(graph.adj), graph.x)
    assert torch.allclose(got, conv(graph.x, graph.edge_index(), graph.edge_features), atol=1e-5)


def test_a_gine_layer_is_pygs_gineconv():
    pyg = pytest.importorskip("torch_geometric.nn")
    graph = loopless(seed=2)
    layer = GINELayer(6, 5, EDGE_DIM)
    conv = pyg.GINEConv(layer.mlp, train_eps=True, edge_dim=EDGE_DIM)
    with torch.no_grad():
        conv.lin.load_state_dict(layer.lin.state_dict())
        layer.eps.fill_(0.3)
        conv.eps.fill_(0.3)
    got = layer(GraphView(graph.adj), graph.x)
    assert torch.allclose(got, conv(graph.x, graph.edge_index(), graph.edge_features), atol=1e-5)


def test_an_rgat_layer_is_heteroconv_of_gatconv_with_edge_dim():
    pyg = pytest.importorskip("torch_geometric.nn")
    graph = featured(typed_graph(), seed=3)
    rel = graph.adj.relations
    names = rel.names
    layer = RGATLayer(5, 4, names, 2, True, 0.0, edge_dim=EDGE_DIM)
    x = torch.randn(graph.num_nodes, 5)
    want = layer.root(x)
    for i, name in enumerate(names):  # each relation: GATConv over its own entries, their features
        entries = torch.from_numpy(rel.entries(i))
        conv = pyg.GATConv(5, 4, heads=2, add_self_loops=False, bias=False, edge_dim=EDGE_DIM)
        with torch.no_grad():
            conv.lin.weight.copy_(layer.weight[i])
            conv.att_src.copy_(layer.att_src[i][None])
            conv.att_dst.copy_(layer.att_dst[i][None])
            conv.lin_edge.weight.copy_(layer.edge_logits[i].lin.weight)
            conv.att_edge.copy_(layer.edge_logits[i].att[None])
        edge_index = torch.stack([graph.adj.indices[entries], graph.adj.row()[entries]])
        want = want + conv(x, edge_index, graph.edge_features[entries])
    assert torch.allclose(layer(GraphView(graph.adj), x), want, atol=1e-5)


def config(model: str, **fields) -> Config:
    return Config.of(**{"model": model, "hidden": 4, "heads": 2, "epochs": EPOCHS, "seed": 1, "dropout": 0.1,
                        **({"heads": None} if model == "gine" else {}), **fields})


def _graph(model: str) -> Graph:
    return featured(typed_graph(features=7) if model == "rgat" else random_graph(n=40, e=160, features=7))


def _losses(rank, world, model, fields):
    if model == "gat":
        fields = {"attn_dropout": 0.3, **fields}  # the attention masks are drawn on the operators' entries too
    return [r.loss for r in Trainer(config(model, nproc=world, **fields), _graph(model)).fit().history]


RUNS = [pytest.param("gat", 3, {"strategy": "partition", "partitioner": "rp"}, id="gat-partition"),
        pytest.param("gatv2", 3, {"strategy": "partition", "partitioner": "rp"}, id="gatv2-partition",
                     marks=pytest.mark.slow),
        pytest.param("gine", 3, {"strategy": "partition", "partitioner": "rp"}, id="gine-partition"),
        pytest.param("rgat", 3, {"strategy": "partition", "partitioner": "rp"}, id="rgat-partition",
                     marks=pytest.mark.slow),
        pytest.param("gat", 2, {"strategy": "tensor"}, id="gat-tensor", marks=pytest.mark.slow),
        pytest.param("gine", 2, {"strategy": "tensor"}, id="gine-tensor", marks=pytest.mark.slow),
        pytest.param("gatv2", 2, {"strategy": "tensor"}, id="gatv2-tensor", marks=pytest.mark.slow),
        pytest.param("rgat", 2, {"strategy": "tensor"}, id="rgat-tensor", marks=pytest.mark.slow),
        pytest.param("gat", 2, {"strategy": "offload"}, id="gat-offload", marks=pytest.mark.slow),
        pytest.param("gine", 2, {"strategy": "offload"}, id="gine-offload", marks=pytest.mark.slow),
        pytest.param("rgat", 2, {"strategy": "offload"}, id="rgat-offload", marks=pytest.mark.slow)]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("model,world,fields", RUNS)
def test_several_ranks_train_to_the_single_process_losses(model, world, fields):
    alone = {k: v for k, v in fields.items() if k not in ("strategy", "partitioner")}
    want = _losses(0, 1, model, alone)
    for rank, got in enumerate(run_ranks(_losses, world, model, fields, timeout=180)):
        assert got == pytest.approx(want, abs=1e-5), f"{model} {fields} rank {rank}"


def test_edge_dim_is_the_graphs_recorded_in_checkpoints_and_a_wrong_one_is_refused(tmp_path):
    from gnnmesh import trained
    graph = _graph("gat")
    path = str(tmp_path / "c.pt")
    trainer = Trainer(config("gat", epochs=1, checkpoint=path), graph)
    assert trainer.config.model.edge_dim == EDGE_DIM
    trainer.fit()
    model, saved = trained.load(path)
    assert saved.model.edge_dim == EDGE_DIM and model.layers[0].edge_logits.lin.in_features == EDGE_DIM
    assert Trainer(config("gat", edge_dim=0), graph).model.layers[0].edge_logits is None  # 0: read none
    with pytest.raises(ConfigError, match="config field 'edge_dim': 5, but the graph 'random' has 3 edge features"):
        Trainer(config("gat", edge_dim=5), graph)
    assert Trainer(config("gat"), random_graph(n=40, e=160, features=7)).config.model.edge_dim == 0


def test_gine_without_edge_features_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="model gine needs edge features"):
        Trainer(config("gine"), random_graph(n=40, e=160, features=7))


def test_what_cannot_carry_edge_features_refuses_in_one_line(tmp_path):
    from gnnmesh.export import describe
    from gnnmesh.parallel.partition.parts import write_partition_parts
    from gnnmesh.partition.api import partition
    graph = _graph("gat")
    with pytest.raises(ConfigError, match="config field 'minibatch': model gat reads the graph's edge features"):
        MiniBatchTrainer(config("gat", minibatch=True, batch_size=8), graph)
    model = Trainer(config("gat"), graph).model
    with pytest.raises(ConfigError, match="model GAT reads edge features, which the PyG export does not carry"):
        describe(model)
    assert "--strategy grid3d needs" in Config.of(strategy="grid3d").strategy_spec.model_problem(model)
    with pytest.raises(ConfigError, match="the graph has edge features .3 per edge., which parts do not carry"):
        write_partition_parts(graph, partition(graph, 2, method="rp"), tmp_path / "parts", "random")
    assert not (tmp_path / "parts").exists()



def test_a_per_relation_gat_reads_each_relations_own_edge_features():
    from gnnmesh.models import GAT, per_relation
    from gnnmesh.models.per_relation import RelationView
    graph = featured(typed_graph(features=7))
    names = graph.adj.relations.names
    view = GraphView(graph.adj)
    for name in names[:2]:
        assert torch.equal(RelationView(view, name).edge_features("loop"), view.edge_features(f"loop@{name}"))
    model = per_relation(lambda: GAT(7, 3, hidden=4, heads=2, edge_dim=EDGE_DIM), names)
    out = model(view, graph.x)  # each copy's logits: one per entry of its relation's loop operator
    assert out.shape == (graph.num_nodes, 3) and bool(torch.isfinite(out).all())
