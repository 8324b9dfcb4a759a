"""``gnnmesh export --to pyg`` of your own model: its source, weights and a stand-alone view of
the primitives on an ``edge_index`` give gnnmesh's predictions, with gnnmesh or without it; the
model file comes from ``--model`` or from where the checkpoint records it, and a changed file is
one line."""

import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import gnnmesh
from gnnmesh import ConfigError
from gnnmesh.config import Config
from gnnmesh.export import export_pyg, load_pyg, pyg_inputs
from gnnmesh.train import Trainer
from gnnmesh.view import GraphView

from tests.helpers import one_error_line, random_graph
from tests.helpers import gnnmesh_in_process as run_gnnmesh

# A model on the newer primitives: batch norm and dropout of vertex rows, a dot-product sddmm,
# the mean and gcn operators, and its own embeddings.
NORMED = textwrap.dedent('''
    import torch
    from torch import nn
    from gnnmesh.models import BatchNorm, Dropout

    class Normed(nn.Module):
        def __init__(self, in_dim, num_classes, hidden=16):
            super().__init__()
            self.lin, self.out = nn.Linear(in_dim, hidden), nn.Linear(2 * hidden, num_classes)
            self.norm, self.drop = BatchNorm(hidden), Dropout(0.3)

        def embed(self, view, x):
            h = torch.relu(self.norm(view, view.spmm(self.lin(x), "gcn")))
            gate = torch.sigmoid(view.sddmm(h, h, "loop", "dot"))
            return torch.cat([view.spmm(h, "mean"), view.spmm(h, "loop", values=gate)], dim=1)

        def forward(self, view, x):
            return self.out(self.drop(view, self.embed(view, x)))
''')

MODELS = {"gatv2": ("examples/gatv2.py", "GATv2", "hidden=4,heads=2"),
          "graphconv": ("examples/graphconv.py", "GraphConv", "hidden=8"),
          "normed": ("normed.py", "Normed", "hidden=8")}


@pytest.fixture(scope="module")
def graph():
    """Directed, weighted, with duplicate edges, self-loops and isolated nodes."""
    return random_graph(n=50, e=300, seed=3, features=6, classes=3, weighted=True)


@pytest.fixture(scope="module")
def trained(graph, tmp_path_factory):
    """Each model's file and a checkpoint beside it, after a few epochs."""
    root = tmp_path_factory.mktemp("own")
    (root / "normed.py").write_text(NORMED)
    out = {}
    for key, (file, cls, args) in MODELS.items():
        source = root / f"{key}_{file.rsplit('/', 1)[-1]}"
        shutil.copyfile(file if key != "normed" else root / file, source)
        path = root / f"{key}.pt"
        Trainer(Config.of(model=f"{source}:{cls}", model_args=args, epochs=3, checkpoint=str(path)), graph).fit()
        out[key] = (path, f"{source}:{cls}")
    return out


def gnnmesh_output(path, name, graph):
    model, _ = gnnmesh.load(path, model=name)
    with torch.no_grad():
        return model(GraphView(graph.adj), pyg_inputs(graph)[0])


@pytest.mark.parametrize("key", list(MODELS))
def test_an_export_of_your_model_gives_gnnmeshs_outputs(key, trained, graph, tmp_path):
    path, name = trained[key]
    spec = export_pyg(path, tmp_path / "out", model=name)
    assert spec["user_model"]["class"] == MODELS[key][1]
    x, edge_index, edge_weight = pyg_inputs(graph)
    with torch.no_grad():
        got = load_pyg(tmp_path / "out")(x, edge_index, edge_weight)
    assert torch.allclose(got, gnnmesh_output(path, name, graph), atol=1e-5)


def test_embeddings_of_an_exported_model_are_its_own(trained, graph, tmp_path):
    path, name = trained["normed"]
    export_pyg(path, tmp_path / "out", model=name)
    model, _ = gnnmesh.load(path, model=name)
    x, edge_index, edge_weight = pyg_inputs(graph)
    with torch.no_grad():
        want = model.embed(GraphView(graph.adj), x)
        assert torch.allclose(load_pyg(tmp_path / "out").embed(x, edge_index, edge_weight), want, atol=1e-5)


def test_the_export_runs_without_gnnmesh(trained, graph, tmp_path):
    """In a fresh interpreter where ``import gnnmesh`` fails, the export's own loader runs it."""
    path, name = trained["gatv2"]
    export_pyg(path, tmp_path / "out", model=name)
    torch.save(pyg_inputs(graph), tmp_path / "inputs.pt")
    script = textwrap.dedent(f'''
        import sys, torch

        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "gnnmesh":
                    raise ModuleNotFoundError(name)

        sys.meta_path.insert(0, NotInstalled())
        sys.path.insert(0, {str(tmp_path / "out")!r})
        import gnnmesh_view
        x, edge_index, edge_weight = torch.load({str(tmp_path / "inputs.pt")!r}, weights_only=True)
        with torch.no_grad():
            torch.save(gnnmesh_view.load({str(tmp_path / "out")!r})(x, edge_index, edge_weight),
                       {str(tmp_path / "got.pt")!r})
    ''')
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path)
    got = torch.load(tmp_path / "got.pt", weights_only=True)
    assert torch.allclose(got, gnnmesh_output(path, name, graph), atol=1e-5)


def test_the_model_file_is_found_beside_the_checkpoint(trained, tmp_path):
    path, name = trained["graphconv"]
    result = run_gnnmesh("export", "--checkpoint", path, "--to", "pyg", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "graphconv_graphconv.py").is_file() and (tmp_path / "out" / "gnnmesh_view.py").is_file()


def test_a_changed_model_file_is_one_line(trained, tmp_path):
    path, name = trained["graphconv"]
    changed = tmp_path / "net.py"
    changed.write_text(open(name.rpartition(":")[0]).read() + "\n# changed\n")
    result = run_gnnmesh("export", "--checkpoint", path, "--to", "pyg", "--out", tmp_path / "out",
                         "--model", f"{changed}:GraphConv")
    one_error_line(result, "is not the one the model was trained from")
    assert not (tmp_path / "out").exists()


def test_an_earlier_export_of_your_model_is_replaced(trained, tmp_path):
    path, name = trained["normed"]
    export_pyg(path, tmp_path / "out", model=name)
    export_pyg(path, tmp_path / "out", model=name)
    assert (tmp_path / "out" / "gnnmesh_models" / "row_wise.py").is_file()


def test_a_changed_source_in_the_export_is_one_error(trained, tmp_path):
    path, name = trained["graphconv"]
    export_pyg(path, tmp_path / "out", model=name)
    source = tmp_path / "out" / "graphconv_graphconv.py"
    source.write_text(source.read_text() + "\n# changed\n")
    with pytest.raises(ConfigError, match="not the file the model was exported with"):
        load_pyg(tmp_path / "out")


def test_a_file_beside_the_checkpoint_that_is_not_the_trained_one_is_not_used(trained, tmp_path):
    path, name = trained["graphconv"]
    copied = tmp_path / path.name
    shutil.copyfile(path, copied)
    bait = tmp_path / "graphconv_graphconv.py"
    bait.write_text("raise SystemExit('ran')\n")
    result = run_gnnmesh("export", "--checkpoint", copied, "--to", "pyg", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr  # the trained file, at the name the checkpoint records
    assert (tmp_path / "out" / bait.name).read_text() == open(name.rpartition(":")[0]).read()
    bait.unlink()
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copyfile(path, moved / path.name)
    (moved / bait.name).write_text("raise SystemExit('ran')\n")
    state = torch.load(moved / path.name, weights_only=True)
    state["config"]["model"] = f"{bait.name}:GraphConv"  # a name the current directory does not hold
    state["user_model"]["file"] = None
    torch.save(state, moved / path.name)
    result = run_gnnmesh("export", "--checkpoint", moved / path.name, "--to", "pyg", "--out", tmp_path / "out2")
    one_error_line(result, f"the model file {moved / bait.name} is not the one the model was trained from: it "
                   "changed since training", "give the file it was trained from with --model FILE.py:CLASS")


def test_model_is_refused_for_a_built_in_models_checkpoint(graph, tmp_path):
    path = tmp_path / "gcn.pt"
    Trainer(Config.of(epochs=1, checkpoint=str(path)), graph).fit()
    with pytest.raises(ConfigError, match="built-in model gcn; --model is for a checkpoint of your own model"):
        export_pyg(path, tmp_path / "out", model="examples/graphconv.py:GraphConv")
