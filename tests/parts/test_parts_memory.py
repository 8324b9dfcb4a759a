"""Per-rank memory falls with the number of ranks when every rank reads only its own part:
measured as the peak resident set (VmHWM) of real rank processes, not inferred from code."""

import pytest
import torch

from tests.helpers import layout
from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.memory import peak_rss_mib
from gnnmesh.ops import compiled
from gnnmesh.partition import partition
from gnnmesh.parts import open_parts
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.train import Trainer

from tests.dist import run_ranks

GRAPH = "rmat:nodes=100000,edges=1000000,features=64,classes=8"
CONFIG = Config.of(epochs=2, hidden=16, strategy="partition")


def _peak_above_startup(rank, world, parts_dir):
    """Peak resident memory of a training run above what the process held once started
    and connected: the interpreter, torch and its optimizer code (about 70 MiB, loaded on
    first use), the compiled CPU kernels (numba, about 70 MiB), the process group. Those are
    code, the same in every process; what is left is the data, which parts divide."""
    config = CONFIG.updated(strategy="partition" if parts_dir else "single")
    config = config.resolved()
    strategy = config.strategy_spec.build(config, layout(config.run.strategy, config.grid3d.grid), "cpu")
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    compiled.load()
    base = peak_rss_mib()
    data = open_parts(parts_dir) if parts_dir else datasets.load(GRAPH)
    Trainer(config, data, strategy).fit()
    return peak_rss_mib() - base


@pytest.mark.slow  # R-MAT runs on 1, 2 and 4 ranks, their resident memory
@pytest.mark.timeout(600)
def test_largest_rank_peak_falls_with_the_number_of_ranks(tmp_path):
    graph = datasets.load(GRAPH)  # generated once and cached for the processes below
    for parts in (2, 4):
        write_partition_parts(graph, partition(graph, parts, "contiguous", cache=False),
                              tmp_path / f"p{parts}", GRAPH)
    del graph
    single = run_ranks(_peak_above_startup, 1, None, timeout=300)[0]
    largest = {p: max(run_ranks(_peak_above_startup, p, str(tmp_path / f"p{p}"), timeout=300))
               for p in (2, 4)}
    mib = {"single": single, **largest}
    assert largest[4] < largest[2] < single, mib
    # Ideal is a quarter plus each rank's halo rows, exchange buffers and index. Measured: the
    # compiled kernels made the single process leaner than torch's ops did (about 205 -> 180
    # MiB) while the 4 ranks' largest peak moved little (80 -> 76 MiB), hence 0.45, not 0.4.
    assert largest[4] <= 0.45 * single, mib
