"""``gnnmesh export`` of a link model: the export carries the trained decoder, and the PyG
module's ``decode(encode(x, edge_index), pairs)`` equals ``gnnmesh predict --pairs`` on the same
pairs (to 1e-5) for every decoder; a damaged decoder file is one line."""

import importlib.util
import json

import numpy as np
import pytest
import torch

from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.export import DECODER_FILE, MODEL_FILE, LinkModel, export_pyg, load_pyg, pyg_inputs
from gnnmesh.link.trainer import LinkTrainer
from gnnmesh.predict import read
from gnnmesh.train import Trainer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                                reason="torch_geometric is not installed (gnnmesh[pyg])")

SBM = "sbm:nodes=120,classes=3,features=10,seed=2"
# (model, decoder, loss): each decoder, the MLP with and without its last bias (bce, bpr)
RUNS = [("gcn", "dot", "bce"), ("sage", "mlp", "bce"), ("gcn", "mlp", "bpr"), ("gcn", "distmult", "bce")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("link-export")
    graph = datasets.load(SBM)
    paths = {}
    for model, decoder, loss in RUNS:
        path = root / f"{model}-{decoder}-{loss}.pt"
        LinkTrainer(Config.of(dataset=SBM, task="link", model=model, epochs=3, hidden=8, decoder=decoder,
                              link_loss=loss, checkpoint=str(path)), graph).fit()
        paths[(model, decoder, loss)] = path
    rng = np.random.default_rng(1)
    pairs = rng.integers(0, graph.num_nodes, size=(40, 2))
    (root / "pairs.csv").write_text("source,destination\n" + "".join(f"{a},{b}\n" for a, b in pairs))
    return {"root": root, "graph": graph, "paths": paths, "pairs": pairs}


@pytest.mark.parametrize("run", RUNS, ids=["-".join(r) for r in RUNS])
def test_exported_scores_equal_predict_pairs(trained, run, capsys):
    root, path = trained["root"], trained["paths"][run]
    name = "-".join(run)
    assert main(["predict", "--checkpoint", str(path), "--dataset", SBM, "--pairs", str(root / "pairs.csv"),
                 "--out", str(root / f"{name}-scores")]) == 0
    assert main(["export", "--checkpoint", str(path), "--to", "pyg", "--out", str(root / f"{name}-pyg")]) == 0
    assert f"{DECODER_FILE} (read with gnnmesh.export.load_pyg; its {run[1]} decoder scores pairs)" in \
        capsys.readouterr().out
    predicted = read(root / f"{name}-scores")

    model = load_pyg(root / f"{name}-pyg")
    assert isinstance(model, LinkModel) and not model.training
    spec = json.loads((root / f"{name}-pyg" / MODEL_FILE).read_text())
    assert spec["decoder"]["type"] == run[1] and spec["decoder"]["shift"] == (run[1] == "mlp" and run[2] == "bce")
    # the encoder runs on the graph it was trained on: the training edges, the held-out ones left out
    encoded_on = Trainer.from_checkpoint(path, trained["graph"]).split.graph
    x, edge_index, edge_weight = pyg_inputs(encoded_on)
    with torch.no_grad():
        z = model.encode(x, edge_index, edge_weight)
        scores = model.decode(z, torch.from_numpy(predicted.extra["pairs"]).t())
    np.testing.assert_array_equal(predicted.extra["pairs"], trained["pairs"])
    np.testing.assert_allclose(scores.numpy(), predicted.values, rtol=0, atol=1e-5)
    # a decoder left untrained scores otherwise: the comparison can fail
    if run[1] != "dot":
        fresh = type(model.decoder)(z.shape[1], spec["decoder"]["shift"])
        with torch.no_grad():
            other = fresh(z[predicted.extra["pairs"][:, 0]], z[predicted.extra["pairs"][:, 1]])
        assert not np.allclose(other.numpy(), predicted.values, rtol=0, atol=1e-5)


def test_a_node_model_is_exported_without_a_decoder(tmp_path):
    graph = datasets.load(SBM)
    Trainer(Config.of(dataset=SBM, epochs=1, hidden=8, checkpoint=str(tmp_path / "n.pt")), graph).fit()
    spec = export_pyg(tmp_path / "n.pt", tmp_path / "pyg")
    assert "decoder" not in spec and not (tmp_path / "pyg" / DECODER_FILE).exists()
    assert not isinstance(load_pyg(tmp_path / "pyg"), LinkModel)


def test_a_damaged_decoder_is_one_line(trained, tmp_path):
    out = tmp_path / "pyg"
    export_pyg(trained["paths"][("sage", "mlp", "bce")], out)
    torch.save({"hidden.weight": torch.zeros(3, 3)}, out / DECODER_FILE)
    with pytest.raises(ConfigError, match=f"{DECODER_FILE}: its checksum is not the one"):
        load_pyg(out)
    spec = json.loads((out / MODEL_FILE).read_text())
    spec["decoder"]["type"] = "cosine"
    (out / MODEL_FILE).write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match="field 'decoder' is not one an export writes"):
        load_pyg(out)


NET = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, in_dim, num_classes, hidden=8):
        super().__init__()
        self.lin, self.out = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes)

    def forward(self, view, x):
        return view.spmm(self.out(torch.relu(view.spmm(self.lin(x), "gcn"))), "mean")
'''


def test_a_link_model_of_your_own_is_exported_with_its_decoder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(NET)
    graph = datasets.load(SBM)
    LinkTrainer(Config.of(dataset=SBM, task="link", model="net.py:Net", decoder="distmult", epochs=2,
                          checkpoint="own.pt"), graph).fit()
    spec = export_pyg("own.pt", "own-pyg", model="net.py:Net")
    assert spec["decoder"]["type"] == "distmult" and "user_model" in spec
    model = load_pyg("own-pyg")
    trainer = Trainer.from_checkpoint("own.pt", graph, model="net.py:Net")
    pairs = np.array([[0, 5], [7, 100], [3, 3], [119, 0]])
    with torch.no_grad():
        scores = model.decode(model.encode(*pyg_inputs(trainer.split.graph)), torch.from_numpy(pairs).t())
    np.testing.assert_allclose(scores.numpy(), trainer.score_pairs(pairs)[1], rtol=0, atol=1e-5)
