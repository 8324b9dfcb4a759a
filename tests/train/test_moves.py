"""A checkpoint moves between strategies and rank counts: training resumed under another
strategy continues to the uninterrupted run's losses, and what cannot move is refused."""

import pytest

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.helpers import random_graph

EPOCHS, SPLIT = 6, 3
SETTINGS = {"single": {}, "partition": {"partitioner": "rp"}, "tensor": {}, "grid3d": {},
            "offload": {"partitioner": "rp", "device_memory": "17MiB"}}


def make_graph(features: int = 6):
    return random_graph(n=37, e=150, features=features, classes=3, directed=True, isolated=2)


def config(strategy: str, **fields) -> Config:
    return Config.of(model="gcn", hidden=8, layers=2, seed=2, strategy=strategy, **SETTINGS[strategy], **fields)


def _rank_train(rank, world, strategy, path, epochs, resume):
    summary = Trainer(config(strategy, epochs=epochs, checkpoint=path, resume=resume), make_graph()).fit()
    return [r.loss for r in summary.history]


def run(strategy: str, ranks: int, path: str, epochs: int, resume: bool = False) -> list:
    if strategy == "single":
        return _rank_train(0, 1, strategy, path, epochs, resume)
    return run_ranks(_rank_train, ranks, strategy, path, epochs, resume, timeout=150)[0]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run("single", 1, str(tmp_path_factory.mktemp("whole") / "c.pt"), EPOCHS)


def check_move(tmp_path, uninterrupted, before: tuple, after: tuple) -> None:
    path = str(tmp_path / "c.pt")
    first = run(*before, path, SPLIT)
    rest = run(*after, path, EPOCHS, resume=True)
    assert len(rest) == EPOCHS  # the history continues the checkpoint's
    for epoch, (got, want) in enumerate(zip(first + rest[SPLIT:], uninterrupted), 1):
        assert abs(got - want) <= 1e-5 * abs(want), f"{before} -> {after}, epoch {epoch}: {got} vs {want}"


MOVES = [(("partition", 3), ("tensor", 2)), (("grid3d", 4), ("single", 1)), (("tensor", 2), ("partition", 3)), (("offload", 2), ("single", 1)),
         (("single", 1), ("grid3d", 4)), (("partition", 2), ("offload", 3)), (("single", 1), ("tensor", 3))]


@pytest.mark.slow
@pytest.mark.parametrize("before,after", MOVES, ids=[f"{a[0]}x{a[1]}-{b[0]}x{b[1]}" for a, b in MOVES])
@pytest.mark.timeout(320)
def test_a_checkpoint_resumes_under_another_strategy(tmp_path, uninterrupted, before, after):
    check_move(tmp_path, uninterrupted, before, after)


def test_another_input_width_is_refused_in_one_line(tmp_path):
    path = str(tmp_path / "c.pt")
    Trainer(config("single", epochs=1, checkpoint=path), make_graph()).fit()
    with pytest.raises(ConfigError, match="takes 6 input features, the graph has 7"):
        Trainer(config("single", epochs=2, checkpoint=path, resume=True), make_graph(features=7)).fit()
    with pytest.raises(ConfigError, match="c.pt: .*takes 6 input features, the graph has 7"):
        Trainer.from_checkpoint(path, make_graph(features=7))


def test_another_number_of_classes_is_refused(tmp_path):
    path = str(tmp_path / "c.pt")
    Trainer(config("single", epochs=1, checkpoint=path), make_graph()).fit()
    graph = make_graph().replace(num_classes=5)
    with pytest.raises(ConfigError, match="predicts 3 classes, the graph has labels of 5"):
        Trainer.from_checkpoint(path, graph)
