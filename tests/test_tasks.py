"""Tasks: each loss and metric equals its hand-computed value, ROC-AUC is exact with ties, sums
reduced over any cut of the rows equal the whole's, labels are inferred and checked, and a
task of one's own trains through the trainer."""

import importlib.util
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnmesh import tasks
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError, GraphError
from gnnmesh.graph import check_vertex_data
from gnnmesh.tasks import Evaluation, build, custom, infer, roc_auc

from tests.helpers import random_graph


def pairwise_auc(scores, targets):
    """AUC by its definition: over every (positive, negative) pair, 1 if the positive scores
    higher, 1/2 on a tie."""
    pos, neg = scores[targets == 1], scores[targets == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def test_roc_auc_is_exact_with_ties():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, (200, 5)).astype(np.float32)  # four values: ties everywhere
    targets = (rng.random((200, 5)) < 0.3).astype(np.float32)
    got = roc_auc(scores, targets)
    for j in range(5):
        assert got[j] == pytest.approx(pairwise_auc(scores[:, j], targets[:, j]), abs=1e-12)
    assert roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]))[0] == 0.75  # scikit-learn's example
    assert roc_auc(np.array([0.5, 0.5, 0.5]), np.array([0, 1, 1]))[0] == 0.5
    assert np.isnan(roc_auc(np.array([[0.1], [0.2]]), np.array([[1], [1]]))[0])  # no negative row
    if importlib.util.find_spec("sklearn"):
        from sklearn.metrics import roc_auc_score
        for j in range(5):
            assert got[j] == pytest.approx(roc_auc_score(targets[:, j], scores[:, j]), abs=1e-12)


def test_classification_loss_and_class_weights_are_torchs():
    gen = torch.Generator().manual_seed(0)
    logits, y = torch.randn(40, 3, generator=gen), torch.randint(0, 3, (40,), generator=gen)
    plain = build("classification")
    assert plain.loss(logits, y) / plain.count(y) == F.cross_entropy(logits, y)
    weighted = build("classification", class_weights="1,4,0.5")
    weighted.setup(y, 3, lambda t: t)
    w = torch.tensor([1.0, 4.0, 0.5])
    assert float(weighted.loss(logits, y) / weighted.count(y)) == pytest.approx(
        float(F.cross_entropy(logits, y, weight=w)), rel=1e-6)
    balanced = build("classification", class_weights="balanced")
    balanced.setup(y, 4, lambda t: t)  # a fourth class absent from training: weight 0
    counts = torch.bincount(y, minlength=4).double()
    expected = [40 / (4 * c) if c else 0.0 for c in counts.tolist()]
    assert balanced.weight.tolist() == pytest.approx(expected)
    hits = float((logits.argmax(-1) == y).sum())
    assert plain.finish(plain.sums(logits, y), 40.0) == {"accuracy": hits / 40}
    with pytest.raises(ConfigError, match=r"'class_weights': 3 weights for 4 classes"):
        build("classification", class_weights="1,2,3").setup(y, 4, lambda t: t)


def test_multilabel_loss_micro_f1_and_roc_auc():
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.3], [-0.2, 1.0], [-1.0, -3.0]])
    targets = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    task = build("multilabel")
    assert task.loss(logits, targets) / task.count(targets) == pytest.approx(
        float(F.binary_cross_entropy_with_logits(logits, targets)))
    sums = task.sums(logits, targets)   # predicted: (0,0) (1,0) (1,1) (2,1); tp 3, fp 1, fn 1
    assert sums.tolist() == [3.0, 1.0, 1.0]
    assert task.finish(sums, 4.0) == {"micro_f1": 6 / 8}
    auc = task.finish_ranked(roc_auc(*task.ranked_inputs(logits, targets)))["roc_auc"]
    assert auc == pytest.approx((pairwise_auc(logits[:, 0].numpy(), targets[:, 0].numpy())
                                 + pairwise_auc(logits[:, 1].numpy(), targets[:, 1].numpy())) / 2)
    assert torch.equal(task.labels(logits), (logits > 0).to(torch.int8))
    assert torch.allclose(task.probabilities(logits), torch.sigmoid(logits))


def test_regression_losses_r2_and_mae():
    gen = torch.Generator().manual_seed(1)
    targets = torch.randn(30, 2, generator=gen) * 3 + 1
    logits = targets + torch.randn(30, 2, generator=gen)
    mse, mae = build("regression"), build("regression", regression_loss="mae")
    error = logits - targets
    assert float(mse.loss(logits, targets) / mse.count(targets)) == pytest.approx(float((error ** 2).mean()))
    assert float(mae.loss(logits, targets) / mae.count(targets)) == pytest.approx(float(error.abs().mean()))
    mse.setup(targets[:10], 2, lambda t: t)  # sums of squares about the training mean
    metrics = mse.finish(mse.sums(logits, targets), 30.0)
    t = targets.double()
    e = logits.double() - t
    r2 = 1 - (e ** 2).sum(0) / ((t - t.mean(0)) ** 2).sum(0)
    assert metrics["r2"] == pytest.approx(float(r2.mean()), rel=1e-12)
    assert metrics["mae"] == pytest.approx(float(e.abs().mean()), rel=1e-12)
    if importlib.util.find_spec("sklearn"):
        from sklearn.metrics import r2_score
        assert metrics["r2"] == pytest.approx(r2_score(targets.numpy(), logits.numpy()), rel=1e-6)
    constant = torch.full((4, 1), 2.5)
    mse.setup(constant, 1, lambda t: t)
    assert mse.finish(mse.sums(constant, constant), 4.0)["r2"] == 1.0        # as scikit-learn scores it
    assert mse.finish(mse.sums(constant + 1, constant), 4.0)["r2"] == 0.0
    with pytest.raises(ConfigError, match="no probabilities; write --output logits"):
        mse.check_output("probs")


class MedianError(tasks.Task):
    """A metric that is no sum: the median absolute error, from every row of a split at once."""

    name, metric, metrics, gathers = "median", "neg_median", ("neg_median",), ("neg_median",)

    def gathered(self, scores, targets):
        return {"neg_median": -float((scores[:, 0] - targets[:, 0]).abs().median()) if len(scores) else math.nan}


def cut_case(name: str):
    """(task, outputs, targets, split masks) of 50 rows: outputs rounded to one decimal (ties)."""
    gen = torch.Generator().manual_seed(2)
    n = 50
    y = {"classification": torch.randint(0, 4, (n,), generator=gen),
         "multilabel": (torch.rand(n, 4, generator=gen) < 0.4).float(),
         "regression": torch.randn(n, 4, generator=gen), "median": torch.randn(n, generator=gen)}[name]
    logits = torch.randn(n, 4, generator=gen).round(decimals=1)  # ties
    split = torch.randint(0, 3, (n,), generator=gen)
    masks = [split == i for i in range(3)]
    task = MedianError() if name == "median" else build(name)
    targets = task.targets(y)
    task.setup(targets[masks[0]], 4, lambda t: t)
    return task, logits, targets, masks


def _rank_cut(rank, world, name):
    """This rank's metrics of ``cut_case(name)``, holding rows cut at random (rank 1 of 3: none),
    added in two batches."""
    from gnnmesh.comm import Comm
    comm = Comm()
    task, logits, targets, masks = cut_case(name)
    cut = torch.randperm(len(logits), generator=torch.Generator().manual_seed(5))
    ids = [cut[:17], cut[17:17], cut[17:]][rank] if world == 3 else cut[rank::world]
    evaluation = Evaluation(task)
    for batch in (ids[:7], ids[7:]):
        evaluation.add(logits[batch], targets[batch], [m[batch] for m in masks], batch)
    return evaluation.result(comm.all_reduce, [float(m.sum()) for m in masks], comm)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", ["classification", "multilabel", "regression", "median"])
def test_metrics_over_any_cut_of_the_rows_on_real_ranks_equal_the_whole(name):
    """What two or three ranks (some in batches, one without rows) add up, sort (ROC-AUC) or
    gather (a task's own ``gathered``) equals one pass over every row: every metric."""
    from tests.dist import run_ranks
    task, logits, targets, masks = cut_case(name)
    whole = Evaluation(task)
    whole.add(logits, targets, masks, torch.arange(len(logits)))
    want = whole.result(lambda t: t, [float(m.sum()) for m in masks])
    if name == "multilabel":
        assert want[1]["roc_auc"] == pytest.approx(np.nanmean(
            [pairwise_auc(logits[masks[1], j].numpy(), targets[masks[1], j].numpy()) for j in range(4)]), abs=1e-12)
    for world in (2, 3):
        for got in run_ranks(_rank_cut, world, name, timeout=100):
            for g, w in zip(got, want):
                assert g.keys() == w.keys() and set(task.metrics) <= set(g)
                for key in w:
                    assert g[key] == pytest.approx(w[key], rel=1e-12, abs=1e-12), (world, key)


def test_an_evaluation_holds_no_table_of_every_node():
    """An evaluation is told no node count: what it keeps is its rows' (a multilabel task's scores
    and labels of the rows added, a task of one's own with ``gathers`` their outputs)."""
    task, logits, targets, masks = cut_case("multilabel")
    evaluation = Evaluation(task)
    evaluation.add(logits[:10], targets[:10], [m[:10] for m in masks], torch.arange(10) * 10**12)
    held = sum(t.numel() for split in evaluation.scored for pair in split for t in pair)
    assert held == 2 * 10 * 4 and evaluation.rows is None
    assert math.isfinite(evaluation.result(lambda t: t, [float(m[:10].sum()) for m in masks])[0]["micro_f1"])


def test_labels_infer_a_task():
    assert infer(torch.tensor([0, 2, 1]))[0] == "classification"
    assert infer(torch.tensor([[0.0, 1.0], [1.0, float("nan")]]))[0] == "multilabel"
    assert infer(torch.tensor([[0, 1], [1, 1]]))[0] == "multilabel"
    assert infer(torch.tensor([0.5, 1.0]))[0] == "regression"
    assert infer(torch.tensor([[0.0, 2.0]]))[0] == "regression"


def test_labels_that_do_not_fit_are_one_line():
    masks = {"train_mask": torch.tensor([True, True, False]), "val_mask": None, "test_mask": None}
    y = torch.tensor([[0.0, 1.0], [float("nan"), 1.0], [float("nan"), 0.0]])
    with pytest.raises(GraphError, match=r"field 'y' has a non-finite value nan at node 1, target 0, a row of "
                                         r"'train_mask'"):
        check_vertex_data("g: ", 3, None, y, 2, masks)
    check_vertex_data("g: ", 3, None, y[[0, 0, 2]], 2, masks)  # NaN outside every split: no target
    with pytest.raises(GraphError, match=r"field 'y' has 2 targets per node, but num_classes .* is 3"):
        check_vertex_data("g: ", 3, None, y[[0, 0, 2]], 3, masks)
    with pytest.raises(ConfigError, match=r"field 'y' has value 2.0 at node 1, target 0: multilabel targets"):
        build("multilabel").check_labels(torch.tensor([[0.0], [2.0]]), [None] * 3, "")
    with pytest.raises(ConfigError, match=r"classification needs one integer class id per node, got floats"):
        build("classification").check_labels(torch.zeros(3, 2), [None] * 3, "")
    with pytest.raises(ConfigError, match=r"'class_weights': weights classes, for the classification task; "
                                          r"this run's task is multilabel"):
        Config.of(task="multilabel", class_weights="balanced")
    with pytest.raises(ConfigError, match=r"'regression_loss': applies to the regression task"):
        Config.of(task="classification", regression_loss="mae")
    with pytest.raises(ConfigError, match=r"'class_weights': '1,-2': weights must be finite, >= 0"):
        Config.of(class_weights="1,-2")


def test_a_task_of_ones_own_trains_with_its_metrics():
    """``custom``: a Huber loss, and an error-below-0.5 rate and a (negated) mean error as
    metrics: the trainer reduces the sums the functions give and selects on the named one."""
    from gnnmesh.train import Trainer
    graph = random_graph(n=40, e=160, seed=4)
    graph = graph.replace(y=torch.randn(40, generator=torch.Generator().manual_seed(4)))
    task = custom(loss=lambda logits, t: F.huber_loss(logits[:, 0], t, reduction="sum"),
                  metrics=lambda logits, t: {"close": ((logits[:, 0] - t).abs() < 0.5).sum(),
                                             "error": (logits[:, 0] - t).abs().sum()},
                  finish=lambda sums, rows: {"close_rate": sums["close"] / max(rows, 1.0),
                                             "neg_mae": -sums["error"] / max(rows, 1.0)},
                  metric="neg_mae", name="huber")
    trainer = Trainer(Config.of(epochs=3, seed=1, dropout=0.0), graph, task=task)
    assert trainer.config.training.task is None  # a task of one's own is not a setting
    summary = trainer.fit()
    out = trainer.model.eval()(trainer.rank_data.view, trainer.rank_data.x)[:, 0].detach()
    m = graph.val_mask
    assert trainer.metrics[1]["neg_mae"] == pytest.approx(-float((out[m] - graph.y[m]).abs().mean()), rel=1e-6)
    assert summary.metric == "neg_mae" and summary.history[-1].extra["val_close_rate"] == trainer.metrics[1]["close_rate"]
    assert math.isfinite(summary.val_acc)
    with pytest.raises(ConfigError, match="a huber model predicts no probabilities"):
        trainer.predict("probs")


def test_task_is_recorded_and_refuses_what_does_not_apply(tmp_path):
    assert tasks.names() == ("classification", "multilabel", "regression", "link")
    toml = Config.of(task="regression", regression_loss="mae").to_toml()
    assert 'task = "regression"' in toml and 'regression_loss = "mae"' in toml


def test_a_registered_task_is_built_by_name_and_refuses_the_others_settings():
    spec = tasks.register(tasks.TaskSpec("scores", tasks.Regression, flat_target=True, summary="test task"))
    try:
        assert isinstance(tasks.build("scores"), tasks.Regression) and "scores" in tasks.names()
        with pytest.raises(ConfigError, match="'class_weights': weights classes, for the classification task; "
                                              "this run's task is scores"):
            tasks.build("scores", class_weights="balanced")
    finally:
        tasks.REGISTRY.pop(spec.name)
