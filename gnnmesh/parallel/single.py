"""One process holds the whole graph: the reference every other strategy must reproduce."""

from __future__ import annotations

from ..view import GraphView
from .base import Shard, Strategy


class SingleProcess(Strategy):
    name = "single"

    def shard(self, graph, x, seed, device):
        view = GraphView(graph.adj, seed=seed, device=device)
        return Shard(view, x.to(device), graph.y.to(device), graph.train_mask.to(device),
                     graph.val_mask.to(device), graph.test_mask.to(device))
