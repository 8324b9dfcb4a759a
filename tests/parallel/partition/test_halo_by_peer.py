"""Without autograd a rank's product fetches the halo one peer and one message at a time
(gnnmesh.parallel.partition.halo.halo_product_by_peer): the same rows as the product with
autograd and as the single process's, on real gloo ranks."""

import numpy as np
import pytest
import torch

from gnnmesh.parallel.partition import halo, strategy as partition
from gnnmesh.parallel.partition.strategy import PartitionParallel
from gnnmesh.view import GraphView

from tests.dist import run_ranks
from tests.helpers import layout, random_graph

OPS = ("gcn", "mean", "sum")


def make_graph():
    return random_graph(n=61, e=400, features=6, classes=3, directed=True, isolated=2)


def _rank_products(rank, world):
    halo.MESSAGE_ROWS = 3  # several messages from each peer
    graph = make_graph()
    assignment = np.arange(graph.num_nodes) * 5 % world  # every rank a neighbour of every other
    strategy = PartitionParallel(layout("partition"), "cpu", assignment=assignment)
    data = strategy.rank_data(graph, graph.x.float(), 0, "cpu")
    view, x = data.view, data.x
    heads = torch.stack([x, 2 * x], dim=1)  # [rows, 2 heads, F]: per-head edge values
    calls = []
    fetch = partition.halo_product_by_peer

    def counted(*args):
        calls.append(1)
        return fetch(*args)
    partition.halo_product_by_peer = counted
    try:
        out = {}
        for op in OPS:
            with torch.no_grad():
                out[op, "by peer"] = view.spmm(x, op)
            out[op, "autograd"] = view.spmm(x.clone().requires_grad_(True), op).detach()
        local = view.local("loop")
        values = torch.rand(local.block.nnz, 2, generator=torch.Generator().manual_seed(rank))
        with torch.no_grad():
            out["heads", "by peer"] = view.spmm(heads, "loop", values)
        out["heads", "autograd"] = view.spmm(heads.clone().requires_grad_(True), "loop", values).detach()
        peers_held = [len(local.outer_of(p)) for p in range(world) if p != rank]
    finally:
        partition.halo_product_by_peer = fetch
    return data.row_ids().numpy(), out, len(calls), peers_held


@pytest.mark.timeout(120)
def test_the_product_fetched_peer_by_peer_equals_autograds_and_the_single_process():
    graph = make_graph()
    single = GraphView(graph.adj)
    results = run_ranks(_rank_products, 3, timeout=90)
    for rank, (ids, out, calls, peers_held) in enumerate(results):
        assert calls == len(OPS) + 1  # every product without autograd went peer by peer
        assert min(peers_held) > 1, "every peer sends this rank rows, in several messages"
        for op in OPS:
            want = single.spmm(graph.x.float(), op)[ids]
            assert torch.allclose(out[op, "by peer"], want, atol=1e-6), (rank, op)
            assert torch.allclose(out[op, "by peer"], out[op, "autograd"], atol=1e-6), (rank, op)
        assert torch.allclose(out["heads", "by peer"], out["heads", "autograd"], atol=1e-6), rank
