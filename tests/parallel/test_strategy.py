"""What a rank trains on is ``RankData``; its former name ``Shard`` and a strategy written
against the former method name ``shard`` still work, with a DeprecationWarning."""

import pytest
import torch

from gnnmesh.parallel import RankData, SingleProcess, Strategy
from gnnmesh.parallel.single import whole_graph
from tests.helpers import random_graph


def test_the_former_class_name_is_rank_data_with_a_warning():
    with pytest.warns(DeprecationWarning, match="Shard is now named RankData"):
        from gnnmesh.parallel import Shard
    assert Shard is RankData


class FormerStrategy(Strategy):
    name = "former"

    def shard(self, graph, x, seed, device):
        return whole_graph(graph, x, seed, device)


def test_a_strategy_with_the_former_method_is_still_called():
    graph = random_graph()
    with pytest.warns(DeprecationWarning, match="'shard' is now named 'rank_data'"):
        data = FormerStrategy().rank_data(graph, graph.x, 0, torch.device("cpu"))
    expected = SingleProcess().rank_data(graph, graph.x, 0, torch.device("cpu"))
    assert torch.equal(data.x, expected.x) and torch.equal(data.train_mask, expected.train_mask)


def test_a_strategy_without_either_method_is_refused():
    graph = random_graph()
    with pytest.raises(NotImplementedError):
        Strategy().rank_data(graph, graph.x, 0, torch.device("cpu"))
