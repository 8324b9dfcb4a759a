"""Predictions from parts, each rank reading only its own folder, equal the single process's
forward pass: partition, tensor and grid3d parts."""

import numpy as np
import pytest

from gnnmesh.config import Config
from gnnmesh.parts import open_parts
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.parallel.grid3d.parts import write_grid_parts
from gnnmesh.parallel.tensor.parts import write_tensor_parts
from gnnmesh.partition import partition
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.helpers import random_graph


def make_graph():
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root, graph = tmp_path_factory.mktemp("parts"), make_graph()
    path = str(root / "c.pt")
    Trainer(Config.of(model="gcn", hidden=5, layers=3, epochs=3, seed=3, checkpoint=path), graph).fit()
    write_partition_parts(graph, partition(graph, 3, "rp", seed=0, cache=False), root / "partition", "random")
    write_tensor_parts(graph, 2, root / "tensor", "random")
    write_grid_parts(graph, {"x": 2, "y": 1, "z": 2}, root / "grid3d", "random", layers=3)
    return root, path


def _rank_predict(rank, world, directory, path, strategy, grid):
    parts = open_parts(directory)
    trainer = Trainer.from_checkpoint(path, parts, Config.of(strategy=strategy, **({"grid": grid} if grid else {})))
    return {k: trainer.predict("embeddings", k) for k in (1, 2, 3)}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy,ranks,grid", [("partition", 3, None), ("tensor", 2, None), ("grid3d", 4, "2,1,2")])
def test_predictions_from_parts_equal_the_single_process(written, strategy, ranks, grid):
    root, path = written
    want = Trainer.from_checkpoint(path, make_graph())
    results = run_ranks(_rank_predict, ranks, str(root / strategy), path, strategy, grid, timeout=240)
    for layer in (1, 2, 3):
        ids = np.concatenate([r[layer][0] for r in results])
        values = np.concatenate([r[layer][1] for r in results])[np.argsort(ids)]
        _, ref = want.predict("embeddings", layer)
        assert np.array_equal(np.sort(ids), np.arange(37))
        assert np.abs(values - ref).max() <= 1e-5 * max(1.0, np.abs(ref).max()), (strategy, layer)
