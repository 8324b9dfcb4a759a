"""Predictions under every strategy and rank count equal the single process's forward pass
on the same checkpoint: logits, probabilities, labels and every layer's output."""

import numpy as np
import pytest
import torch

from gnnmesh.config import Config
from gnnmesh.predict import through_layer
from gnnmesh.train import Trainer
from gnnmesh.train.trainer import input_features
from gnnmesh.view import GraphView

from tests.dist import run_ranks, run_ranks_once
from tests.helpers import model_fields, random_graph, taken

MODELS = ["gcn", "sage", "gat", "gin", "decoupled-gcn", "decoupled-gat"]
LAYERS = 3
# What each strategy runs: grid3d takes models that are sums of aggregation terms.
RUNS = {"partition": MODELS, "tensor": MODELS, "offload": MODELS, "grid3d": ["gcn", "sage", "gin"]}
SETTINGS = {"partition": {"partitioner": "rp"}, "offload": {"partitioner": "rp", "device_memory": "17MiB"},
            "tensor": {}, "grid3d": {}}


def make_graph():
    # 37 nodes (divisible by none of 2, 3, 4), directed, self-loops, two isolated nodes
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)


def outputs():
    """(output, layer) pairs every model is predicted for."""
    return [("logits", None), ("probs", None), ("labels", None)] + [("embeddings", k) for k in range(1, LAYERS + 1)]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A checkpoint per model, trained three epochs on one process."""
    root, graph, paths = tmp_path_factory.mktemp("checkpoints"), make_graph(), {}
    for name in MODELS:
        paths[name] = str(root / f"{name}.pt")
        config = Config.of(**model_fields(name), hidden=5, layers=LAYERS, epochs=3, seed=3, checkpoint=paths[name],
                           **taken(model_fields(name), heads=2))
        Trainer(config, graph).fit()
    return paths


def predict_all(strategy: str, paths: dict, config: Config) -> dict:
    graph, out = make_graph(), {}
    for name in RUNS[strategy]:
        trainer = Trainer.from_checkpoint(paths[name], graph, config)
        for output, layer in outputs():
            out[name, output, layer] = trainer.predict(output, layer)
    return out


def _rank_predict(rank, world, strategy, paths):
    return predict_all(strategy, paths, Config.of(strategy=strategy, **SETTINGS[strategy]))


@pytest.fixture(scope="module")
def reference(checkpoints):
    return predict_all("partition", checkpoints, Config())  # all of them, on one process


def test_one_process_is_the_models_own_forward_pass(checkpoints):
    """What the single process predicts is the loaded model run as a notebook user would."""
    import gnnmesh
    graph = make_graph()
    x = input_features(graph)
    for name in MODELS:
        model, _ = gnnmesh.load(checkpoints[name])
        trainer = Trainer.from_checkpoint(checkpoints[name], graph)
        with torch.no_grad():
            want = model(GraphView(graph.adj), x)
            hidden = through_layer(model, 1)(GraphView(graph.adj), x)
        ids, got = trainer.predict("logits")
        assert np.array_equal(ids, np.arange(graph.num_nodes))
        torch.testing.assert_close(torch.from_numpy(got), want, rtol=0, atol=0)
        torch.testing.assert_close(torch.from_numpy(trainer.predict("embeddings", 1)[1]), hidden, rtol=0, atol=0)
        assert hidden.shape[1] == (10 if name == "gat" else 5)


def check_same(got: dict, want: dict, strategy: str) -> None:
    for (name, output, layer), (ids, values) in got.items():
        ref_ids, ref = want[name, output, layer]
        order = np.argsort(ids)
        assert np.array_equal(ids[order], ref_ids), (strategy, name, output, layer)
        if output == "labels":
            assert np.array_equal(values[order], ref), (strategy, name)
        else:
            scale = max(float(np.abs(ref).max()), 1.0)
            diff = float(np.abs(values[order] - ref).max())
            assert diff <= 1e-5 * scale, f"{strategy} {name} {output} layer {layer}: {diff:.3g}"


def gather(results: list) -> dict:
    """Every rank's rows of each output, joined."""
    keys = results[0].keys()
    return {k: (np.concatenate([r[k][0] for r in results]), np.concatenate([r[k][1] for r in results]))
            for k in keys}


FAST = [("partition", 2)]
ALL = [(s, p) for s in RUNS for p in (2, 3, 4)]  # 1 rank: the command-line and parts tests


@pytest.mark.parametrize("strategy,ranks", FAST)
@pytest.mark.timeout(300)
def test_every_rank_count_predicts_the_single_process(strategy, ranks, checkpoints, reference):
    check_same(gather(run_ranks(_rank_predict, ranks, strategy, checkpoints, timeout=240)), reference, strategy)


def _rank_predict_every(rank, world, strategies, paths):
    """Every strategy of ``strategies`` in one launch (``paths``: the checkpoints' items)."""
    return {strategy: _rank_predict(rank, world, strategy, dict(paths)) for strategy in strategies}


@pytest.mark.slow
@pytest.mark.parametrize("strategy,ranks", [r for r in ALL if r not in FAST])
@pytest.mark.timeout(600)
def test_every_rank_count_predicts_the_single_process_slow(strategy, ranks, checkpoints, reference):
    strategies = tuple(s for s in RUNS if (s, ranks) not in FAST)
    results = run_ranks_once(_rank_predict_every, ranks, strategies, tuple(sorted(checkpoints.items())), timeout=540)
    check_same(gather([r[strategy] for r in results]), reference, strategy)
