"""The pooled dense ops: bit-identical to torch's own, forward and backward, on pooled memory."""

import pytest
import torch

from gnnmesh.ops import buffers, dense


@pytest.fixture
def pool():
    buffers.pool(True)
    yield
    buffers.pool(False)


def _run(fn, shapes, seed=0):
    """``fn``'s output and its inputs' gradients."""
    g = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(s, generator=g).sub_(0.2).requires_grad_() for s in shapes]
    y = fn(*inputs)
    y.backward(torch.randn(y.shape, generator=g))
    return [y.detach()] + [t.grad for t in inputs]


# rows enough that every [N, F] output is over the pool's least size (1 MiB)
@pytest.mark.parametrize("case", [
    ("linear", lambda h, w: dense.linear(h, w), lambda h, w: h @ w.t(), [(6000, 96), (48, 96)]),
    ("bias", lambda z, b: dense.add(z, b), lambda z, b: z + b, [(6000, 48), (48,)]),
    ("sum", lambda a, b: dense.add(a, b), lambda a, b: a + b, [(6000, 48), (6000, 48)]),
    ("relu", lambda h: dense.activation(torch.relu, h), torch.relu, [(6000, 48)]),
    ("layer", lambda h, w, b: dense.activation(torch.relu, dense.add(dense.linear(h, w), b)),
     lambda h, w, b: torch.relu(h @ w.t() + b), [(6000, 96), (48, 96), (48,)]),
], ids=lambda c: c[0])
@pytest.mark.parametrize("pooling", [True, False])
def test_the_ops_are_bit_identical_to_torchs_forward_and_backward(case, pooling):
    _, ours, torchs, shapes = case
    buffers.pool(pooling)
    try:
        got = _run(ours, shapes)
    finally:
        buffers.pool(False)
    for a, b in zip(got, _run(torchs, shapes)):
        assert torch.equal(a, b)


def test_pooled_outputs_come_back_to_the_pool_and_are_reused(pool):
    h, w = torch.randn(6000, 96), torch.randn(48, 96)
    first = dense.linear(h, w)
    address = first.data_ptr()
    del first
    assert buffers.idle_bytes() > 0
    assert dense.linear(h, w).data_ptr() == address  # the same pages, no fresh ones


def test_other_activations_and_autocast_run_torch_ops_as_they_are(pool):
    h = torch.randn(6000, 48)
    assert torch.equal(dense.activation(torch.nn.functional.elu, h), torch.nn.functional.elu(h))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert dense.linear(h, torch.randn(16, 48)).dtype == torch.bfloat16  # autocast's cast kept


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_a_model_trains_bit_for_bit_alike_on_the_pooled_ops_and_on_torchs(model, monkeypatch):
    """Training steps of a model on the dense ops here, pooled, and on torch's own: the same
    losses and weights, bit for bit."""
    from gnnmesh import datasets
    from gnnmesh.config import Config
    from gnnmesh.train import Trainer
    graph = datasets.load("rmat:nodes=6000,edges=30000,features=64,classes=8")
    runs = []
    for ours in (True, False):
        buffers.pool(ours)
        if not ours:
            monkeypatch.setattr(dense, "applies", lambda *tensors: False)
        trainer = Trainer(Config.of(model=model, hidden=64, layers=2, dropout=0.0, seed=3), graph)
        losses = [trainer.train_step() for _ in range(2)]
        runs.append((losses, [p.detach().clone() for p in trainer.model.parameters()]))
    buffers.pool(False)
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))
