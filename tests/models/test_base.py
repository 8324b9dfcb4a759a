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
    assert narrowing.train().reads_input_by_rows()  # dropout draws each row's mask from its id
    assert not gat.reads_input_by_rows()


@pytest.mark.parametrize("name", ["gcn", "sage", "gin"])
@pytest.mark.parametrize("size", [2, 7, 100])
def test_training_by_blocks_is_training_on_the_whole_input(name, size):
    """Dropout drawn a block at a time: the same output bit for bit and the same draws; the
    weights' gradients summed a block at a time: the same to rounding."""
    graph = random_graph(n=40, e=160, features=12, weighted=True)
    torch.manual_seed(0)
    model = build_model(name, 12, 3, hidden=6, layers=3, dropout=0.5).train()
    assert model.reads_input_by_rows()
    runs = []
    for by_blocks in (False, True):
        view = GraphView(graph.adj, seed=3)
        view.set_epoch(2)
        model.zero_grad()
        out = (model.forward_by_blocks(view, _blocks(graph.x, size), graph.num_nodes) if by_blocks
               else model(view, graph.x))
        (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
        runs.append((out.detach(), view.draws, {k: p.grad.clone() for k, p in model.named_parameters()}))
    (want, want_draws, want_grads), (got, got_draws, got_grads) = runs
    assert torch.equal(got, want) and got_draws == want_draws
    for key, grad in want_grads.items():
        assert torch.allclose(got_grads[key], grad, rtol=1e-5, atol=1e-6 * float(grad.abs().max())), key
