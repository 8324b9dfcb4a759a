"""Normalisation and dropout of vertex rows in a user's model: ``view.batch_norm``
(``gnnmesh.models.BatchNorm``) equals the single process under partition and tensor, and the
torch modules that mix rows or draw a rank's own random numbers are refused when the model
is built, each named with its replacement in one line."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models import BatchNorm
from gnnmesh.train import Trainer
from gnnmesh.view import GraphView
from tests.dist import run_ranks
from tests.helpers import gnnmesh_in_process, one_error_line, random_graph
from tests.parity import assert_same_run

EPOCHS = 5


class NormedGCN(nn.Module):
    """A GCN with a batch norm after its first layer (the habit ``nn.BatchNorm1d`` serves)."""

    def __init__(self, in_dim, num_classes, hidden=8):
        super().__init__()
        self.first, self.norm, self.second = nn.Linear(in_dim, hidden), BatchNorm(hidden), nn.Linear(hidden, num_classes)

    def forward(self, view, x):
        h = F.relu(self.norm(view, view.spmm(self.first(x), "gcn")))
        return view.spmm(self.second(view.dropout(h, 0.3, self.training)), "gcn")


class TorchNormedGCN(NormedGCN):
    def __init__(self, in_dim, num_classes, hidden=8):
        super().__init__(in_dim, num_classes, hidden)
        self.norm, self.drop = nn.BatchNorm1d(hidden), nn.Dropout(0.5)


def run(strategy: str) -> dict:
    torch.manual_seed(3)
    settings = {"partitioner": "rp"} if strategy == "partition" else {}
    trainer = Trainer(Config.of(strategy=strategy, epochs=EPOCHS, seed=1, **settings), random_graph(n=41),
                      model=NormedGCN(8, 3))
    summary = trainer.fit()
    trainer.model.eval()
    return {"losses": [r.loss for r in summary.history],
            "params": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}}


def _rank_run(rank, world, strategy):
    return run(strategy)


@pytest.fixture(scope="module")
def single():
    return run("single")


def test_batch_norm_on_one_process_is_torch_s():
    x, view = torch.randn(23, 5, dtype=torch.float64), GraphView(random_graph(n=23).adj)
    mean, var, weight, bias = torch.zeros(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64), \
        torch.rand(5, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
    want_mean, want_var = mean.clone(), var.clone()
    got = view.batch_norm(x, mean, var, weight, bias, True, 0.2, 1e-5)
    want = F.batch_norm(x, want_mean, want_var, weight, bias, True, 0.2, 1e-5)
    assert torch.allclose(got, want) and torch.allclose(mean, want_mean) and torch.allclose(var, want_var)
    assert torch.allclose(view.batch_norm(x, mean, var, weight, bias, False),
                          F.batch_norm(x, mean, var, weight, bias, False))


def test_batch_norm_trains_on_one_process(single):
    assert len(single["losses"]) == EPOCHS and single["losses"][-1] < single["losses"][0]
    assert float(single["params"]["norm.running_mean"].abs().sum()) > 0  # training updated the statistics


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy,ranks", [("partition", 3), ("tensor", 2)])
def test_batch_norm_equals_the_single_process(strategy, ranks, single):
    for got in run_ranks(_rank_run, ranks, strategy, timeout=240):
        assert_same_run(got, single)


def test_torch_batch_norm_and_dropout_are_refused_with_their_replacements():
    with pytest.raises(ConfigError) as refused:
        Trainer(Config.of(epochs=1), random_graph(), model=TorchNormedGCN(8, 3))
    message = str(refused.value)
    assert "\n" not in message
    assert "'norm' is a torch.nn.BatchNorm1d: use gnnmesh.models.BatchNorm (view.batch_norm" in message
    assert "'drop' is a torch.nn.Dropout: use gnnmesh.models.Dropout (view.dropout" in message


def test_a_model_file_with_batch_norm_1d_is_one_line_from_the_command_line(tmp_path):
    model = tmp_path / "bn.py"
    model.write_text("import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n"
                     "    def __init__(self, in_dim, num_classes):\n        super().__init__()\n"
                     "        self.lin, self.bn = nn.Linear(in_dim, num_classes), nn.BatchNorm1d(num_classes)\n\n"
                     "    def forward(self, view, x):\n        return self.bn(view.spmm(self.lin(x)))\n")
    result = gnnmesh_in_process("train", "--model", f"{model}:Net", "--dataset", "sbm:nodes=60,classes=3,features=4",
                                "--epochs", "1")
    one_error_line(result, "'bn' is a torch.nn.BatchNorm1d", "view.batch_norm")
