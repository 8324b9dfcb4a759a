"""1D partition parallelism equals the single-process run (real gloo ranks)."""

import pytest

from gnnmesh.config import Config
from gnnmesh.parallel.partition.strategy import PartitionParallel

from tests.dist import run_ranks
from tests.helpers import model_fields, random_graph, layout
from tests.parity import assert_same_run, train

MODELS = ["gcn", "sage", "gin", "gat", "decoupled-gcn"]
EPOCHS = 5  # several steps of Adam: parameters and moments carried from epoch to epoch


def make_graph():
    # 37 nodes (not divisible by 2, 3 or 4), directed, self-loops, two isolated nodes
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)


def config(model):
    return Config.of(**model_fields(model), epochs=EPOCHS, seed=1, hidden=8, layers=2)


PARTITIONERS = ["rp", "contiguous", "gp", "hp"]


def _rank_run(rank, world):
    """On 1 and 2 ranks every model with every partitioner; on more (slower to run) each
    model with one, every partitioner taking a turn."""
    graph = make_graph()
    cases = [(method, model) for method in PARTITIONERS for model in MODELS]
    if world > 2:
        cases = [(PARTITIONERS[(i + world) % len(PARTITIONERS)], model) for i, model in enumerate(MODELS)]
    return {(method, model): train(graph, config(model), PartitionParallel(layout("partition"), "cpu", method=method))
            for method, model in cases}


@pytest.fixture(scope="module")
def reference():
    graph = make_graph()
    return {m: train(graph, config(m)) for m in MODELS}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("world", [1, 2, pytest.param(3, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)])
def test_every_partitioner_and_model_matches_single_process(reference, world):
    results = run_ranks(_rank_run, world, timeout=360)
    for rank, got in enumerate(results):
        for (method, model), run in got.items():
            try:
                assert_same_run(run, reference[model])
            except AssertionError as err:
                raise AssertionError(f"{method}/{model}, rank {rank} of {world}: {err}") from None


def _rank_bytes(rank, world, assignment):
    graph = make_graph()
    cfg = Config.of(model="gcn", epochs=2, seed=1, hidden=8, layers=2, dropout=0.0)
    return train(graph, cfg, PartitionParallel(layout("partition"), "cpu", assignment=assignment))["extra"]


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_halo_bytes_equal_the_hypergraph_prediction():
    """Bytes sent per epoch = (connectivity - 1 of the column-net hypergraph) x row bytes x
    the widths exchanged: GCN 6 -> 8 -> 3 aggregates x (width 6, no gradient: x is data) in
    layer 1 and x W (width 3, forward and backward) in layer 2; evaluation repeats 6 + 3."""
    from gnnmesh.partition import connectivity_minus_one, partition

    graph = make_graph()
    part = partition(graph, 3, "hp", seed=0, cache=False)
    volume = connectivity_minus_one(graph.adj, part.assignment)
    assert volume > 0
    extras = run_ranks(_rank_bytes, 3, part.assignment, timeout=180)[0]
    for extra in extras:
        assert extra["halo_bytes"] == volume * 4 * (6 + 3 + 3 + 6 + 3)


def _predict_from_parts(rank, world, directory, path):
    import gnnmesh.parts.features as features
    from gnnmesh.parts import open_parts
    from gnnmesh.train import Trainer

    features.BLOCK_ROWS = 4  # several blocks a rank
    read = []
    blocks = features.MappedFeatures.blocks
    features.MappedFeatures.blocks = lambda self, rows=None: (read.append(b[0]) or b for b in blocks(self, rows))
    trainer = Trainer.from_checkpoint(path, open_parts(directory), Config.of(strategy="partition"))
    read.clear()  # the check of the features at setup reads them too
    ids, logits = trainer.predict("logits")
    return ids, logits, [(r.start, r.stop) for r in read], trainer.rank_data.x.shape[0]


@pytest.mark.parametrize("hidden,streamed", [(4, True), pytest.param(16, False, marks=pytest.mark.slow)])
def test_predicting_from_parts_reads_the_features_a_block_at_a_time(tmp_path, hidden, streamed):
    """A first layer that multiplies first (12 -> 4 columns) takes each rank's features from
    its folder a block of rows at a time; one that aggregates first (12 -> 16) the whole
    table. Both predict what the single process does."""
    import numpy as np

    from gnnmesh.parallel.partition.parts import write_partition_parts
    from gnnmesh.partition import partition
    from gnnmesh.train import Trainer

    graph = random_graph(n=37, e=150, features=12, classes=3, directed=True, isolated=2)
    path = str(tmp_path / "model.pt")
    Trainer(Config.of(model="gcn", hidden=hidden, layers=2, epochs=2, seed=1, checkpoint=path), graph).fit()
    write_partition_parts(graph, partition(graph, 2, "rp", seed=0, cache=False), tmp_path / "parts", "random")
    _, want = Trainer.from_checkpoint(path, graph).predict("logits")
    results = run_ranks(_predict_from_parts, 2, str(tmp_path / "parts"), path, timeout=120)
    ids = np.concatenate([r[0] for r in results])
    got = np.concatenate([r[1] for r in results])[np.argsort(ids)]
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())
    for _, _, read, rows in results:
        # streamed: every row once per weight, in blocks of 4 (the last one 3 to 5 rows)
        assert (read[-1][1] == rows and all(b - a <= 5 for a, b in read)) if streamed else not read
