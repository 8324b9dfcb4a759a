"""R-GAT on a typed graph: a layer is PyG's HeteroConv of GATConvs (no self-loops, summed over
relations) plus a root Linear; training under partition, tensor and offload, attention dropout
included, gives the single process's losses, and mini-batches (sampled per relation, with
fanouts per relation too) under gdp and dnp the single process's mini-batch losses; the relations
are filled from the graph and recorded in checkpoints; a graph without relations, the PyG
export, grid3d and the mini-batch routes that split a row's sources are refused in one line."""

import pytest
import torch

import gnnmesh
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.export import export_pyg
from gnnmesh.models.rgat import RGATLayer
from gnnmesh.train import Trainer
from gnnmesh.train.minibatch import MiniBatchTrainer
from gnnmesh.view import GraphView

from tests.dist import run_ranks
from tests.helpers import random_graph, typed_graph
from tests.parity import losses_of, single_runs

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)

EPOCHS = 4
COUNTS = (40, 25, 15)   # typed_graph's node types a, b, c, one after another


def config(**fields) -> Config:
    return Config.of(**{"model": "rgat", "hidden": 4, "heads": 2, "epochs": EPOCHS, "seed": 1, **fields})


def _hetero_edges(graph) -> dict:
    """PyG's ``edge_index_dict`` of the typed union ``graph``: each relation's entries, in
    its node types' own ids."""
    offsets = dict(zip("abc", [0, COUNTS[0], COUNTS[0] + COUNTS[1]]))
    rel = graph.adj.relations
    owner = graph.adj.row().repeat_interleave(torch.diff(rel.ptr))
    source = graph.adj.indices.repeat_interleave(torch.diff(rel.ptr))
    edges = {}
    for i, name in enumerate(rel.names):
        src, kind, dst = name.split("__")
        chosen = rel.ids == i
        edges[(src, kind, dst)] = torch.stack([source[chosen] - offsets[src], owner[chosen] - offsets[dst]])
    return edges, offsets


@pytest.mark.parametrize("heads,concat", [(2, True), (3, False)])
def test_a_layer_is_pygs_heteroconv_of_gatconvs_plus_a_root(heads, concat):
    pyg = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(0)
    graph = typed_graph()
    names = graph.adj.relations.names
    layer = RGATLayer(5, 4, names, heads, concat, attn_dropout=0.0)
    edges, offsets = _hetero_edges(graph)
    conv = pyg.HeteroConv({key: pyg.GATConv(5, 4, heads=heads, concat=concat, add_self_loops=False, bias=False)
                           for key in edges}, aggr="sum")
    with torch.no_grad():
        for i, key in enumerate(edges):
            gat = conv.convs[key]
            gat.lin.weight.copy_(layer.weight[i])
            gat.att_src.copy_(layer.att_src[i].unsqueeze(0))
            gat.att_dst.copy_(layer.att_dst[i].unsqueeze(0))
        layer.root.bias.copy_(torch.randn(layer.out_features))
    x = torch.randn(graph.num_nodes, 5)
    xs = {t: x[offsets[t]:offsets[t] + n] for t, n in zip("abc", COUNTS)}
    want = conv(xs, edges)
    got = layer(GraphView(graph.adj), x)
    assert got.shape == (graph.num_nodes, layer.out_features)
    for t, n in zip("abc", COUNTS):
        rows = slice(offsets[t], offsets[t] + n)
        assert torch.allclose(got[rows], want[t] + layer.root(x[rows]), atol=1e-5), t


def test_a_node_without_in_edges_of_any_relation_gets_its_root_alone():
    graph = typed_graph()
    layer = RGATLayer(5, 4, graph.adj.relations.names, 2, True, attn_dropout=0.0)
    x = torch.randn(graph.num_nodes, 5)
    alone = graph.adj.relations.names[:1]   # a__x__a: nodes of types b and c have no in-edges of it
    only_x = RGATLayer(5, 4, alone, 2, True, attn_dropout=0.0)
    only_x.load_state_dict({k: v[:1] if k in ("weight", "att_src", "att_dst") else v
                            for k, v in layer.state_dict().items()})
    got = only_x(GraphView(graph.adj), x)
    rows = slice(COUNTS[0], graph.num_nodes)
    assert torch.allclose(got[rows], only_x.root(x[rows]))
    assert not torch.allclose(got[:COUNTS[0]], only_x.root(x[:COUNTS[0]]))


def _losses(rank, world, fields):
    return losses_of(config, typed_graph(), world, fields)


single = single_runs(_losses)  # the single process's losses for some settings, once per module


RUNS = [pytest.param(3, {"strategy": "partition", "partitioner": "rp", "attn_dropout": 0.3}, id="partition"),
        pytest.param(2, {"strategy": "tensor", "attn_dropout": 0.3}, id="tensor", marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "offload", "attn_dropout": 0.3}, id="offload", marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "gdp", "minibatch": True, "batch_size": 16, "attn_dropout": 0.3}, id="gdp",
                     marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "dnp", "minibatch": True, "batch_size": 16, "attn_dropout": 0.3,
                         "fanouts": "a__y__b=1,2;-1"}, id="dnp", marks=pytest.mark.slow)]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world,fields", RUNS)
def test_several_ranks_train_to_the_single_process_losses(world, fields):
    alone = {k: v for k, v in fields.items() if k not in ("strategy", "partitioner")}
    want = single(**alone)
    assert single(**{**alone, "attn_dropout": 0.0}) != pytest.approx(want, abs=1e-5)  # the dropout draws
    if "minibatch" in fields:  # sampled batches, not the whole graph
        assert want != pytest.approx(single(attn_dropout=0.3), abs=1e-3)
    for rank, got in enumerate(run_ranks(_losses, world, fields, timeout=180)):
        assert got == pytest.approx(want, abs=1e-5), f"{fields} rank {rank}"


def test_a_checkpoint_records_the_graphs_relations_and_has_no_pyg_export(tmp_path):
    path = str(tmp_path / "c.pt")
    Trainer(config(epochs=1, checkpoint=path), typed_graph()).fit()
    model, saved = gnnmesh.load(path)
    graph = typed_graph()
    assert saved.model.relations.split(",") == list(graph.adj.relations.names)
    assert model.layers[0].relations == graph.adj.relations.names
    assert model(GraphView(graph.adj), graph.x).shape == (graph.num_nodes, 3)
    with pytest.raises(ConfigError, match="model RGAT has no PyG export") as caught:
        export_pyg(path, tmp_path / "pyg")
    assert "\n" not in str(caught.value)


def test_a_graph_without_relations_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="model rgat needs a typed graph"):
        Trainer(config(), random_graph(features=5))


@pytest.mark.parametrize("fields,refusal", [
    ({"strategy": "grid3d"}, "grid3d strategy runs gcn, sage, gin"),
    ({"strategy": "nfp", "minibatch": True}, "attention needs them all in one place"),
])
def test_a_strategy_that_cannot_run_it_refuses_in_one_line(fields, refusal):
    with pytest.raises(ConfigError, match=refusal) as caught:
        (MiniBatchTrainer if fields.get("minibatch") else Trainer)(config(**fields), typed_graph())
    assert "\n" not in str(caught.value)


def test_a_model_of_one_edge_type_on_a_typed_graph_is_pointed_to_rgat_too():
    with pytest.raises(ConfigError, match="sees one edge type; train it with rgcn or rgat, give a copy per relation .gnnmesh.models.per_relation., or load it"):
        Trainer(Config.of(model="gat", epochs=1), typed_graph())
