"""The guide "Adding a strategy": its toy strategy is the file the guide shows, it registers with
one line, ``gnnmesh plan`` ranks it through its planner model, and it trains to the single
process's losses and parameters on real gloo ranks."""

from pathlib import Path

import pytest

from gnnmesh import strategies
from gnnmesh.cli import main
from gnnmesh.commands.plugins import PLUGINS_ENV
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError

from tests.dist import run_ranks
from tests.helpers import random_graph
from tests.parity import assert_same_run, train

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "contributing" / "adding-a-strategy.md"


def config(**extra):
    return Config.of(epochs=8, seed=3, hidden=8, **extra)


def _rank_run(rank, world):
    import examples.replicated_strategy  # noqa: F401  (registers the strategy in this rank)
    from gnnmesh.train import Trainer
    trainer = Trainer(config(strategy="replicated", nproc=world), random_graph(n=41, e=160, seed=5))
    summary = trainer.fit()
    return {"losses": [r.loss for r in summary.history],
            "params": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}}


def test_the_guide_shows_the_tested_file():
    assert '--8<-- "examples/replicated_strategy.py"' in GUIDE.read_text()
    assert (ROOT / "examples" / "replicated_strategy.py").is_file()


@pytest.fixture()
def replicated_strategy():
    """The toy strategy, registered for one test and removed after it, so that no other test
    sees a strategy the package does not have."""
    import importlib
    import sys
    module = importlib.import_module("examples.replicated_strategy")
    yield module
    strategies.REGISTRY.pop(module.SPEC.name, None)
    sys.modules.pop("examples.replicated_strategy", None)


def test_registering_makes_it_a_strategy_everywhere(replicated_strategy):
    assert "replicated" in strategies.names("full")
    assert Config.of(strategy="replicated", nproc=2).strategy_spec is replicated_strategy.SPEC
    with pytest.raises(ConfigError, match=r"'blocks' \(--blocks\) applies only to --strategy grid3d"):
        Config.of(strategy="replicated", blocks=2)   # it reads no other strategy's settings
    with pytest.raises(ValueError, match="registered already"):
        strategies.register(replicated_strategy.SPEC)


def test_gnnmesh_plan_ranks_a_strategy_registered_from_a_users_module(replicated_strategy, monkeypatch, capsys):
    monkeypatch.setenv(PLUGINS_ENV, "examples.replicated_strategy")
    assert main(["plan", "--nproc", "2", "--nodes", "2000", "--edges", "20000"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line[:4].strip().isdigit()]  # rank column
    candidates = [row.split()[1] for row in rows]
    assert "replicated" in candidates and "tensor" in candidates


def test_a_plugin_module_that_is_not_there_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv(PLUGINS_ENV, "no_such_strategy_module")
    assert main(["plan", "--nproc", "2", "--nodes", "2000", "--edges", "20000"]) == 2
    assert capsys.readouterr().err == ("gnnmesh: error: environment variable GNNMESH_PLUGINS: no module named "
                                       "'no_such_strategy_module'\n")


@pytest.mark.timeout(200)
def test_the_toy_strategy_equals_the_single_process():
    want = train(random_graph(n=41, e=160, seed=5), config())
    for rank, got in enumerate(run_ranks(_rank_run, 2, timeout=180)):
        try:
            assert_same_run(got, want)
        except AssertionError as err:
            raise AssertionError(f"rank {rank}: {err}") from None
