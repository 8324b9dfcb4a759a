"""``gnnmesh export --to pyg``: a checkpoint's model rebuilt from PyG's own layers gives gnnmesh's
outputs (on Cora and on a directed, weighted graph with self-loops and isolated nodes), the
files are plain (JSON and a weights-only tensor dict), and bad input is one line, status 2,
with nothing written."""

import importlib.util
import json
import os
import shlex

import pytest
import torch

import gnnmesh
from gnnmesh import ConfigError, datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.export import MODEL_FILE, WEIGHTS_FILE, describe, export_pyg, load_pyg, pyg_inputs
from gnnmesh.models import Decoupled
from gnnmesh.train import Trainer
from gnnmesh.view import GraphView

from tests.helpers import gnnmesh as run_gnnmesh
from tests.helpers import model_fields, one_error_line, random_graph

MODELS = ["gcn", "sage", "gat", "gin", "decoupled-gcn", "decoupled-sage", "decoupled-gat"]
# The models whose gnnmesh form weights its aggregation by the edge weights and whose PyG layers
# take none (SAGEConv, GINConv): compared on unweighted graphs only.
UNWEIGHTED_ONLY = ("sage", "gin")
PYG_LAYERS = {"gcn": "GCNConv", "sage": "SAGEConv", "gat": "GATConv", "gin": "GINConv"}

needs_pyg = pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                               reason="torch_geometric is not installed (gnnmesh[pyg])")


@pytest.fixture(scope="module")
def cora():
    return datasets.load("cora")


@pytest.fixture(scope="module")
def directed(cora):
    """A directed multigraph with self-loops, isolated nodes and edge weights, of Cora's width."""
    return random_graph(n=60, e=400, seed=5, features=cora.num_features, classes=cora.num_classes,
                        weighted=True)


@pytest.fixture(scope="module")
def trained(cora, tmp_path_factory):
    """A checkpoint of every model after a few epochs on Cora."""
    root = tmp_path_factory.mktemp("checkpoints")
    paths = {}
    for name in MODELS:
        paths[name] = root / f"{name}.pt"
        Trainer(Config.of(**model_fields(name), epochs=4, checkpoint=str(paths[name])), cora).fit()
    return paths


def gnnmesh_output(checkpoint, graph, weights="best"):
    model, _ = gnnmesh.load(checkpoint, weights)
    with torch.no_grad():
        return model(GraphView(graph.adj), pyg_inputs(graph)[0])


def pyg_output(model, graph):
    x, edge_index, edge_weight = pyg_inputs(graph)
    with torch.no_grad():
        return model(x, edge_index, edge_weight)


def close(ours, theirs):
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-5)
    return float((theirs - ours).abs().max())


# -- the PyG model computes what gnnmesh's does -----------------------------------------------------

@needs_pyg
@pytest.mark.parametrize("name", MODELS)
def test_the_pyg_model_gives_gnnmesh_outputs(name, trained, cora, directed, tmp_path):
    spec = export_pyg(trained[name], tmp_path / "out")
    model = load_pyg(tmp_path / "out")
    base = name.split("-")[-1]
    if name.startswith("decoupled-"):
        from torch_geometric.nn import APPNP
        assert spec["decoupled"] and isinstance(model.propagation, APPNP)
        assert [type(m).__name__ for m in model.mlp] == ["Linear", "Linear"]
    else:
        assert [type(m).__name__ for m in model.convs] == [PYG_LAYERS[base]] * 2
    assert not model.training
    if base in UNWEIGHTED_ONLY:
        directed = directed.replace(adj=directed.adj.with_values(None))
    differences = [close(gnnmesh_output(trained[name], graph), pyg_output(model, graph))
                   for graph in (cora, directed)]
    print(f"{name}: max |difference| on cora {differences[0]:.2e}, on a directed graph {differences[1]:.2e}")
    # a model that reads edges the other way round gives other outputs on the directed graph
    x, edge_index, edge_weight = pyg_inputs(directed)
    with torch.no_grad():
        flipped = model(x, edge_index.flip(0), edge_weight)
    assert (flipped - gnnmesh_output(trained[name], directed)).abs().max() > 1e-2


@needs_pyg
def test_the_last_epochs_weights(trained, cora, tmp_path):
    export_pyg(trained["gat"], tmp_path / "out", weights="last")
    close(gnnmesh_output(trained["gat"], cora, "last"), pyg_output(load_pyg(tmp_path / "out"), cora))
    assert json.loads((tmp_path / "out" / MODEL_FILE).read_text())["trained"]["weights"] == "last"


@needs_pyg
@pytest.mark.parametrize("name", UNWEIGHTED_ONLY)
def test_sage_and_gin_refuse_edge_weights(name, trained, directed, tmp_path):
    export_pyg(trained[name], tmp_path / "out")
    with pytest.raises(ValueError, match="no edge weights"):
        pyg_output(load_pyg(tmp_path / "out"), directed)


def test_models_without_a_pyg_form_are_refused():
    with pytest.raises(ConfigError, match="no PyG export"):
        describe(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigError, match="no PyG export"):
        describe(Decoupled(4, 3, op="sum"))


# -- the files ---------------------------------------------------------------------------------------

def test_the_files_are_json_and_a_weights_only_tensor_dict(trained, tmp_path):
    out = tmp_path / "out"
    export_pyg(trained["gin"], out)
    assert sorted(os.listdir(out)) == [MODEL_FILE, WEIGHTS_FILE]
    spec = json.loads((out / MODEL_FILE).read_text())
    assert spec["format"] == "gnnmesh-pyg" and spec["model"] == "gin" and spec["in_channels"] == 1433
    assert [layer["type"] for layer in spec["layers"]] == ["GINConv", "GINConv"]
    assert spec["layers"][0]["args"] == {"eps": 0.0, "train_eps": True}
    weights = torch.load(out / WEIGHTS_FILE, weights_only=True)
    assert isinstance(weights, dict) and all(isinstance(v, torch.Tensor) for v in weights.values())
    assert {"convs.0.eps", "convs.1.nn.2.weight"} <= set(weights)
    assert float(weights["convs.0.eps"]) != 0.0  # trained, and exported


@needs_pyg
def test_load_pyg_refuses_damaged_or_foreign_exports(trained, tmp_path):
    out = tmp_path / "out"
    export_pyg(trained["gcn"], out)
    spec = json.loads((out / MODEL_FILE).read_text())
    with pytest.raises(ConfigError, match="no such file"):
        load_pyg(tmp_path / "absent")
    (out / MODEL_FILE).write_text(json.dumps({**spec, "layers": [{"type": "Module", "args": {}}]}))
    with pytest.raises(ConfigError, match="layer type 'Module' is not one an export writes"):
        load_pyg(out)
    (out / MODEL_FILE).write_text(json.dumps({**spec, "format": "other"}))
    with pytest.raises(ConfigError, match="not a gnnmesh PyG export"):
        load_pyg(out)
    (out / MODEL_FILE).write_text(json.dumps(spec))
    marker = tmp_path / "ran"
    torch.save({"convs.0.bias": Hostile(marker)}, out / WEIGHTS_FILE)
    with pytest.raises(ConfigError, match="its checksum is not the one model.json records"):
        load_pyg(out)
    # an export written before the checksum was recorded: read weights-only, running nothing
    (out / MODEL_FILE).write_text(json.dumps({k: v for k, v in spec.items() if k != "weights_checksum"}))
    with pytest.raises(ConfigError, match="unreadable weights"):
        load_pyg(out)
    assert not marker.exists()


def _set(spec, path, value):
    spec = json.loads(json.dumps(spec))
    inner = spec
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return spec


@needs_pyg
@pytest.mark.parametrize("model, path, value, message", [
    ("gat", ("layers", 0, "args", "in_channels"), 2**40, "'convs.0.lin.weight', (64, 1433) in the weights, "
                                                         "(64, 1099511627776) described"),
    ("gat", ("layers", 0, "args", "heads"), -1, "GATConv argument 'heads' must be an integer >= 1, got -1"),
    ("gat", ("layers", 0, "args", "heads"), float("inf"), "GATConv argument 'heads' must be an integer >= 1, got inf"),
    ("gat", ("layers", 0, "args", "dropout"), 7, "GATConv argument 'dropout' must be in [0, 1], got 7"),
    ("gat", ("layers", 1, "args", "concat"), "yes", "GATConv argument 'concat' must be true or false"),
    ("gcn", ("dropout",), float("nan"), "field 'dropout' must be a finite number, got nan"),
    ("decoupled-gat", ("attention", "heads"), 1e400, "field 'attention.heads' must be an integer >= 1, got inf"),
    ("decoupled-gat", ("propagation", "args", "K"), -3, "APPNP argument 'K' must be an integer >= 0"),
    ("gin", ("layers", 0, "nn", 0, 1, "out_features"), 2**40, "(64,) in the weights, (1099511627776,) described"),
    ("gcn", ("layers",), "[" * 100_000 + "]" * 100_000, "nested more than 100 levels deep"),
])
def test_a_damaged_model_json_is_one_line_before_anything_is_allocated(trained, tmp_path, model, path, value,
                                                                      message):
    """Sizes and arguments of model.json are checked, and the model's shapes compared with the
    weights on the meta device, before a tensor is made: 2^40 input channels is a refusal, not
    an allocation; heads of -1 or 1e400 are not errors inside torch."""
    out = tmp_path / "out"
    export_pyg(trained[model], out)
    spec = json.loads((out / MODEL_FILE).read_text())
    deep = isinstance(value, str) and value.startswith("[[")
    text = json.dumps(_set(spec, path, "DEEP" if deep else value))
    (out / MODEL_FILE).write_text(text.replace('"DEEP"', value) if deep else text)
    with pytest.raises(ConfigError) as info:
        load_pyg(out)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


# -- the command line --------------------------------------------------------------------------------

def export(capsys, *args):
    status = main(["export", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out.strip().splitlines(), err.strip().splitlines()


def test_the_command_writes_the_export_and_replaces_an_earlier_one(trained, tmp_path, capsys):
    out = tmp_path / "pyg"
    for _ in range(2):
        status, lines, errors = export(capsys, "--checkpoint", trained["gcn"], "--to", "pyg", "--out", out)
        assert status == 0 and not errors and len(lines) == 1
        assert lines[0].startswith("exported gcn (best weights) to ") and str(out) in lines[0]
        assert sorted(os.listdir(out)) == [MODEL_FILE, WEIGHTS_FILE]
    assert sorted(os.listdir(tmp_path)) == ["pyg"]  # no temporaries left


class Hostile:
    """Unpickled by a trusting loader, runs a shell command that creates ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(self.marker)}",))


def _truncated(trained, tmp_path):
    data = trained["gcn"].read_bytes()
    path = tmp_path / "truncated.pt"
    path.write_bytes(data[:len(data) // 2])
    return path


def _hostile(trained, tmp_path):
    state = torch.load(trained["gcn"], weights_only=True)
    state["history"] = [Hostile(tmp_path / "ran")]
    path = tmp_path / "hostile.pt"
    torch.save(state, path)
    return path


@pytest.mark.parametrize("make, message", [
    (_truncated, "unreadable checkpoint"),
    (_hostile, "unreadable checkpoint"),
    (lambda trained, tmp_path: tmp_path / "absent.pt", "no such checkpoint"),
])
def test_a_bad_checkpoint_is_one_line_and_writes_nothing(trained, tmp_path, capsys, make, message):
    checkpoint = make(trained, tmp_path)
    before = sorted(os.listdir(tmp_path))
    status, lines, errors = export(capsys, "--checkpoint", checkpoint, "--to", "pyg", "--out", tmp_path / "out")
    assert status == 2 and not lines and len(errors) == 1
    assert errors[0].startswith("gnnmesh: error:") and str(checkpoint) in errors[0] and message in errors[0]
    assert sorted(os.listdir(tmp_path)) == before  # no export, no temporary, and the bait never ran


def test_the_program_refuses_a_hostile_checkpoint(trained, tmp_path):
    checkpoint = _hostile(trained, tmp_path)
    torch.load(checkpoint, weights_only=False)  # the bait works: a trusting loader runs it
    assert (tmp_path / "ran").exists()
    (tmp_path / "ran").unlink()
    result = run_gnnmesh("export", "--checkpoint", str(checkpoint), "--to", "pyg", "--out", str(tmp_path / "out"))
    one_error_line(result, str(checkpoint), "unreadable checkpoint")
    assert sorted(os.listdir(tmp_path)) == ["hostile.pt"]


@pytest.mark.parametrize("existing, why", [
    ({"notes.txt": "mine"}, "it holds notes.txt and no model.json"),
    ({MODEL_FILE: '{"name": "another model"}'}, 'model.json: not a gnnmesh PyG export (no "format": "gnnmesh-pyg")')])
def test_a_directory_holding_something_else_is_refused(trained, tmp_path, capsys, existing, why):
    out = tmp_path / "out"
    out.mkdir()
    for name, text in existing.items():
        (out / name).write_text(text)
    status, lines, errors = export(capsys, "--checkpoint", trained["sage"], "--to", "pyg", "--out", out)
    assert status == 2 and not lines and len(errors) == 1
    assert errors[0] == f"gnnmesh: error: {out}: exists and is not a PyG export ({why}); refusing to overwrite it"
    assert {p.name: p.read_text() for p in out.iterdir()} == existing
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_an_unknown_target_is_one_line(trained, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["export", "--checkpoint", str(trained["gcn"]), "--to", "onnx", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "invalid choice: 'onnx'" in err[0]
    assert not (tmp_path / "out").exists()
