"""One process holds the whole graph: the reference every other strategy must reproduce."""

from __future__ import annotations

from ..view import GraphView
from .input_rows import LeafRows
from .strategy import RankData, Strategy


def whole_graph(graph, x, seed: int, device) -> RankData:
    """The whole graph and all its vertex data, on ``device``: a single process's data, and
    every rank's under a strategy that holds the whole graph everywhere (mini-batch)."""
    view = GraphView(graph.adj, seed=seed, device=device)
    return RankData(view, x.to(device), graph.y.to(device), graph.train_mask.to(device),
                 graph.val_mask.to(device), graph.test_mask.to(device))


class SingleProcess(Strategy):
    name = "single"

    def rank_data(self, graph, x, seed, device):
        return whole_graph(graph, x, seed, device)

    def input_rows(self, data):
        return LeafRows(data, data.row_ids().numpy())
