import json

import pytest
import torch

from gnnmesh import ConfigError, TrainingDiverged
from gnnmesh.config import Config
from gnnmesh.train import Trainer

from tests.helpers import model_fields, random_graph


@pytest.fixture(scope="module")
def graph():
    return random_graph(n=60, e=300, features=10, classes=3)


def params(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_runs_are_deterministic(graph, model):
    cfg = Config.of(model=model, epochs=8, seed=3)
    a, b = Trainer(cfg, graph), Trainer(cfg, graph)
    la, lb = [r.loss for r in a.fit().history], [r.loss for r in b.fit().history]
    assert la == lb
    assert torch.equal(params(a), params(b))
    other = Trainer(cfg.updated(seed=4), graph)
    assert [r.loss for r in other.fit().history] != la


def test_loss_decreases_and_metrics_are_complete(graph):
    summary = Trainer(Config.of(epochs=30, dropout=0.0), graph).fit()
    h = summary.history
    assert h[-1].loss < h[0].loss
    for r in h:
        assert 0 <= r.train_acc <= 1 and 0 <= r.val_acc <= 1
        assert r.aggregate_time > 0 and r.dense_time > 0 and r.other_time >= 0
    best = max(h, key=lambda r: r.val_acc)
    assert summary.val_acc == best.val_acc and summary.test_acc == best.test_acc
    assert summary.best_epoch == min(r.epoch for r in h if r.val_acc == best.val_acc)


def test_epoch_time_parts_measure_their_own_work(graph, monkeypatch):
    """Known delays planted in the aggregation kernel, in the dense loss and outside the
    compute (model selection) each show up in their own part of the epoch, and only there."""
    import importlib
    import time
    spmm_module = importlib.import_module("gnnmesh.ops.spmm")  # the module, not its function
    from gnnmesh.train import trainer as trainer_module
    agg, dense, other, slack = 0.1, 0.4, 0.4, 0.3  # seconds; slack: the real work, on a loaded machine
    calls = {"aggregate": 0}
    multiply, cross_entropy, select = (spmm_module.multiply, trainer_module.F.cross_entropy,
                                       trainer_module.Trainer._select)

    def slow_multiply(*args, **kwargs):
        calls["aggregate"] += 1
        time.sleep(agg)
        return multiply(*args, **kwargs)

    def slow(fn, seconds):
        def wrapped(*args, **kwargs):
            time.sleep(seconds)
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(spmm_module, "multiply", slow_multiply)
    monkeypatch.setattr(trainer_module.F, "cross_entropy", slow(cross_entropy, dense))
    monkeypatch.setattr(trainer_module.Trainer, "_select", slow(select, other))
    per_epoch = []

    def count(result):
        per_epoch.append(calls["aggregate"])
        calls["aggregate"] = 0

    history = Trainer(Config.of(epochs=2, dropout=0.0), graph).fit(count).history
    for r, n in zip(history, per_epoch):
        assert n >= 4  # two layers forward in training and evaluation, and backward
        assert n * agg <= r.aggregate_time < n * agg + slack, (n, r)
        assert dense <= r.dense_time < dense + slack, r
        assert other <= r.other_time < other + slack, r
        assert r.epoch_time >= n * agg + dense + other


@pytest.mark.parametrize("name", ["gcn", "gat", "decoupled-gcn"])
def test_resume_matches_uninterrupted_run(graph, tmp_path, name):
    model = model_fields(name)
    full = Trainer(Config.of(**model, epochs=12, seed=1), graph)
    full.fit()
    ckpt = str(tmp_path / "run.pt")
    metrics = tmp_path / "m.jsonl"
    first = Trainer(Config.of(**model, epochs=7, seed=1, checkpoint=ckpt, checkpoint_every=5,
                           metrics=str(metrics)), graph)
    first.fit()  # writes epochs 1..7 to the metrics file; the checkpoint holds epoch 7
    resumed = Trainer(Config.of(**model, epochs=12, seed=1, checkpoint=ckpt, resume=True,
                             metrics=str(metrics)), graph)
    summary = resumed.fit()
    assert [r.loss for r in summary.history] == [r.loss for r in full.history]
    assert torch.equal(params(resumed), params(full))
    epochs = [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()]
    assert epochs == list(range(1, 13))


def test_resume_after_crash_drops_metrics_past_checkpoint(graph, tmp_path):
    ckpt, metrics = str(tmp_path / "c.pt"), tmp_path / "m.jsonl"
    cfg = Config.of(epochs=6, checkpoint=ckpt, checkpoint_every=4, metrics=str(metrics))
    trainer = Trainer(cfg, graph)

    def crash(result):
        if result.epoch == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer.fit(crash)
    assert len(metrics.read_text().splitlines()) == 6
    Trainer(cfg.updated(epochs=8, resume=True), graph).fit()
    epochs = [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()]
    assert epochs == list(range(1, 9))


def test_resume_refuses_other_settings(graph, tmp_path):
    ckpt = str(tmp_path / "c.pt")
    Trainer(Config.of(epochs=2, checkpoint=ckpt), graph).fit()
    with pytest.raises(ConfigError, match="lr"):
        Trainer(Config.of(epochs=4, checkpoint=ckpt, resume=True, lr=0.1), graph).fit()
    with pytest.raises(ConfigError, match="no checkpoint"):
        Trainer(Config.of(epochs=4, checkpoint=str(tmp_path / "none.pt"), resume=True), graph).fit()
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="unreadable"):
        Trainer(Config.of(epochs=4, checkpoint=str(tmp_path / "bad.pt"), resume=True), graph).fit()


def test_resume_with_other_model_args_is_one_line_naming_both(graph, tmp_path):
    """A user's model resumed with other --model-args is refused before its weights are
    loaded (they would not fit), naming the values; the same arguments spelled otherwise resume."""
    from pathlib import Path
    model = f"{Path(__file__).resolve().parents[2] / 'examples' / 'graphconv.py'}:GraphConv"
    ckpt = str(tmp_path / "c.pt")
    Trainer(Config.of(model=model, model_args="hidden=8", epochs=1, checkpoint=ckpt), graph).fit()
    with pytest.raises(ConfigError, match=r"^[^\n]*c.pt: checkpoint was written with different settings: "
                                          r"model_args \('hidden=8' in the checkpoint, 'hidden=16' now\)$"):
        Trainer(Config.of(model=model, model_args="hidden=16", epochs=2, checkpoint=ckpt, resume=True), graph).fit()
    resumed = Trainer(Config.of(model=model, model_args="hidden = 8", epochs=2, checkpoint=ckpt, resume=True), graph)
    assert resumed.fit().epochs == 2


def test_checkpoint_write_is_atomic(graph, tmp_path, monkeypatch):
    ckpt = tmp_path / "c.pt"
    Trainer(Config.of(epochs=2, checkpoint=str(ckpt)), graph).fit()
    before = ckpt.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        Trainer(Config.of(epochs=2, checkpoint=str(ckpt)), graph).fit()
    assert ckpt.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary left behind


def test_graph_without_labels_or_split_is_refused(graph):
    with pytest.raises(ConfigError, match="no labels"):
        Trainer(Config(), graph.replace(y=None))
    with pytest.raises(ConfigError, match="split"):
        Trainer(Config(), graph.replace(val_mask=None))


def test_structural_features_when_graph_has_none(graph):
    summary = Trainer(Config.of(epochs=3), graph.replace(x=None)).fit()
    assert len(summary.history) == 3


def test_diverging_run_stops_naming_the_epoch_and_keeps_the_last_checkpoint(graph, tmp_path):
    ckpt, metrics = tmp_path / "c.pt", tmp_path / "m.jsonl"
    trainer = Trainer(Config.of(epochs=10, lr=1e20, dropout=0.0, checkpoint=str(ckpt), checkpoint_every=1,
                             metrics=str(metrics)), graph)
    with pytest.raises(TrainingDiverged, match=r"^epoch 2: training diverged \(loss nan") as info:
        trainer.fit()
    assert isinstance(info.value, ConfigError) and "\n" not in str(info.value)
    state = torch.load(ckpt, weights_only=True)
    assert state["epoch"] == 1 and all(torch.isfinite(t).all() for t in state["model"].values())
    assert [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()] == [1]
    assert trainer.epoch == 2 and len(trainer.history) == 1


def test_non_finite_gradient_stops_before_the_update(graph):
    trainer = Trainer(Config.of(epochs=5), graph)
    trainer.run_epoch()
    before = params(trainer).clone()
    weight = next(p for p in trainer.model.parameters() if p.dim() == 2)
    weight.register_hook(lambda grad: grad * float("nan"))  # the loss stays finite
    with pytest.raises(TrainingDiverged, match=r"^epoch 2: training diverged \(loss \d\S*, a gradient not finite\)"):
        trainer.fit()
    assert torch.equal(params(trainer), before)  # the update was not applied


def in_elastic_job(monkeypatch, job: str, restart: int, cause=None):
    """This process as rank 0 of a one-rank elastic job ``job``, in run ``restart`` of it."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", job)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(restart))
    if cause:
        monkeypatch.setenv("GNNMESH_RESTART_CAUSE", cause)


def test_a_restart_of_the_job_resumes_from_its_checkpoint(graph, tmp_path, monkeypatch):
    """The restart of an elastic job (torch's restart count above 0) resumes from the
    checkpoint the job wrote, with no --resume, and ends as an uninterrupted run; the restart
    is one record in the metrics file, between the checkpoint's epoch and the next."""
    ckpt, metrics = str(tmp_path / "c.pt"), tmp_path / "m.jsonl"
    cfg = Config.of(epochs=10, seed=2, checkpoint=ckpt, checkpoint_every=3, metrics=str(metrics))
    full = Trainer(cfg.updated(checkpoint=str(tmp_path / "full.pt"), metrics=None), graph)
    full.fit()
    in_elastic_job(monkeypatch, "job-a", 0)
    Trainer(cfg.updated(epochs=7), graph).fit()  # the first run: a checkpoint at epoch 6, then epoch 7
    in_elastic_job(monkeypatch, "job-a", 1, "rank 1 died of SIGKILL")
    seen = []
    restarted = Trainer(cfg, graph)
    restarted.fit(on_restart=seen.append)
    assert torch.equal(params(restarted), params(full))
    assert [r.loss for r in restarted.history] == [r.loss for r in full.history]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    record = {"restart": 1, "epoch": 7, "ranks": 1, "failed": "rank 1 died of SIGKILL", "checkpoint": ckpt}
    assert seen == [record]
    assert [r.get("epoch") for r in records] == [1, 2, 3, 4, 5, 6, 7, 7, 8, 9, 10] and records[7] == record


def test_a_first_run_or_another_jobs_checkpoint_does_not_resume(graph, tmp_path, monkeypatch):
    """A checkpoint at the path is resumed only by a restart of the job that wrote it: a fresh
    run of the same command (restart count 0) trains from the start, and so does the restart
    of another job (which died before it wrote a checkpoint of its own)."""
    ckpt = str(tmp_path / "c.pt")
    cfg = Config.of(epochs=4, seed=2, checkpoint=ckpt, checkpoint_every=2)
    in_elastic_job(monkeypatch, "job-a", 0)
    Trainer(cfg, graph).fit()
    fresh = Trainer(cfg, graph)
    assert fresh.fit().history[0].epoch == 1 and fresh._restart() is None
    in_elastic_job(monkeypatch, "job-b", 1)
    other = Trainer(cfg, graph)
    seen = []
    assert other.fit(on_restart=seen.append).history[0].epoch == 1
    assert seen == [{"restart": 1, "epoch": 0, "ranks": 1, "failed": None, "checkpoint": None}]
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")  # a single process writes no job: nothing resumes it
    monkeypatch.delenv("RANK")
    Trainer(cfg, graph).fit()
    in_elastic_job(monkeypatch, "", 1)
    assert Trainer(cfg, graph).fit().history[0].epoch == 1


@pytest.mark.parametrize("model", ["gcn", "gat", "user"])
def test_a_checkpoint_recording_every_model_option_loads_and_resumes(graph, tmp_path, model):
    """Checkpoints written before options became the model's own record every one, at its
    default (heads 8 for a gcn): they load, predict and resume as they did."""
    import gnnmesh
    from examples.graphconv import GraphConv
    path = tmp_path / "c.pt"
    given = {"model": GraphConv(10, 3)} if model == "user" else {}
    config = Config.of(epochs=2, checkpoint=str(path), **({} if model == "user" else {"model": model}))
    Trainer(config, graph, **given).fit()
    state = torch.load(path, weights_only=True)
    state["config"].update(heads=8, attn_dropout=0.6, k=10, alpha=0.1)
    torch.save(state, path)
    loaded, _ = gnnmesh.load(path, model=GraphConv if model == "user" else None)
    resumed = Trainer(config.updated(epochs=3, resume=True), graph, **given)
    resumed.fit()
    assert resumed.epoch == 3


@pytest.mark.parametrize("task,trains_it", [(None, "gnnmesh.train.minibatch.MiniBatchTrainer"),
                                            ("link", "gnnmesh.link.minibatch.LinkMiniBatchTrainer")])
def test_the_full_graph_trainer_refuses_a_mini_batch_config_naming_the_class_that_trains_it(graph, task, trains_it):
    from gnnmesh.link.trainer import LinkTrainer
    cls = LinkTrainer if task else Trainer
    with pytest.raises(ConfigError, match=f"^config field 'minibatch': {cls.__name__} trains the whole graph; "
                                          f"mini-batches train with {trains_it.replace('.', '[.]')} ") as caught:
        cls(Config.of(epochs=1, minibatch=True, task=task), graph)
    assert "\n" not in str(caught.value)


def test_train_picks_the_mini_batch_trainer_under_minibatch(graph):
    from gnnmesh.train import train
    from gnnmesh.train.minibatch import MiniBatchTrainer
    settings = dict(epochs=2, seed=1, minibatch=True, batch_size=16, fanouts="3,3")
    want = [r.loss for r in MiniBatchTrainer(Config.of(**settings), graph).fit().history]
    history = train(Config.of(**settings), graph).history
    assert [r.loss for r in history] == want and "steps" in history[0].extra   # a mini-batch epoch's record
