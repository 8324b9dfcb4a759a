"""R-GCN on a typed graph: a layer is PyG's RGCNConv (mean per relation, root weight, bias);
training under partition, tensor and offload gives the single process's losses, and mini-batches
(sampled per relation, with fanouts per relation too) under gdp, dnp and nfp the single process's
mini-batch losses; basis decomposition mixes shared matrices; the relations are recorded in
checkpoints (a checkpoint resumed on 1 rank continues 3 ranks' run); grid3d lays out each
relation's weight (basis-mixed weights it refuses in one line), and a graph without relations
and snp are refused in one line."""

import pytest
import torch

import gnnmesh
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models.rgcn import RGCNLayer
from gnnmesh.train import Trainer
from gnnmesh.train.minibatch import MiniBatchTrainer
from gnnmesh.view import GraphView

from tests.dist import run_ranks
from tests.helpers import random_graph, typed_graph
from tests.parity import losses_of, single_runs

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)

EPOCHS = 4


def config(**fields) -> Config:
    return Config.of(**{"model": "rgcn", "hidden": 8, "epochs": EPOCHS, "seed": 1, **fields})


@pytest.mark.parametrize("bases", [0, 3])
def test_a_layer_is_pygs_rgcnconv(bases):
    pyg = pytest.importorskip("torch_geometric.nn")
    graph = typed_graph()
    names = graph.adj.relations.names
    layer = RGCNLayer(5, 4, names, bases)
    rel = graph.adj.relations
    counts = torch.diff(rel.ptr)
    edge_index = torch.stack([graph.adj.indices.repeat_interleave(counts), graph.adj.row().repeat_interleave(counts)])
    conv = pyg.RGCNConv(5, 4, len(names), aggr="mean", root_weight=True, bias=True)
    with torch.no_grad():
        conv.weight.copy_(layer.relation_weights().transpose(1, 2))
        conv.root.copy_(layer.root.weight.t())
        conv.bias.copy_(torch.randn(4))
        layer.root.bias.copy_(conv.bias)
    x = torch.randn(graph.num_nodes, 5)
    got = layer(GraphView(graph.adj), x)
    assert torch.allclose(got, conv(x, edge_index, rel.ids), atol=1e-5)
    if bases:
        assert sum(p.numel() for p in layer.parameters()) == 3 * 4 * 5 + len(names) * 3 + 4 * 5 + 4


def _losses(rank, world, fields):
    return losses_of(config, typed_graph(), world, fields)


single = single_runs(_losses)  # the single process's losses for some settings, once per module


RUNS = [pytest.param(3, {"strategy": "partition", "partitioner": "rp"}, id="partition"),
        pytest.param(2, {"strategy": "partition", "bases": 2}, id="partition-bases"),
        pytest.param(2, {"strategy": "tensor"}, id="tensor", marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "offload"}, id="offload", marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "gdp", "minibatch": True, "batch_size": 16, "fanouts": "x=2,rev_x=1,3;2"},
                     id="gdp"),
        pytest.param(2, {"strategy": "dnp", "minibatch": True, "batch_size": 16, "partitioner": "rp"}, id="dnp",
                     marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "dnp", "minibatch": True, "batch_size": 16, "partitioner": "shp",
                         "fanouts": "y=3,2;2"}, id="dnp-shp", marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "nfp", "minibatch": True, "batch_size": 16, "fanouts": "x=2,3;2"}, id="nfp",
                     marks=pytest.mark.slow)]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world,fields", RUNS)
def test_several_ranks_train_to_the_single_process_losses(world, fields):
    alone = {k: v for k, v in fields.items() if k not in ("strategy", "partitioner")}
    want = single(**alone)
    if "minibatch" in fields:  # sampled batches, not the whole graph
        assert want != pytest.approx(single(), abs=1e-3)
    for rank, got in enumerate(run_ranks(_losses, world, fields, timeout=180)):
        assert got == pytest.approx(want, abs=1e-5), f"{fields} rank {rank}"


def _resume(rank, world, path, epochs, resume):
    fields = {"strategy": "partition", "partitioner": "rp"} if world > 1 else {}
    summary = Trainer(config(nproc=world, epochs=epochs, checkpoint=path, resume=resume, **fields),
                      typed_graph()).fit()
    return [r.loss for r in summary.history]


@pytest.mark.timeout(200)
def test_a_checkpoint_records_the_relations_and_moves_from_three_ranks_to_one(tmp_path):
    path = str(tmp_path / "c.pt")
    whole = _resume(0, 1, str(tmp_path / "whole.pt"), EPOCHS, False)
    first = run_ranks(_resume, 3, path, 2, False, timeout=180)[0]
    rest = _resume(0, 1, path, EPOCHS, True)
    assert first + rest[2:] == pytest.approx(whole, abs=1e-5)
    model, saved = gnnmesh.load(path)
    assert saved.model.relations.split(",") == list(typed_graph().adj.relations.names)
    graph = typed_graph()
    assert model(GraphView(graph.adj), graph.x).shape == (graph.num_nodes, 3)


def test_a_graph_without_relations_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="model rgcn needs a typed graph"):
        Trainer(config(), random_graph(features=5))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("grid", ["2,1,2", pytest.param("2,2,1", marks=pytest.mark.slow)])
def test_grid3d_lays_out_each_relations_weight_and_trains_to_the_single_process_losses(grid):
    want = _losses(0, 1, {})
    for rank, got in enumerate(run_ranks(_losses, 4, {"strategy": "grid3d", "grid": grid}, timeout=180)):
        assert got == pytest.approx(want, abs=1e-5), f"grid {grid} rank {rank}"


def test_grid3d_refuses_mixed_basis_weights_in_one_line():
    with pytest.raises(ConfigError, match="R-GCN with --bases mixes its weights"):
        Trainer(config(strategy="grid3d", bases=2), typed_graph())


def test_snp_refuses_it_in_one_line():
    with pytest.raises(ConfigError, match="as a mean per relation needs each relation's; .* rgcn with gdp, dnp or "
                                          "nfp, got rgcn$") as caught:
        MiniBatchTrainer(config(strategy="snp", minibatch=True), typed_graph())
    assert "\n" not in str(caught.value)


def test_a_model_without_relations_on_a_typed_graph_is_refused_unless_loaded_untyped():
    spec = "igbh-synth:papers=60,authors=40,institutes=5,fos=8,features=4"
    with pytest.raises(ConfigError, match=r"\(gcn\): the graph is typed \(8 relations\).*':typed=false'"):
        Trainer(Config.of(model="gcn", epochs=1), gnnmesh.datasets.load(spec))
    plain = gnnmesh.datasets.load(spec + ",typed=false")
    assert plain.adj.relations is None and "node_types" not in plain.meta
    assert plain.num_edges == gnnmesh.datasets.load(spec).num_edges
    Trainer(Config.of(model="gcn", epochs=1), plain).fit()


def test_the_planner_traces_it_with_the_graphs_relations():
    from gnnmesh.planner.trace import build, trace
    from gnnmesh.train.auto import planned_model
    graph = typed_graph()
    widths, options = planned_model(config().resolved(), graph)
    assert options["relations"] == graph.adj.relations.names
    ops = trace(build(widths, "rgcn", **options), widths[0]).ops()
    assert set(ops) == {f"mean@{r}" for r in graph.adj.relations.names}
