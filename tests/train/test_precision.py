"""``--precision bf16-mixed``: the setting, what it changes (and what it leaves float32), the
checkpoint and prediction that keep it, and the multi-rank runs that equal the single process
under it to the tolerance the training guide states (real gloo ranks)."""

import pytest
import torch

from gnnmesh import ConfigError
from gnnmesh.config import Config
from gnnmesh.train import Trainer

from tests.dist import run_ranks_once
from tests.helpers import gnnmesh_in_process, random_graph
from tests.parity import assert_same_run, train

BF16 = "bf16-mixed"
# What the training guide states: under bf16-mixed, each epoch's loss on P ranks is within
# this relative tolerance of the single process's under the same precision.
TOLERANCE = 1e-2
EPOCHS = 5


def make_graph():
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)


def config(model="gcn", precision="32", **extra):
    return Config.of(**{**dict(model=model, precision=precision, epochs=EPOCHS, seed=1, hidden=8), **extra})


@pytest.fixture(scope="module")
def graph():
    return make_graph()


# -- the setting ------------------------------------------------------------------------------

def test_the_setting_is_a_training_field_with_a_default_of_32():
    assert Config().training.precision == "32"
    assert Config.of(precision=BF16).training.precision == BF16
    assert 'precision = "bf16-mixed"' in Config.of(precision=BF16).resolved().to_toml()
    with pytest.raises(ConfigError, match="'precision': 'bf16' is not one of 32, bf16-mixed"):
        Config.of(precision="bf16")


def test_the_flag_is_refused_in_one_line_for_a_value_it_does_not_take():
    result = gnnmesh_in_process("train", "--precision", "fp8", "--print-config")
    assert result.returncode == 2
    assert "fp8" in result.stderr
    printed = gnnmesh_in_process("train", "--precision", BF16, "--print-config")
    assert printed.returncode == 0 and 'precision = "bf16-mixed"' in printed.stdout


# -- what it changes ------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["gcn", "sage", "gin", "gat"])
def test_bf16_mixed_changes_the_numbers_but_not_the_parameters_dtype(graph, model):
    wide, narrow = train(graph, config(model)), train(graph, config(model, BF16))
    assert wide["losses"] != narrow["losses"]  # not silently a no-op
    # the same run, rounded: bfloat16 keeps about 3 significant digits
    assert wide["losses"] == pytest.approx(narrow["losses"], rel=5e-2)
    assert all(p.dtype == torch.float32 for p in narrow["params"].values())


def test_the_optimizer_state_and_the_loss_stay_float32(graph):
    trainer = Trainer(config(precision=BF16), graph)
    task_loss, seen = trainer.task.loss, []

    def loss(logits, targets):
        value = task_loss(logits, targets)
        seen.append((logits.dtype, value.dtype))
        return value

    trainer.task.loss = loss
    trainer.fit()
    assert seen and set(seen) == {(torch.float32, torch.float32)}
    states = [s for s in trainer.optimizer.state.values()]
    assert states and all(t.dtype == torch.float32 for s in states for k, t in s.items() if k != "step")


def test_evaluation_and_prediction_run_in_the_trained_precision(graph, tmp_path):
    path = str(tmp_path / "c.pt")
    trainer = Trainer(config(precision=BF16, checkpoint=path), graph)
    trainer.fit()
    _, logits = trainer.predict(nodes="all")
    assert logits.dtype == "float32"
    loaded = Trainer.from_checkpoint(path, graph, weights="last")
    assert loaded.config.training.precision == BF16  # recorded in the checkpoint, not given again
    _, again = loaded.predict(nodes="all")
    assert (again == logits).all()
    wide = Trainer.from_checkpoint(path, graph, weights="last")
    wide.config = wide.config.updated(precision="32").resolved()
    _, in_float32 = wide.predict(nodes="all")
    assert not (in_float32 == logits).all()


def test_predicted_labels_stay_integers_and_probabilities_float32(graph):
    trainer = Trainer(config(precision=BF16), graph)
    trainer.fit()
    _, labels = trainer.predict("labels")
    _, probs = trainer.predict("probs")
    assert labels.dtype.kind == "i" and probs.dtype == "float32"


def test_minibatch_training_runs_in_the_precision_too(graph):
    settings = dict(minibatch=True, batch_size=8, fanouts="3,3")
    wide, narrow = train(graph, config(**settings)), train(graph, config(precision=BF16, **settings))
    assert wide["losses"] != narrow["losses"]
    assert wide["losses"] == pytest.approx(narrow["losses"], rel=5e-2)


def test_a_device_without_bfloat16_is_refused_in_one_line(monkeypatch):
    from gnnmesh.train import precision
    precision.check_device("32", torch.device("meta"))  # float32 runs anywhere
    with pytest.raises(ConfigError, match="'precision': bf16-mixed runs on cpu or cuda, not meta"):
        precision.check_device(BF16, torch.device("meta"))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "an old GPU")
    with pytest.raises(ConfigError, match=r"^config field 'precision': bf16-mixed needs a GPU with bfloat16 "
                                          r"support \(an old GPU has none\); use --precision 32$"):
        precision.check_device(BF16, torch.device("cuda", 0))


def test_a_resume_under_another_precision_is_refused_in_one_line(graph, tmp_path):
    path = str(tmp_path / "c.pt")
    Trainer(config(precision=BF16, checkpoint=path), graph).fit()
    with pytest.raises(ConfigError, match=r"^[^\n]*c.pt: checkpoint was written with different settings: "
                                          r"precision \('bf16-mixed' in the checkpoint, '32' now\)$"):
        Trainer(config(checkpoint=path, resume=True, epochs=EPOCHS + 1), graph).fit()


def test_an_old_checkpoint_without_the_setting_resumes_as_32(graph, tmp_path):
    path = str(tmp_path / "c.pt")
    trainer = Trainer(config(checkpoint=path), graph)
    trainer.fit()
    state = torch.load(path, weights_only=False)
    state["config"].pop("precision")
    Trainer(config(), graph).restore(state)  # no error: written with the default


# -- several ranks --------------------------------------------------------------------------------

MODELS = ("gcn", "gat")


def _rank_runs(rank, world, strategy, models):
    graph = make_graph()
    return {(model, precision): train(graph, config(model, precision, strategy=strategy))
            for model in models for precision in ("32", BF16)}


@pytest.fixture(scope="module")
def reference(graph):
    return {(model, precision): train(graph, config(model, precision)) for model in MODELS for precision in ("32", BF16)}


def assert_within(got, want, tolerance):
    losses, ref = torch.tensor(got["losses"]), torch.tensor(want["losses"])
    worst = float(((losses - ref).abs() / ref.abs()).max())
    assert worst <= tolerance, f"losses differ by {worst:.3g} relative:\n{losses}\n{ref}"


@pytest.mark.timeout(300)
# about 10 s each on an idle machine; three ranks run with the slow tests
@pytest.mark.parametrize("strategy,world", [pytest.param("partition", 3, marks=pytest.mark.slow), ("tensor", 2)])
def test_several_ranks_equal_the_single_process_under_each_precision(reference, strategy, world):
    runs = run_ranks_once(_rank_runs, world, strategy, MODELS, timeout=240)
    for rank, got in enumerate(runs):
        for model in MODELS:
            where = f"{strategy} x{world}, rank {rank}, {model}"
            try:
                assert_same_run(got[model, "32"], reference[model, "32"])  # float32 stays exact
                assert_within(got[model, BF16], reference[model, BF16], TOLERANCE)
            except AssertionError as err:
                raise AssertionError(f"{where}: {err}") from None
            assert got[model, BF16]["losses"] != got[model, "32"]["losses"], where


def test_link_prediction_encodes_in_the_precision_too():
    from gnnmesh.link.trainer import LinkTrainer
    graph = random_graph(n=60, e=240, features=6, classes=3, isolated=3)

    def losses(precision):
        link = Config.of(task="link", epochs=3, seed=3, hidden=8, eval_negatives=7, precision=precision)
        return [r.loss for r in LinkTrainer(link, graph).fit().history]

    wide, narrow = losses("32"), losses(BF16)
    assert wide != narrow and wide == pytest.approx(narrow, rel=5e-2)
