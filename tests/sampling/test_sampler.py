"""Neighbour sampling keyed by node: the ranks' blocks of a batch together are the whole batch's,
fanouts are met, and the kept entries estimate the operator unbiased in scale."""

import numpy as np
import pytest
import torch

from tests.helpers import random_graph

from gnnmesh import datasets
from gnnmesh.sampling import NeighborSampler
from gnnmesh.view import OPERATORS


def per_node(sample, hop: int) -> dict:
    """{destination's global id: its kept entries (global ids in the operator)} at ``hop``."""
    block = sample.blocks[hop]
    indptr = block.adj.indptr.numpy()
    return {int(block.nodes[i]): tuple(block.entries[indptr[i]:indptr[i + 1]]) for i in range(block.num_dst)}


@pytest.mark.parametrize("op", ["gcn", "mean", "loop"])
def test_ranks_blocks_together_are_the_whole_batchs(op, data_root):
    graph = datasets.load("cora", root=data_root)
    sampler = NeighborSampler(OPERATORS[op](graph.adj), [4, 3, -1], seed=5)
    batch = np.random.default_rng(0).choice(graph.num_nodes, 300, replace=False)
    whole = sampler.sample(batch, epoch=2, step=7)
    parts = [sampler.sample(piece, epoch=2, step=7) for piece in np.array_split(batch, 3)]
    for hop in range(3):
        want = per_node(whole, hop)
        got = {}
        for part in parts:
            got.update(per_node(part, hop))
        assert got == want, f"hop {hop}"
    # A block's destinations lead its nodes, the seeds in the order given.
    assert list(whole.blocks[0].nodes[:300]) == list(batch)
    for inner, outer in zip(whole.blocks, whole.blocks[1:]):
        assert list(outer.nodes[:outer.num_dst]) == list(inner.nodes)


def test_fanouts_are_met_and_estimates_unbiased_in_scale():
    graph = random_graph(n=400, e=6000, isolated=5)
    op = OPERATORS["mean"](graph.adj)
    degrees = np.diff(op.indptr.numpy())
    sampler = NeighborSampler(op, [5], seed=1)
    sample = sampler.sample(np.arange(400), epoch=1, step=0)
    block = sample.blocks[0]
    kept = np.diff(block.adj.indptr.numpy())
    assert (kept == np.minimum(degrees, 5)).all()
    assert len(set(sample.blocks[0].entries)) == kept.sum()  # without replacement
    sums = torch.zeros(400).index_add_(0, torch.repeat_interleave(torch.arange(400), torch.from_numpy(kept)),
                                       block.adj.values)
    assert torch.allclose(sums[degrees > 0], torch.ones(int((degrees > 0).sum())))  # a mean of the kept
    # Every entry is as likely as any other over many draws (uniform, without replacement).
    hub = int(np.argmax(degrees))
    counts = np.zeros(degrees[hub])
    for step in range(400):
        entries = sampler.sample(np.array([hub]), epoch=1, step=step).blocks[0].entries
        counts[entries - op.indptr[hub].item()] += 1
    expected = 400 * 5 / degrees[hub]
    assert counts.min() > 0.4 * expected and counts.max() < 1.8 * expected
    other = sampler.sample(np.arange(400), epoch=2, step=0).blocks[0].entries
    assert not np.array_equal(other, sample.blocks[0].entries)  # a new epoch samples anew
    full = NeighborSampler(op, [-1], seed=1).sample(np.arange(400), 1, 0).blocks[0]
    assert np.array_equal(np.diff(full.adj.indptr.numpy()), degrees)
    assert torch.equal(full.adj.values, op.values)  # all neighbours: the operator's own rows
