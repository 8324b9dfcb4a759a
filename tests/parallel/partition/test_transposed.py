"""A rank's backward products taken from the operator's rows, its transpose never built
(gnnmesh.parallel.partition.transposed)."""

import pytest
import torch

from gnnmesh.ops import compiled
from gnnmesh.ops.spmm import multiply
from gnnmesh.parallel.partition.transposed import by_rows, multiply_transposed

from tests.parallel.partition.test_halo import _locals


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("heads", [None, 2])
def test_the_product_from_the_rows_is_the_transposes_bit_for_bit(monkeypatch, threads, heads):
    """Owned and halo parts of every rank (int32 column ids), plain and multi-head rows, one
    task or several: the numbers multiplying by the stored transpose gives, and no transpose
    kept."""
    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _, local in _locals("gcn"):
            for part in (local.inner, local.outer):
                assert part.indices.dtype == torch.int32
                shape = (part.shape[0],) + ((5,) if heads is None else (heads, 5))
                g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
                values = part.values if heads is None else torch.rand(part.nnz, heads)
                assert by_rows(part, g)
                got = multiply_transposed(part, values, g)
                assert "t" not in part._structure_cache()  # nothing of A^T built
                assert torch.equal(got, multiply(part, values, g, transpose=True))
    finally:
        torch.set_num_threads(before)


def test_elsewhere_the_stored_transpose_multiplies(monkeypatch):
    monkeypatch.setenv("GNNMESH_KERNELS", "torch")
    _, local = next(_locals("gcn"))
    g = torch.randn(local.inner.shape[0], 4)
    assert not by_rows(local.inner, g)
    assert torch.equal(multiply_transposed(local.inner, local.inner.values, g),
                       multiply(local.inner, local.inner.values, g, transpose=True))
    with compiled.disabled():
        assert not by_rows(local.inner, g)


def test_a_range_of_columns_is_those_rows_of_the_whole_product(monkeypatch):
    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")
    for _, local in _locals("gcn"):
        part = local.outer
        g = torch.randn(part.shape[0], 3, generator=torch.Generator().manual_seed(2))
        whole = multiply_transposed(part, part.values, g)
        cuts = [0, part.shape[1] // 3, part.shape[1] // 3, part.shape[1]]  # one range empty
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            assert torch.equal(multiply_transposed(part, part.values, g, columns=slice(lo, hi)), whole[lo:hi])


def _both_backwards(rank, world):
    import numpy as np

    from gnnmesh.comm import Comm
    from gnnmesh.parallel.partition.halo import _backward_by_peer, build_local_operator
    from gnnmesh.view import OPERATORS
    from tests.helpers import random_graph

    graph = random_graph(n=120, e=900, seed=3)
    local = build_local_operator(OPERATORS["gcn"](graph.adj), torch.from_numpy(np.arange(120) * 7 % world),
                                 Comm(), "cpu")
    g = torch.randn(local.inner.shape[0], 5, generator=torch.Generator().manual_seed(rank))
    v_in, v_out = local.inner.values, local.outer.values
    by_peer = _backward_by_peer(local, v_in, v_out, g)
    pending = local.exchange.start_backward(multiply_transposed(local.outer, v_out, g))
    whole = local.exchange.finish_backward(pending, multiply_transposed(local.inner, v_in, g))
    return torch.equal(by_peer, whole), bool(local.exchange.routes.num_halo)


def test_the_halo_gradients_sent_a_peer_at_a_time_are_the_whole_halos(monkeypatch):
    """On 3 ranks: the backward pass's product with each peer's rows made and sent one peer
    at a time equals the whole halo's made and sent at once, bit for bit."""
    from tests.dist import run_ranks

    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")
    assert all(same and exchanged for same, exchanged in run_ranks(_both_backwards, 3, timeout=120))
