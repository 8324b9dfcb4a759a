"""``gnnmesh check-model``: a model on the view's primitives is exact split among ranks, one
with ``F.dropout`` is not, and says by how much; ``train --nproc`` checks a model of the
user's own first."""

from pathlib import Path

import pytest

from gnnmesh.train.model_check import Gap, TOLERANCE, problem
from tests.helpers import gnnmesh, one_error_line

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
F_DROPOUT = """
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, in_dim, num_classes, hidden=8):
        super().__init__()
        self.first, self.second = nn.Linear(in_dim, hidden), nn.Linear(hidden, num_classes)

    def forward(self, view, x):
        h = F.relu(view.spmm(self.first(F.dropout(x, 0.5, self.training))))
        return view.spmm(self.second(h))
"""


@pytest.fixture
def f_dropout(tmp_path):
    path = tmp_path / "f_dropout.py"
    path.write_text(F_DROPOUT)
    return f"{path}:Net"


def test_a_gap_past_the_tolerance_is_one_line_naming_the_worst_split():
    gaps = [Gap("partition", 2, training=0.3, eval=1e-7), Gap("tensor", 2, training=2 * TOLERANCE),
            Gap("grid3d", 2, refused="needs a LayerStack")]
    line = problem(gaps, "net.py:Net")
    assert "\n" not in line and "under partition x2" in line and "3.0e-01" in line and "--no-check-model" in line
    assert problem([Gap("partition", 3, training=TOLERANCE / 2, eval=0.0)], "net.py:Net") == ""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gatv2_is_exact_split_among_two_and_three_ranks():
    done = gnnmesh("check-model", f"{EXAMPLES / 'gatv2.py'}:GATv2", "--model-args", "hidden=4,heads=2", timeout=240)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == ["partition x2", "tensor x2", "partition x3", "tensor x3"]
    assert "exact (at most 1e-05)" in lines[-1]
    largest = float(lines[-1].split("largest gap ")[1].split()[0])
    assert largest <= TOLERANCE


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_f_dropout_shows_its_gap(f_dropout):
    done = gnnmesh("check-model", f_dropout, timeout=240)
    assert done.returncode == 1, done.stderr
    largest = float(done.stdout.strip().splitlines()[-1].split("largest gap ")[1].split()[0])
    assert largest > 0.01 and "NOT exact" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_on_two_ranks_checks_the_model_first(f_dropout):
    common = ["train", "--model", f_dropout, "--nproc", "2", "--strategy", "partition", "--partitioner", "rp",
              "--dataset", "sbm:nodes=120,classes=3,features=6", "--epochs", "1", "--quiet"]
    one_error_line(gnnmesh(*common, timeout=240), "differ from the single process's", "--no-check-model")
    assert gnnmesh(*common, "--no-check-model", timeout=240).returncode == 0
