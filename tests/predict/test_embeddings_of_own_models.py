"""Embeddings of a model of the user's own: what its ``embed(view, x)`` returns, under every
strategy as its logits are; a model that does not say what its embeddings are is refused in
one line, never given its logits."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.train import Trainer
from gnnmesh.train.trainer import input_features
from gnnmesh.view import GraphView
from tests.dist import run_ranks
from tests.helpers import gnnmesh_in_process, one_error_line

SBM = "sbm:nodes=120,classes=3,features=6"
PLAIN = """
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, in_dim, num_classes):
        super().__init__()
        self.lin = nn.Linear(in_dim, num_classes)

    def forward(self, view, x):
        return view.spmm(self.lin(x))
"""


class Plain(nn.Module):
    def __init__(self, in_dim, num_classes, hidden=5):
        super().__init__()
        self.first, self.second = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes)

    def forward(self, view, x):
        return view.spmm(self.second(F.relu(self.hidden(view, x))))

    def hidden(self, view, x):
        h = view.spmm(self.first(x))
        return h + self.first(x)  # a residual: no dropout -> layer -> activation order to fold it into


class Embedding(Plain):
    def embed(self, view, x):
        return self.hidden(view, x)


def trained(cls, strategy="single"):
    torch.manual_seed(0)
    settings = {"partitioner": "rp"} if strategy == "partition" else {}
    trainer = Trainer(Config.of(epochs=2, seed=1, strategy=strategy, **settings), datasets.load(SBM),
                      model=cls(6, 3))
    trainer.fit()
    return trainer


def test_a_model_s_embed_gives_its_embeddings():
    trainer = trained(Embedding)
    ids, values = trainer.predict("embeddings")
    graph = datasets.load(SBM)
    trainer.model.eval()
    with torch.no_grad():
        want = trainer.model.embed(GraphView(graph.adj), input_features(graph))
    assert values.shape == (120, 5)
    torch.testing.assert_close(torch.from_numpy(values[ids.argsort()]), want, rtol=0, atol=1e-6)


def test_a_plain_model_without_embed_is_refused_not_given_its_logits():
    trainer = trained(Plain)
    with pytest.raises(ConfigError, match=r"the model Plain \(a plain nn.Module\) does not say what its embeddings "
                                          r"are; give it a method embed\(view, x\)"):
        trainer.predict("embeddings")
    with pytest.raises(ConfigError, match=r"--layer 1: the model Plain is not a LayerStack"):
        trainer.predict("embeddings", layer=1)
    assert trainer.predict("logits")[1].shape == (120, 3)  # its logits are still its logits


def _rank_embeddings(rank, world):
    return trained(Embedding, "partition").predict("embeddings")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_embed_split_among_ranks_equals_the_single_process():
    ids, want = trained(Embedding, "partition").predict("embeddings")
    got = run_ranks(_rank_embeddings, 2, timeout=240)
    rows = {int(i): row for part_ids, values in got for i, row in zip(part_ids, values)}
    for i, row in zip(ids, want):
        torch.testing.assert_close(torch.from_numpy(rows[int(i)]), torch.from_numpy(row), rtol=1e-5, atol=1e-6)


def test_predict_embeddings_of_a_plain_model_file_is_one_line(tmp_path):
    model = tmp_path / "plain.py"
    model.write_text(PLAIN)
    checkpoint = tmp_path / "c.pt"
    trained_ok = gnnmesh_in_process("train", "--model", f"{model}:Net", "--dataset", SBM, "--epochs", "1",
                                    "--quiet", "--checkpoint", checkpoint)
    assert trained_ok.returncode == 0, trained_ok.stderr
    result = gnnmesh_in_process("predict", "--checkpoint", checkpoint, "--model", f"{model}:Net", "--dataset", SBM,
                                "--output", "embeddings", "--out", tmp_path / "p")
    one_error_line(result, "does not say what its embeddings are")
    assert not (tmp_path / "p").exists()
