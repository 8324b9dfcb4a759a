"""The training loop's settings: the optimizer, the learning-rate schedule with warm-up, early
stopping, gradient clipping and per-epoch callbacks; each on one process here, and under
partition x3 against the single process (slow), stopped and resumed exactly."""

import json
import math

import pytest
import torch

from gnnmesh import ConfigError
from gnnmesh.config import Config
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.helpers import random_graph

LR = 0.01
# the request's combination: every feature at once
LOOP = dict(optimizer="adamw", lr_schedule="cosine", warmup_epochs=5, patience=20, clip_grad_norm=1.0)


def make_graph():
    return random_graph(n=60, e=300, features=10, classes=3)


@pytest.fixture(scope="module")
def graph():
    return make_graph()


def params(trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def rates(summary) -> list:
    return [r.extra["lr"] for r in summary.history]


class StopAt:
    """A callback that stops the run after ``epoch`` (an interruption, to resume from)."""

    def __init__(self, epoch: int):
        self.epoch, self.seen = epoch, []

    def __call__(self, record):
        self.seen.append(record.epoch)
        return record.epoch >= self.epoch


# -- optimizers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name,kind", [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW),
                                       ("sgd", torch.optim.SGD)])
def test_the_optimizer_is_torchs_with_the_runs_settings(graph, name, kind):
    trainer = Trainer(Config.of(epochs=1, optimizer=name, lr=0.03, weight_decay=0.001), graph)
    assert type(trainer.optimizer) is kind
    group = trainer.optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"]) == (0.03, 0.001)


def test_sgd_takes_momentum_and_nesterov_and_they_change_the_run(graph):
    plain = Trainer(Config.of(epochs=4, optimizer="sgd"), graph)
    nesterov = Trainer(Config.of(epochs=4, optimizer="sgd", momentum=0.9, nesterov=True), graph)
    group = nesterov.optimizer.param_groups[0]
    assert group["momentum"] == 0.9 and group["nesterov"] is True
    assert [r.loss for r in plain.fit().history] != [r.loss for r in nesterov.fit().history]


@pytest.mark.parametrize("settings,message", [
    (dict(momentum=0.9), "'momentum' applies to optimizer sgd, not adam"),
    (dict(optimizer="sgd", nesterov=True), "'nesterov' needs 'momentum' above 0"),
    (dict(lr_schedule="step"), "step needs 'step_size'"),
    (dict(gamma=0.5), "'gamma' applies to lr_schedule step or plateau, not constant"),
    (dict(lr_schedule="cosine", lr_patience=2), "'lr_patience' applies to lr_schedule plateau, not cosine"),
    (dict(epochs=5, warmup_epochs=5), "'warmup_epochs': 5 leaves none of the 5 epochs"),
    (dict(clip_grad_norm=0.0), "'clip_grad_norm': must be > 0"),
    (dict(optimizer="lamb"), "'optimizer': 'lamb' is not one of adam, adamw, sgd"),
])
def test_a_setting_for_another_optimizer_or_schedule_is_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        Config.of(**settings)


def test_the_loop_settings_show_in_the_printed_config():
    toml = Config.of(**LOOP).resolved().to_toml()
    for line in ('optimizer = "adamw"', 'lr_schedule = "cosine"', "warmup_epochs = 5", "patience = 20",
                 "clip_grad_norm = 1.0", "# momentum = (unset)"):
        assert line in toml
    assert Config.of(**LOOP).training.optimizer == "adamw"


# -- learning-rate schedules --------------------------------------------------------------------

def test_warmup_then_cosine_rates(graph):
    summary = Trainer(Config.of(epochs=10, lr=LR, lr_schedule="cosine", warmup_epochs=3), graph).fit()
    want = [LR * e / 4 for e in (1, 2, 3)] + [LR * (1 + math.cos(math.pi * t / 7)) / 2 for t in range(7)]
    assert rates(summary) == pytest.approx(want, rel=1e-9)


def test_step_rates(graph):
    summary = Trainer(Config.of(epochs=7, lr=LR, lr_schedule="step", step_size=2, gamma=0.5), graph).fit()
    assert rates(summary) == pytest.approx([LR * 0.5 ** ((e - 1) // 2) for e in range(1, 8)], rel=1e-9)


def test_plateau_decays_on_the_validation_selection_metric(graph):
    summary = Trainer(Config.of(epochs=12, lr=LR, lr_schedule="plateau", gamma=0.5, lr_patience=1), graph).fit()
    rate, best, bad, want = LR, -math.inf, 0, []  # torch's rule: better by a relative 1e-4, else a bad epoch
    for record in summary.history:
        want.append(rate)
        if record.val_acc > best * (1 + 1e-4):
            best, bad = record.val_acc, 0
        else:
            bad += 1
        if bad > 1:
            rate, bad = rate * 0.5, 0
    assert rates(summary) == pytest.approx(want, rel=1e-9)
    assert min(want) < LR  # the run had plateaus to decay on


# -- early stopping, callbacks ------------------------------------------------------------------

def test_patience_stops_keeps_the_best_parameters_and_says_so(graph, tmp_path):
    ckpt, metrics = str(tmp_path / "c.pt"), tmp_path / "m.jsonl"
    config = Config.of(epochs=200, patience=3, lr=0.05, checkpoint=ckpt, metrics=str(metrics))
    trainer = Trainer(config, graph)
    summary = trainer.fit()
    assert summary.epochs < 200 and summary.epochs - summary.best_epoch == 3
    assert "--patience 3" in summary.stopped
    best = trainer.best["state"]
    assert all(torch.equal(value, best[name]) for name, value in trainer.model.state_dict().items())
    last = json.loads(metrics.read_text().splitlines()[-1])
    assert last["epoch"] == summary.epochs and last["parameters"] == "best" and "--patience 3" in last["stopped"]
    resumed = Trainer(config.updated(resume=True), graph).fit()  # a stopped run stays stopped
    assert resumed.epochs == summary.epochs and resumed.stopped == summary.stopped


def test_a_callback_sees_every_epoch_and_may_stop_the_run(graph):
    stop = StopAt(3)

    def reason(record):
        return "enough" if record.epoch == 5 else None

    summary = Trainer(Config.of(epochs=10), graph).fit(callbacks=[stop])
    assert stop.seen == [1, 2, 3] and summary.epochs == 3 and summary.stopped == "StopAt stopped the run"
    assert Trainer(Config.of(epochs=10), graph).fit(callbacks=[reason]).stopped == "enough"
    assert Trainer(Config.of(epochs=4), graph).fit(callbacks=[lambda r: None]).stopped is None


# -- gradient clipping --------------------------------------------------------------------------

def test_clipping_scales_the_gradient_to_the_norm_and_records_the_norm_before(graph):
    limit = 1e-3
    trainer = Trainer(Config.of(epochs=1, optimizer="sgd", clip_grad_norm=limit), graph)
    record = trainer.fit().history[0]
    clipped = torch.cat([p.grad.flatten() for p in trainer.model.parameters()]).norm()
    assert float(clipped) == pytest.approx(limit, rel=1e-5) and record.extra["grad_norm"] > limit
    loose = Trainer(Config.of(epochs=1, optimizer="sgd", clip_grad_norm=1e9), graph)
    norm = loose.fit().history[0].extra["grad_norm"]
    assert norm == record.extra["grad_norm"]  # the same first gradient, left as it is
    assert float(torch.cat([p.grad.flatten() for p in loose.model.parameters()]).norm()) == pytest.approx(norm)
    assert not torch.equal(params(trainer), params(loose))


# -- resuming -----------------------------------------------------------------------------------

def interrupted_and_resumed(config: Config, graph, path: str, at: int):
    Trainer(config.updated(checkpoint=path), graph).fit(callbacks=[StopAt(at)])
    resumed = Trainer(config.updated(checkpoint=path, resume=True), graph)
    return resumed, resumed.fit()


def test_a_run_stopped_and_resumed_equals_the_uninterrupted_run(graph, tmp_path):
    config = Config.of(epochs=16, seed=1, **LOOP)
    full = Trainer(config, graph)
    want = full.fit()
    resumed, got = interrupted_and_resumed(config, graph, str(tmp_path / "c.pt"), at=7)
    assert [r.loss for r in got.history] == [r.loss for r in want.history]
    assert rates(got) == rates(want) and got.stopped == want.stopped
    assert torch.equal(params(resumed), params(full))


def test_a_cosine_run_resumes_only_over_its_own_epochs(graph, tmp_path):
    path = str(tmp_path / "c.pt")
    Trainer(Config.of(epochs=10, lr_schedule="cosine", checkpoint=path), graph).fit(callbacks=[StopAt(4)])
    with pytest.raises(ConfigError, match=r"c.pt: the cosine schedule spans the run's epochs: the checkpoint's "
                                          r"run has 10 \(--epochs 10\)"):
        Trainer(Config.of(epochs=12, lr_schedule="cosine", checkpoint=path, resume=True), graph).fit()
    with pytest.raises(ConfigError, match="different settings: lr_schedule"):
        Trainer(Config.of(epochs=10, lr_schedule="constant", checkpoint=path, resume=True), graph).fit()


# -- several ranks ------------------------------------------------------------------------------

PARTITION = dict(strategy="partition", partitioner="rp")


def _rank_run(rank, world, settings, path, stop_at):
    config = Config.of(epochs=30, seed=1, **LOOP, **settings)
    if path:
        config = config.updated(checkpoint=path)
        if stop_at is None:
            config = config.updated(resume=True)
    summary = Trainer(config, make_graph()).fit(callbacks=[StopAt(stop_at)] if stop_at else [])
    return [(r.loss, r.extra["lr"], r.extra["grad_norm"]) for r in summary.history], summary.stopped


def assert_same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for epoch, (a, b) in enumerate(zip(got, want), 1):
        assert a == pytest.approx(b, rel=1e-5), f"epoch {epoch}: (loss, lr, grad norm) {a} vs {b}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_loop_under_partition_x3_equals_the_single_process_and_resumes(tmp_path):
    """Losses, rates and gradient norms (the single process's, not a rank's share) equal the
    single process's; a run of 3 ranks stopped and resumed equals it too."""
    want, stopped = _rank_run(0, 1, {}, None, None)
    got = run_ranks(_rank_run, 3, PARTITION, None, None, timeout=120)
    for records, reason in got:
        assert_same(records, want)
        assert reason == stopped
    path = str(tmp_path / "c.pt")
    run_ranks(_rank_run, 3, PARTITION, path, 12, timeout=120)
    resumed = run_ranks(_rank_run, 3, PARTITION, path, None, timeout=120)[0][0]
    assert_same(resumed, want)


class StopOnRank:
    """A callback that stops the run after ``epoch`` on rank ``rank`` alone."""

    def __init__(self, rank: int, epoch: int):
        from gnnmesh import comm
        self.mine = comm.setup_comm().rank == rank
        self.epoch = epoch

    def __call__(self, record):
        return "rank's own reason" if self.mine and record.epoch >= self.epoch else None


def _rank_stop(rank, world):
    summary = Trainer(Config.of(epochs=6, **PARTITION), make_graph()).fit(callbacks=[StopOnRank(1, 2)])
    return summary.epochs, summary.stopped


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_one_ranks_callback_stops_every_rank():
    assert run_ranks(_rank_stop, 2, timeout=100) == [(2, "rank's own reason")] * 2
