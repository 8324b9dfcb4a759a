"""A layer stack's input read a block of rows at a time: the same numbers as the whole input,
and only where the first layer uses its input row by row."""

import pytest
import torch

from gnnmesh.models import build_model
from gnnmesh.view import GraphView

from tests.helpers import random_graph


def _blocks(x, size):
    def blocks():
        for lo in range(0, x.shape[0], size):
            yield slice(lo, lo + size), x[lo:lo + size]
    return blocks


@pytest.mark.parametrize("name", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("size", [2, 7, 100])  # one-row blocks take another BLAS kernel
def test_a_stack_by_blocks_is_the_stack_on_its_whole_input(name, size):
    graph = random_graph(n=40, e=160, features=12, weighted=True)
    torch.manual_seed(0)
    model = build_model(name, 12, 3, hidden=6, layers=3).eval()
    view = GraphView(graph.adj)
    assert model.reads_input_by_rows()
    with torch.no_grad():
        want = model(view, graph.x)
        got = model.forward_by_blocks(view, _blocks(graph.x, size), graph.num_nodes)
    assert torch.equal(got, want)


def test_only_a_first_layer_that_multiplies_first_reads_by_rows():
    widening = build_model("gcn", 4, 3, hidden=16, layers=2).eval()  # aggregates its 4 columns first
    narrowing = build_model("gcn", 16, 3, hidden=4, layers=2).eval()
    gat = build_model("gat", 16, 3, hidden=4, layers=2).eval()
    assert not widening.reads_input_by_rows()
    assert narrowing.reads_input_by_rows()
    assert not narrowing.train().reads_input_by_rows()  # dropout draws over the whole input
    assert not gat.reads_input_by_rows()
