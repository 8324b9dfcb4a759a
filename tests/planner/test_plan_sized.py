"""Planning every strategy for a graph known by its size (``gnnmesh plan --nodes N --edges E``):
``gnnmesh.planner.sized`` and ``rank_sized``."""

import numpy as np
import pytest

from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.partition import partition
from gnnmesh.planner import partition as partition_model
from gnnmesh.planner import tensor as tensor_model
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
from gnnmesh.planner.partition import halo_counts
from gnnmesh.planner.rank import rank_sized
from gnnmesh.planner.sized import SizedGraph
from gnnmesh.view import OPERATORS

UNIFORM = "sbm:nodes=4000,classes=1,avg_degree=12,features=4"   # one block: an Erdős–Rényi graph
SKEWED = "rmat:scale=12,edge_factor=8,features=4"


def sized(graph) -> SizedGraph:
    return SizedGraph(graph.num_nodes, graph.adj.nnz)


def actual_halos(graph, parts: int, op: str = "gcn"):
    return halo_counts(OPERATORS[op](graph.adj), partition(graph, parts, "rp", cache=False).assignment, parts)


@pytest.mark.parametrize("parts", [2, 4, 8])
@pytest.mark.parametrize("op", ["gcn", "mean", "loop"])
def test_expected_halos_are_a_random_partitions_of_a_uniform_graph(parts, op):
    graph = datasets.load(UNIFORM)
    send, nnz = sized(graph).random_halos(op, parts)
    actual = actual_halos(graph, parts, op)
    assert send.shape == (parts, parts) and np.all(np.diag(send) == 0)
    assert np.allclose(send.sum(axis=0), actual.halo, rtol=0.03)   # measured: within 0.3%
    assert nnz.sum() == OPERATORS[op](graph.adj).nnz and np.allclose(nnz, actual.nnz, rtol=0.03)


@pytest.mark.parametrize("parts", [2, 4, 8])
def test_expected_halos_bound_a_skewed_graphs(parts):
    graph = datasets.load(SKEWED)
    send, _ = sized(graph).random_halos("gcn", parts)
    assert np.all(send.sum(axis=0) >= actual_halos(graph, parts).halo)


@pytest.mark.parametrize("model, options", [("gcn", {}), ("gat", {"heads": 2}), ("sage", {})])
def test_sized_estimates_agree_with_the_graphs_own_on_a_uniform_graph(model, options):
    graph, parts = datasets.load(UNIFORM), 4
    widths = (graph.num_features, 16, graph.num_classes)
    part = partition(graph, parts, "rp", cache=False)
    args = (widths, model, GPU_RATES, GPU_NETWORK, 2)
    exact = partition_model.estimate(graph, part, *args, **options)
    expected = partition_model.random_estimate(sized(graph), parts, *args, **options)
    assert expected.strategy == "partition rp"
    assert np.allclose(expected.rank_bytes, exact.rank_bytes, rtol=0.03)
    assert expected.epoch_s == pytest.approx(exact.epoch_s, rel=0.05)
    assert np.allclose(expected.peak_bytes, exact.peak_bytes, rtol=0.03)
    exact = tensor_model.estimate(graph, parts, *args, **options)
    expected = tensor_model.sized_estimate(sized(graph), parts, *args, **options)
    assert expected.phase_bytes["layout"] == exact.phase_bytes["layout"]   # rows alone decide it
    assert expected.phase_bytes.get("share", 0) == pytest.approx(exact.phase_bytes.get("share", 0), rel=0.03)
    assert expected.epoch_s == pytest.approx(exact.epoch_s, rel=0.05)


def test_rank_sized_ranks_rp_tensor_and_the_grids_and_says_why_not_the_others():
    graph = SizedGraph(10**6, 10**7)
    ranking = rank_sized(graph, 8, "gcn", (64, 16, 10), GPU_RATES, GPU_NETWORK, 4, memory_limit=2**40)
    names = {e.strategy for e in ranking.ranked}
    assert {"partition rp", "tensor", "grid3d 2x2x2", "grid3d 8x1x1"} <= names
    reasons = {d.name: d.reason for d in ranking.dropped}
    assert set(reasons) == {"partition gp", "partition hp", "offload"} and "--dataset" in reasons["partition gp"]
    alone = rank_sized(graph, 1, "gcn", (64, 16, 10), GPU_RATES, GPU_NETWORK)
    assert [e.strategy for e in alone.ranked] == ["single"] and alone.ranked[0].comm_s == 0


def test_plan_ranks_every_strategy_by_default_from_a_size(capsys):
    code = main(["plan", "--nproc", "8", "--gpus-per-node", "4", "--nodes", "1000000", "--edges", "10000000"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "known by its size" in out and "upper bound" in out
    assert "partition rp" in out and "tensor" in out and "grid3d 2x2x2" in out
    assert "partition hp: it partitions the graph's own structure: give --dataset" in out
    assert out.splitlines()[-1].startswith("choice: ")


def test_plan_of_every_strategy_refuses_more_ranks_than_it_can_pair(capsys):
    assert main(["plan", "--nproc", "5000", "--nodes", "10", "--edges", "10"]) == 2
    assert "--strategy grid3d" in capsys.readouterr().err
