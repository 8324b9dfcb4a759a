"""A toy parallel strategy: every rank holds the whole graph and computes every row, and the
labelled rows are dealt out among the ranks, so that each rank's loss covers its own share.
Summed over ranks, the gradients are the single process's, so the run equals it.

It saves nothing (each rank does all the work); it shows what a strategy consists of: a
``Strategy`` that says what a rank holds (``rank_data``), a factory, and one registry line.
"""

from dataclasses import replace

import torch

from gnnmesh.parallel import RankData
from gnnmesh.parallel.distributed import DistributedStrategy
from gnnmesh.planner.partition import one_process
from gnnmesh.strategies import StrategySpec, register
from gnnmesh.view import GraphView


class Replicated(DistributedStrategy):
    """Whole graph on every rank; rank r owns the labelled rows r, r + P, r + 2P, ..."""

    name = "replicated"

    def rank_data(self, graph, x, seed, device):
        mine = torch.arange(graph.num_nodes) % self.world_size == self.rank
        # The view's dropout masks are keyed by global row ids and the seed: the same on every
        # rank, and the same as the single process's.
        view = GraphView(graph.adj, seed=seed, device=device)
        masks = [(mask & mine).to(device) for mask in (graph.train_mask, graph.val_mask, graph.test_mask)]
        return RankData(view, x.to(device), graph.y.to(device), *masks)


def build(config, layout, device):
    """The factory the registry calls, with the run's resolved config."""
    return Replicated(layout, device)


def plan(job):
    """Its planner model, which ``gnnmesh plan`` and ``--strategy auto`` ask (the ``PlanJob``
    protocol of ``gnnmesh.planner.job``): on several ranks, every rank does the single
    process's work, so it is priced as the single process (its gradients' sum left out)."""
    if job.ranks == 1:
        return []
    return [replace(one_process(job), strategy="replicated", settings={"strategy": "replicated"})]


SPEC = register(StrategySpec("replicated", dims=("rows",), factory=f"{__name__}:build", planner=f"{__name__}:plan",
                             summary="every rank computes the whole graph; the labelled rows are dealt out"))
