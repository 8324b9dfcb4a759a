"""An R-GCN checkpoint exported to PyG: RGCNConv(aggr="mean") layers (with basis decomposition
too) that, given the union graph's edges and edge types or a HeteroData of the graph, give
gnnmesh's outputs to 1e-5; what does not fit is refused in one line."""

import json

import pytest
import torch

import gnnmesh
from gnnmesh import ConfigError, datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.export import MODEL_FILE, export_pyg, load_pyg, typed_inputs
from gnnmesh.train import Trainer
from gnnmesh.train.trainer import input_features
from gnnmesh.view import GraphView

pytest.importorskip("torch_geometric")

IGBH = "igbh-synth:papers=60,authors=40,institutes=5,fos=8,features=4"


@pytest.fixture(scope="module")
def graph():
    return datasets.load(IGBH)


@pytest.fixture(scope="module", params=[0, 2], ids=["weights", "bases"])
def exported(graph, tmp_path_factory, request):
    root = tmp_path_factory.mktemp("rgcn")
    path = root / "c.pt"
    Trainer(Config.of(dataset=IGBH, model="rgcn", hidden=6, layers=3, epochs=3, seed=1, bases=request.param,
                      checkpoint=str(path)), graph).fit()
    export_pyg(path, root / "pyg")
    model, _ = gnnmesh.load(path)
    with torch.no_grad():
        want = model(GraphView(graph.adj), input_features(graph))
    return root / "pyg", want


def test_the_pyg_layers_give_gnnmesh_outputs_on_the_union(graph, exported):
    out, want = exported
    spec = json.loads((out / MODEL_FILE).read_text())
    assert [layer["type"] for layer in spec["layers"]] == ["RGCNConv"] * 3
    assert spec["relations"] == list(graph.adj.relations.names)
    model = load_pyg(out)
    x, edge_index, edge_type = typed_inputs(graph, spec["relations"])
    with torch.no_grad():
        got = model(x, edge_index, edge_type=edge_type)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_a_heterodata_of_the_graph_gives_the_same_outputs(graph, exported):
    out, want = exported
    model = load_pyg(out)
    data = graph.to_pyg()  # the typed graph's own relations: the reverses are rebuilt for the model
    assert not any("rev_" in key[1] for key in data.edge_types)
    x, edge_index, edge_type = typed_inputs(data, model.relations)
    with torch.no_grad():
        got = model(x, edge_index, edge_type=edge_type)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_what_does_not_fit_is_refused_in_one_line(graph, exported):
    out, _ = exported
    model = load_pyg(out)
    x, edge_index, edge_type = typed_inputs(graph, model.relations)
    with pytest.raises(ValueError, match="an R-GCN takes each edge's relation"):
        model(x, edge_index)
    with pytest.raises(ValueError, match="an R-GCN takes no edge weights"):
        model(x, edge_index, torch.ones(edge_index.shape[1]), edge_type=edge_type)
    with pytest.raises(ConfigError, match="the graph has no relation 'paper__likes__paper'; the model's relations"):
        typed_inputs(graph, list(model.relations) + ["paper__likes__paper"])
    with pytest.raises(ConfigError, match="has a relation the model lacks, 'paper__cites__paper'"):
        typed_inputs(graph, [name for name in model.relations if name != "paper__cites__paper"])
    with pytest.raises(ConfigError, match="not a typed graph"):
        typed_inputs(datasets.load("sbm:nodes=40,classes=3,features=4"), model.relations)


def test_the_command_says_the_model_takes_edge_types(exported, tmp_path, capsys):
    out, _ = exported
    assert main(["export", "--checkpoint", str(out.parent / "c.pt"), "--to", "pyg", "--out", str(tmp_path / "e")]) == 0
    said = capsys.readouterr().out
    assert "exported rgcn" in said and "called with edge_type, each edge's relation of 8" in said
