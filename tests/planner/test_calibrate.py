"""Calibrating the rates table on measured epochs (gnnmesh.planner.calibrate)."""

import pytest

from gnnmesh import datasets
from gnnmesh.planner import calibrate
from gnnmesh.planner import partition as partition_model
from gnnmesh.planner import tensor as tensor_model
from gnnmesh.planner.calibrate import Factors, Sample, fit, parts, scaled
from gnnmesh.planner.grid3d import Workload, predict
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
from gnnmesh.layout.grid import Grid
from gnnmesh.partition import partition


@pytest.fixture(scope="module")
def graph():
    return datasets.load("sbm:nodes=600,classes=3,features=24")


def predictors(graph):
    """Epoch-time predictions of several strategies and models, as functions of the table."""
    part = partition(graph, 3, "rp", cache=False)
    widths = (24, 16, 3)
    work = Workload(graph.num_nodes, graph.adj.nnz + graph.num_nodes, widths, evaluate=True, dropout=True)
    return [
        lambda r, n: partition_model.estimate(graph, part, widths, "gcn", r, n).epoch_s,
        lambda r, n: partition_model.estimate(graph, part, (24, 8, 3), "gat", r, n, heads=2).epoch_s,
        lambda r, n: tensor_model.estimate(graph, 3, widths, "gcn", r, n).epoch_s,
        lambda r, n: tensor_model.estimate(graph, 2, widths, "sage", r, n).epoch_s,
        lambda r, n: predict(work, Grid(1, 3, 1), r, n).total,
    ]


def test_the_groups_add_up_to_the_prediction(graph):
    """Every rate belongs to a group: the groups' shares sum to the whole prediction."""
    for predict_epoch in predictors(graph):
        share = parts(predict_epoch, GPU_RATES, GPU_NETWORK)
        assert sum(share[:3]) == pytest.approx(predict_epoch(GPU_RATES, GPU_NETWORK), rel=1e-6)
        assert min(share[:3]) > 0


def test_fit_recovers_the_factors_and_the_scaled_table_predicts_the_measurements(graph):
    truth = Factors(sparse=3.0, dense=1.5, links=7.0, overhead_s=2e-3)
    samples, checks = [], []
    for crowding in (1.0, 2.0):
        for predict_epoch in predictors(graph):
            share = parts(predict_epoch, GPU_RATES, GPU_NETWORK, crowding)
            measured = truth.sparse * share[0] + truth.dense * share[1] + truth.links * share[2] \
                + truth.overhead_s * crowding
            samples.append(Sample(share, measured))
            checks.append((predict_epoch, crowding, measured))
    got = fit(samples)
    for name in ("sparse", "dense", "links", "overhead_s"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-4), name
    rates, network = scaled(GPU_RATES, GPU_NETWORK, got)
    assert rates.source.endswith("calibrated") and network.source.endswith("calibrated")
    for predict_epoch, crowding, measured in checks:
        if crowding == 1.0:   # the overhead as one rank with its cores to itself pays it
            assert predict_epoch(rates, network) == pytest.approx(measured, rel=1e-4)


def test_scaling_by_ones_changes_nothing_but_the_overhead():
    rates, network = scaled(GPU_RATES, GPU_NETWORK, Factors(overhead_s=0.5))
    assert rates.epoch_overhead == 0.5 and rates.spmm_per_nnz == GPU_RATES.spmm_per_nnz
    assert rates.gemm_flops == GPU_RATES.gemm_flops and network.intra_bw == GPU_NETWORK.intra_bw
    assert set(calibrate.SPARSE) | set(calibrate.DENSE) | {"gemm_flops", "epoch_overhead", "crowding", "source"} == \
        {f for f in GPU_RATES.__dataclass_fields__}


def test_ranks_sharing_cores_are_slowed_and_lend_their_cores_when_done():
    from dataclasses import replace
    from gnnmesh.planner.rates import sharing_cores
    from gnnmesh.planner.trace import slowest
    cpu = replace(GPU_RATES, source="cpu")
    assert sharing_cores(cpu, 2, 1, 2) == cpu
    crowded = sharing_cores(cpu, 4, 1, 2)
    assert crowded.crowding == 2 and crowded.spmm_per_nnz == 2 * cpu.spmm_per_nnz
    assert crowded.gemm_flops == cpu.gemm_flops / 2
    ranks = [{"dense": 1.0, "aggregate": 0.0}, {"dense": 2.0, "aggregate": 1.0}]
    assert slowest(ranks, cpu) == ranks[1]                              # alone on its cores: the slowest
    assert slowest(ranks, crowded) == pytest.approx({"dense": 4 / 3, "aggregate": 2 / 3})   # the mean, 2.0
    assert slowest(ranks, replace(crowded, crowding=1.2)) == pytest.approx({"dense": 2 / 1.2, "aggregate": 1 / 1.2})
