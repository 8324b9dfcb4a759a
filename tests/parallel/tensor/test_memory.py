"""Chunk-based scheduling bounds the aggregation's working set: an epoch's peak memory drops
when the chunk shrinks (real ranks, real resident memory)."""

import os

import pytest

from tests.helpers import layout
from gnnmesh.config import Config
from gnnmesh.datasets import load
from gnnmesh.parallel.tensor.strategy import TensorParallel
from gnnmesh.train import Trainer

from tests.dist import run_ranks

NODES = 200_000


def _status_kib(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _epoch_peak_mib(chunk):
    """Peak resident memory of one training epoch above the memory held before it."""
    graph = load(f"sbm:nodes={NODES},classes=8,avg_degree=20,features=64,seed=1,cache=false")
    cfg = Config.of(model="gcn", epochs=3, hidden=64, layers=2, eval_every=100)
    trainer = Trainer(cfg, graph, TensorParallel(layout("tensor"), "cpu", chunk_size=chunk))
    trainer.run_epoch()  # operators, chunk plans and optimizer state exist from here on
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak (VmHWM) to the current resident size
    trainer.run_epoch()
    return (_status_kib("VmHWM") - before) / 1024


def _rank_peak(rank, world, chunk):
    return _epoch_peak_mib(chunk)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc peak-RSS reset")
def test_smaller_chunks_lower_the_epoch_peak(monkeypatch):
    # Large blocks straight from mmap, so freed memory really leaves the process.
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    # Each measurement in fresh ranks of its own: no allocator state (freed blocks, arenas)
    # carries from one to the other, whichever runs first.
    chunked = run_ranks(_rank_peak, 2, NODES // 16, timeout=270, fresh=True)
    whole = run_ranks(_rank_peak, 2, None, timeout=270, fresh=True)
    for rank, (w, c) in enumerate(zip(whole, chunked)):
        assert w > 100, (rank, w, c)  # the epoch really allocates: ~V x 64 floats per layout switch
        assert c < 0.85 * w, (rank, w, c)
