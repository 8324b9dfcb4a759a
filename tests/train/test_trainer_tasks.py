"""The trainer under every task: multilabel and regression train under partition, offload, the
other full-graph strategies and a mini-batch strategy on two gloo ranks to the single process's
losses, parameters and metrics; class weights weigh the loss as torch does; checkpoints and
predictions follow the task; labels that do not fit are one line with exit status 2."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from gnnmesh import tasks
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.helpers import random_graph
from tests.parity import assert_same_run

EPOCHS = 10


def task_graph(kind: str):
    """A 37-node random graph (directed, self-loops, isolated nodes) with ``kind``'s labels."""
    graph = random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)
    gen = torch.Generator().manual_seed(7)
    if kind == "multilabel":
        return graph.replace(y=(torch.rand(37, 4, generator=gen) < 0.4).float())
    if kind == "regression":
        return graph.replace(y=torch.randn(37, 2, generator=gen))
    return graph


def config(kind: str, **fields) -> Config:
    loss = {"regression_loss": "mae"} if kind == "regression" else {}
    return Config.of(**{"epochs": EPOCHS, "seed": 1, "hidden": 8, **loss, **fields})


def train(kind: str, **fields) -> dict:
    from gnnmesh.train.minibatch import MiniBatchTrainer
    trainer = (MiniBatchTrainer if fields.get("minibatch") else Trainer)(config(kind, **fields), task_graph(kind))
    summary = trainer.fit()
    names = [k for k in tasks.record_fields(trainer.task, None) if k != "metric"]
    return {"losses": [r.loss for r in summary.history],
            "accs": [(r.train_acc, r.val_acc, r.test_acc) for r in summary.history],
            "metrics": [[r.extra[k] for k in names] for r in summary.history],
            "params": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
            "task": trainer.config.training.task}


def assert_same_metrics(got: dict, want: dict) -> None:
    assert np.allclose(got["accs"], want["accs"], rtol=0, atol=1e-5), (got["accs"], want["accs"])
    assert np.allclose(got["metrics"], want["metrics"], rtol=0, atol=1e-5, equal_nan=True)


MINIBATCH = {"minibatch": True, "batch_size": 6, "fanouts": "3,4"}
RUNS = {"partition": {"strategy": "partition", "partitioner": "contiguous"},
        "offload": {"strategy": "offload", "chunks": "2"},
        "tensor": {"strategy": "tensor"},
        "grid3d": {"strategy": "grid3d", "grid": "1,1,2"},
        "gdp": {"strategy": "gdp", **MINIBATCH}}


def _rank_runs(rank, world, strategies):
    return {(s, kind): train(kind, **RUNS[s], nproc=world) for s in strategies for kind in ("multilabel", "regression")}


def check_runs(strategies, timeout):
    want = {(s, kind): train(kind, **({} if s != "gdp" else MINIBATCH))
            for s in strategies for kind in ("multilabel", "regression")}
    for rank, runs in enumerate(run_ranks(_rank_runs, 2, strategies, timeout=timeout)):
        for key, got in runs.items():
            try:
                assert got["task"] == key[1]
                assert_same_run(got, want[key])
                assert_same_metrics(got, want[key])
            except AssertionError as err:
                raise AssertionError(f"{key}, rank {rank} of 2: {err}") from None


@pytest.mark.timeout(150)
def test_multilabel_and_regression_under_partition_equal_the_single_process():
    check_runs(["partition"], timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_task_under_offload_tensor_grid3d_and_minibatch_equals_the_single_process():
    check_runs(["offload", "tensor", "grid3d", "gdp"], timeout=360)


def few_labelled(nodes: int = 1000, labelled: int = 60):
    """A graph of ``nodes`` nodes, 4 multilabel targets, of which the splits hold ``labelled`` rows."""
    graph = random_graph(n=nodes, e=4 * nodes, features=6, classes=3, directed=True, isolated=2)
    gen = torch.Generator().manual_seed(3)
    chosen = torch.randperm(nodes, generator=gen)[:labelled]
    masks = [torch.zeros(nodes, dtype=torch.bool) for _ in range(3)]
    for i, part in enumerate(chosen.chunk(3)):
        masks[i][part] = True
    return graph.replace(y=(torch.rand(nodes, 4, generator=gen) < 0.4).float(), train_mask=masks[0],
                         val_mask=masks[1], test_mask=masks[2])


def _rank_evaluation(rank, world):
    trainer = Trainer(config("multilabel", epochs=1, strategy="partition", partitioner="contiguous", nproc=world),
                      few_labelled())
    trainer.fit()
    trainer.strategy.reset_counters()
    trainer.evaluate()
    return trainer.metrics, trainer.strategy.take_counters()["phases"]["metrics"]["bytes"]


@pytest.mark.timeout(150)
def test_the_roc_auc_of_two_ranks_is_exact_and_sends_no_table_of_every_node():
    """Two ranks' ROC-AUC is the single process's to 1e-12, and what one evaluation sends is a
    small fraction of what a table of every node's outputs and targets (float32) would be: the
    ranks sort the split's scores between them."""
    single = Trainer(config("multilabel", epochs=1), few_labelled())
    single.fit()
    single.evaluate()
    table = 1000 * (4 + 4 + 1) * 4
    for metrics, sent in run_ranks(_rank_evaluation, 2, timeout=110):
        for got, want in zip(metrics, single.metrics):
            assert got["roc_auc"] == pytest.approx(want["roc_auc"], abs=1e-12)
            assert got["micro_f1"] == pytest.approx(want["micro_f1"], abs=1e-12)
        assert 0 < sent < table / 10, sent


def test_class_weights_weigh_the_loss_as_torch_does():
    graph = task_graph("classification")
    for weights, w in (("0.5,3,1", torch.tensor([0.5, 3.0, 1.0])), ("balanced", None)):
        trainer = Trainer(Config.of(epochs=1, seed=1, hidden=8, dropout=0.0, class_weights=weights), graph)
        m, y = graph.train_mask, graph.y
        if w is None:  # n / (K n_k) over the training rows
            w = (m.sum() / (3 * torch.bincount(y[m], minlength=3))).float()
        with torch.no_grad():
            logits = trainer.model(trainer.rank_data.view, trainer.rank_data.x)
        want = float(F.cross_entropy(logits[m], y[m], weight=w))
        assert trainer.train_step() == pytest.approx(want, rel=1e-6)
        assert want != pytest.approx(float(F.cross_entropy(logits[m], y[m])), rel=1e-3)


def test_class_ids_regressed_as_numbers_take_one_output():
    trainer = Trainer(config("classification", epochs=2, task="regression"), task_graph("classification"))
    assert trainer.num_classes == 1 and trainer.targets.shape == (37, 1)
    assert trainer.fit().metric == "r2"


def test_checkpoints_record_the_task_and_predictions_follow_it(tmp_path):
    path = tmp_path / "m.pt"
    graph = task_graph("multilabel")
    trainer = Trainer(config("multilabel", epochs=4, checkpoint=str(path)), graph)
    assert trainer.config.training.task == "multilabel" and "inferred from the labels" in trainer.task_note
    summary = trainer.fit()
    assert summary.metric == "roc_auc" and summary.history[-1].extra["metric"] == "roc_auc"
    bare = graph.replace(y=None, num_classes=None, train_mask=None, val_mask=None, test_mask=None)
    loaded = Trainer.from_checkpoint(path, bare, weights="last")
    assert loaded.task.name == "multilabel"
    _, logits = loaded.predict("logits")
    ids, probs = loaded.predict("probs")
    _, labels = loaded.predict("labels")
    assert np.allclose(probs, torch.sigmoid(torch.from_numpy(logits)).numpy())
    assert labels.dtype == np.int8 and np.array_equal(labels, (logits > 0).astype(np.int8))
    # resuming under another task is refused; under the same one it continues to the same numbers
    with pytest.raises(ConfigError, match="different settings: task"):
        Trainer(config("multilabel", epochs=6, checkpoint=str(path), resume=True, task="regression"), graph).fit()
    whole = Trainer(config("regression", epochs=6), task_graph("regression")).fit()
    Trainer(config("regression", epochs=3, checkpoint=str(path)), task_graph("regression")).fit()
    resumed = Trainer(config("regression", epochs=6, checkpoint=str(path), resume=True), task_graph("regression")).fit()
    assert [r.loss for r in resumed.history] == [r.loss for r in whole.history]
    assert resumed.val_acc == whole.val_acc


def write_npz(path, labels, train=None):
    n = len(labels)
    adj = sp.csr_matrix(np.eye(n, k=1, dtype=np.float32) + np.eye(n, k=-1, dtype=np.float32))
    masks = {}
    if train is not None:
        masks = {"train_mask": train, "val_mask": ~train & (np.arange(n) % 2 == 0),
                 "test_mask": ~train & (np.arange(n) % 2 == 1)}
    np.savez(path, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr, adj_shape=np.array(adj.shape),
             attr_matrix=np.random.default_rng(0).standard_normal((n, 3)).astype(np.float32), labels=labels, **masks)
    return str(path)


def fails(capsys, args, *fragments):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gnnmesh: error:"), err
    for fragment in fragments:
        assert fragment in err[0], err[0]


def test_labels_that_do_not_fit_the_task_are_one_line(tmp_path, capsys):
    rng = np.random.default_rng(1)
    matrix = write_npz(tmp_path / "m.npz", (rng.random((20, 3)) < 0.5).astype(np.float32))
    values = write_npz(tmp_path / "v.npz", rng.standard_normal((20, 1)).astype(np.float32))
    ids = write_npz(tmp_path / "c.npz", np.arange(20) % 3)
    train = np.arange(20) < 10
    nan = rng.standard_normal((20, 2)).astype(np.float32)
    nan[4, 1] = np.nan
    unlabelled = nan.copy()
    unlabelled[[4, 13]] = np.nan  # node 13 is in no split below
    train_args = ["train", "--epochs", "1", "--quiet", "--dataset"]
    fails(capsys, train_args + [matrix, "--task", "classification"],
          "classification needs one integer class id per node, got floats of shape [20x3]")
    fails(capsys, train_args + [ids, "--task", "multilabel"], "multilabel needs a matrix of 0/1 targets")
    fails(capsys, train_args + [values, "--task", "multilabel"], "multilabel targets are 0 or 1")
    fails(capsys, train_args + [values, "--class-weights", "balanced"],
          "'class_weights': weights classes, for the classification task; this run's task is regression "
          "(inferred from the labels")
    fails(capsys, train_args + [ids, "--class-weights", "1,2"], "'class_weights': 2 weights for 3 classes")
    fails(capsys, train_args + [write_npz(tmp_path / "n.npz", nan, train)],
          "field 'y' has a non-finite value nan at node 4, target 1, a row of 'train_mask'")
    fails(capsys, train_args + [ids, "--regression-loss", "mae", "--task", "multilabel"],
          "'regression_loss': applies to the regression task")
    fails(capsys, train_args + [write_npz(tmp_path / "neg.npz", np.arange(20) - 1)], "negative label -1")
    part = unlabelled.copy()
    masks = dict(train=train.copy())
    masks["train"][4] = False  # node 4: validation; node 13 in no split: it needs no target
    path = write_npz(tmp_path / "u.npz", part, masks["train"])
    fails(capsys, train_args + [path], "at node 4, target 0, a row of 'val_mask'")


def test_the_run_names_the_inferred_task_and_its_metric(tmp_path, capsys):
    rng = np.random.default_rng(2)
    path = write_npz(tmp_path / "m.npz", (rng.random((30, 3)) < 0.5).astype(np.float32), np.arange(30) < 15)
    checkpoint = tmp_path / "c.pt"
    assert main(["train", "--dataset", path, "--epochs", "2", "--checkpoint", str(checkpoint)]) == 0
    out = capsys.readouterr().out
    assert "task multilabel, inferred from the labels (a 0/1 matrix of 3 targets per node)" in out
    assert "| roc_auc train " in out and "best val roc_auc " in out
    assert main(["predict", "--checkpoint", str(checkpoint), "--dataset", path, "--out", str(tmp_path / "p"),
                 "--output", "probs"]) == 0
    values = write_npz(tmp_path / "v.npz", rng.standard_normal((30, 2)).astype(np.float32), np.arange(30) < 15)
    assert main(["train", "--dataset", values, "--epochs", "2", "--checkpoint", str(checkpoint)]) == 0
    assert "| r2 train " in capsys.readouterr().out
    fails(capsys, ["predict", "--checkpoint", str(checkpoint), "--dataset", values, "--out", str(tmp_path / "r"),
                   "--output", "labels"], "--output labels: a regression model predicts no labels")
    assert not (tmp_path / "r").exists()


def test_a_metric_without_a_value_is_said_to_be_undefined(tmp_path, capsys):
    """All-constant multilabel targets give no ROC-AUC on any epoch: the summary says so, rather
    than printing the selection's starting value (-1.0000) as if it were one."""
    path = write_npz(tmp_path / "c.npz", np.zeros((30, 3), dtype=np.float32), np.arange(30) < 15)
    assert main(["train", "--dataset", path, "--epochs", "2"]) == 0
    done = capsys.readouterr().out.strip().splitlines()[-1]
    assert "best val roc_auc undefined (no evaluation gave it a value" in done and "-1.0000" not in done, done
