"""The partition and tensor models (gnnmesh.planner.partition, .tensor): their bytes equal what
real runs count, for every rank and phase; their times move the way the work does."""

import json
from dataclasses import replace

import numpy as np
import pytest

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.parallel.partition.strategy import PartitionParallel
from gnnmesh.parallel.tensor.strategy import TensorParallel
from gnnmesh.partition import partition, save_partition
from gnnmesh.planner import partition as partition_model
from gnnmesh.planner import tensor as tensor_model
from gnnmesh.planner.estimate import Estimate
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES, ComputeRates, Network

from tests.dist import run_ranks
from tests.forked import run_cli
from tests.helpers import layout, taken
from tests.parity import train

EPOCHS = 2
HEADS = 2
# (model, hidden): gcn and gat at widths 16 and 32, each once per partitioner
CASES = [("gcn", 16), ("gat", 32), ("gcn", 32), ("gat", 16)]
TENSOR_CASES = [("gcn", False, 16), ("gat", False, 32), ("gcn", True, 32), ("gat", True, 16)]


def cora():
    return datasets.load("cora")


def config(model, hidden, decoupled=False):
    return Config.of(model=model, hidden=hidden, layers=2, epochs=EPOCHS, seed=1, decoupled=decoupled,
                     **taken({"model": model, "decoupled": decoupled}, heads=HEADS, k=3))


def widths(graph, hidden):
    return (graph.num_features, hidden, graph.num_classes)


def _partition_runs(rank, world, assignments):
    graph = cora()
    return {(method, model, hidden): train(graph, config(model, hidden),
                                           PartitionParallel(layout("partition"), "cpu", assignment=vector))["extra"]
            for method, vector in assignments.items() for model, hidden in CASES}


def _tensor_runs(rank, world):
    """Each case's epochs and, for GCN, the strategy's own prediction of its layout bytes
    (the widths it aggregates: h W in both layers, or the decoupled model's output once)."""
    graph = cora()
    runs = {}
    for model, decoupled, hidden in TENSOR_CASES:
        strategy = TensorParallel(layout("tensor"), "cpu")
        extra = train(graph, config(model, hidden, decoupled), strategy)["extra"]
        aggregated = [graph.num_classes] if decoupled else [hidden, graph.num_classes]
        runs[model, decoupled, hidden] = extra, strategy.predicted_layout_bytes(aggregated) if model == "gcn" else None
    return runs


def assert_counted(estimate: Estimate, extras: list, phases: tuple, what: str) -> None:
    """Every epoch's counters equal the estimate: each reported phase in all and per rank;
    the phases not reported one by one (grad, metrics), together, through ``bytes_total``;
    every rank's total."""
    assert set(phases) < set(estimate.phase_bytes) and len(extras) == EPOCHS, what
    for epoch, extra in enumerate(extras, 1):
        where = f"{what}, epoch {epoch}"
        for phase in phases:
            assert extra[f"{phase}_bytes"] == estimate.phase_bytes[phase], f"{where}: {phase}"
            assert extra[f"rank_{phase}_bytes"] == estimate.rank_phase_bytes[phase], f"{where}: rank {phase}"
        assert extra["bytes_total"] == sum(estimate.phase_bytes.values()) == sum(estimate.rank_bytes), where
        # grad and metrics are all-reduces: every rank counts the same buffers
        rest = extra["bytes_total"] - sum(extra[f"{p}_bytes"] for p in phases)
        ranks = len(estimate.rank_bytes)
        assert rest % ranks == 0, where
        counted = [sum(extra[f"rank_{p}_bytes"][r] for p in phases) + rest // ranks for r in range(ranks)]
        assert counted == estimate.rank_bytes, where


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world, methods", [(2, ("rp", "hp")), pytest.param(3, ("rp", "gp"), marks=pytest.mark.slow)])
def test_partition_bytes_equal_the_counters(world, methods):
    graph = cora()
    parts = {m: partition(graph, world, m, seed=0, cache=False) for m in methods}
    runs = run_ranks(_partition_runs, world, {m: p.assignment for m, p in parts.items()}, timeout=200)[0]
    for method, part in parts.items():
        for model, hidden in CASES:
            got = partition_model.estimate(graph, part, widths(graph, hidden), model, GPU_RATES, GPU_NETWORK,
                                           heads=HEADS)
            assert got.strategy == f"partition {method}" and got.setup_s == part.seconds
            assert got.phase_bytes["halo"] > 0 and len(got.rank_bytes) == len(got.peak_bytes) == world
            assert_counted(got, runs[method, model, hidden], ("halo",), f"{method}/{model}/{hidden} on {world}")


@pytest.mark.timeout(180)
def test_tensor_bytes_equal_the_counters():
    graph = cora()
    runs = run_ranks(_tensor_runs, 2, timeout=150)[0]
    for model, decoupled, hidden in TENSOR_CASES:
        got = tensor_model.estimate(graph, 2, widths(graph, hidden), model, GPU_RATES, GPU_NETWORK,
                                    decoupled=decoupled, heads=HEADS, k=3)
        assert got.strategy == ("tensor decoupled" if decoupled else "tensor")
        assert got.phase_bytes["layout"] > 0 and (got.phase_bytes["share"] > 0) == (model == "gat")
        extras, predicted = runs[model, decoupled, hidden]
        assert_counted(got, extras, ("layout", "share"), f"{model}/{decoupled}/{hidden}")
        assert predicted in (None, got.phase_bytes["layout"])   # one rule for layout bytes


OTHER_CASES = [("sage", False), ("gin", False), ("gat", True)]   # (model, decoupled), three layers


def _other_runs(rank, world, vector):
    graph = cora()
    runs = {}
    for model, decoupled in OTHER_CASES:
        cfg = config(model, 24, decoupled).updated(layers=3)
        runs["partition", model] = train(graph, cfg, PartitionParallel(layout("partition"), "cpu",
                                                                       assignment=vector))["extra"]
        runs["tensor", model] = train(graph, cfg, TensorParallel(layout("tensor"), "cpu", chunk_size=700))["extra"]
    return runs


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_other_models_layers_and_chunks_too():
    """SAGE, GIN and decoupled GAT at three layers on three ranks: partition (contiguous) and
    tensor with the aggregation cut into chunks, which moves the same bytes."""
    graph = cora()
    part = partition(graph, 3, "contiguous", cache=False)
    runs = run_ranks(_other_runs, 3, part.assignment, timeout=150)[0]
    w = (graph.num_features, 24, 24, graph.num_classes)
    for model, decoupled in OTHER_CASES:
        options = dict(decoupled=decoupled, heads=HEADS, k=3)
        assert_counted(partition_model.estimate(graph, part, w, model, GPU_RATES, GPU_NETWORK, **options),
                       runs["partition", model], ("halo",), f"partition {model}")
        assert_counted(tensor_model.estimate(graph, 3, w, model, GPU_RATES, GPU_NETWORK, **options),
                       runs["tensor", model], ("layout", "share"), f"tensor {model}")


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_partition_estimate_equals_a_command_line_run(tmp_path):
    """``gnnmesh train --nproc 2`` as a user runs it, the partition read from a file."""
    graph = cora()
    part = partition(graph, 2, "rp", seed=3, cache=False)
    save_partition(part, tmp_path / "rp.npy")
    metrics = tmp_path / "m.jsonl"
    result = run_cli("train", "--dataset", "cora", "--nproc", "2",
                     "--strategy", "partition", "--partition-file", str(tmp_path / "rp.npy"),
                     "--model", "gat", "--hidden", "16", "--heads", "3", "--epochs", "2", "--threads", "1",
                     "--quiet", "--metrics", str(metrics), timeout=100)
    assert result.returncode == 0, result.stderr
    extras = [json.loads(line) for line in metrics.read_text().splitlines()]
    got = partition_model.estimate(graph, part.assignment, widths(graph, 16), "gat", GPU_RATES, GPU_NETWORK, heads=3)
    assert_counted(got, extras, ("halo",), "command line")


# ---------------------------------------------------------------------------- times

# A CPU core's order of magnitude: per-element costs far above the per-call ones on these graphs.
CPU_RATES = ComputeRates(spmm_call=5e-6, spmm_per_nnz=2e-9, spmm_per_nnz_col=5e-10, spmm_per_out=5e-10,
                         spmm_per_in=5e-10, gemm_call=5e-6, gemm_flops=2e10, elementwise_call=2e-6,
                         elementwise_per=1e-9)

@pytest.fixture(scope="module")
def sbm():
    return datasets.load("sbm:nodes=6000,classes=4,features=64")


@pytest.mark.timeout(60)
def test_more_ranks_less_compute_per_rank(sbm):
    w = widths(sbm, 64)
    rp = [partition_model.estimate(sbm, partition(sbm, n, "rp", seed=0, cache=False), w, "gcn", CPU_RATES,
                                   GPU_NETWORK) for n in (1, 2, 4, 8)]
    tp = [tensor_model.estimate(sbm, n, w, "gcn", CPU_RATES, GPU_NETWORK) for n in (1, 2, 4, 8)]
    for runs in (rp, tp):
        compute = [e.compute_s for e in runs]
        assert all(a > b for a, b in zip(compute, compute[1:])), compute
        assert compute[0] / compute[-1] > 2, compute
        assert runs[0].comm_s == 0 and all(e.comm_s > 0 for e in runs[1:])
        assert all(e.epoch_s == pytest.approx(e.compute_s + e.comm_s) for e in runs)
        peaks = [max(e.peak_bytes) for e in runs]   # a rank holds less of the vertex data
        assert all(a > b for a, b in zip(peaks, peaks[1:])), peaks
    # a random partition cuts more the more parts it has: more rows move
    halo = [e.phase_bytes["halo"] for e in rp]
    assert halo[0] == 0 and all(a < b for a, b in zip(halo[1:], halo[2:])), halo


@pytest.mark.timeout(60)
def test_time_follows_widths_network_and_placement(sbm):
    part = partition(sbm, 4, "rp", seed=0, cache=False)
    # both below the input's 64: both aggregate h W, in the same exchanges, one wider
    narrow, wide = (partition_model.estimate(sbm, part, widths(sbm, h), "gcn", CPU_RATES, GPU_NETWORK)
                    for h in (8, 48))
    assert wide.compute_s > narrow.compute_s and wide.phase_bytes["halo"] > narrow.phase_bytes["halo"]
    assert wide.comm_s > narrow.comm_s
    # every rank on its own node: every message crosses a NIC, slower than within a node
    spread = partition_model.estimate(sbm, part, widths(sbm, 64), "gcn", CPU_RATES, GPU_NETWORK, ranks_per_node=1)
    packed = partition_model.estimate(sbm, part, widths(sbm, 64), "gcn", CPU_RATES, GPU_NETWORK)
    assert spread.comm_s > packed.comm_s and spread.rank_bytes == packed.rank_bytes
    assert spread.compute_s == packed.compute_s
    # a slow network makes communication the largest term
    slow = replace(GPU_NETWORK, intra_bw=1e6, inter_bw=1e6)
    for est in (partition_model.estimate(sbm, part, widths(sbm, 64), "gcn", CPU_RATES, slow),
                tensor_model.estimate(sbm, 4, widths(sbm, 64), "gcn", CPU_RATES, slow)):
        assert est.dominant in ("halo", "layout", "grad") and est.comm_s > est.compute_s
    free = Network(intra_bw=1e30, inter_bw=1e30, intra_latency=0.0, inter_latency=0.0)
    ideal = tensor_model.estimate(sbm, 4, widths(sbm, 64), "gcn", CPU_RATES, free)
    assert ideal.comm_s == pytest.approx(0.0, abs=1e-12) and ideal.dominant in ("aggregate", "dense")


@pytest.mark.timeout(60)
def test_no_evaluation_moves_less():
    graph = cora()
    part = partition(graph, 2, "contiguous", cache=False)
    with_eval = partition_model.estimate(graph, part, widths(graph, 16), "gcn", CPU_RATES, GPU_NETWORK)
    without = partition_model.estimate(graph, part, widths(graph, 16), "gcn", CPU_RATES, GPU_NETWORK, evaluate=False)
    assert without.phase_bytes["halo"] < with_eval.phase_bytes["halo"]
    assert without.phase_bytes["metrics"] == 2 * 4 and with_eval.phase_bytes["metrics"] == 2 * 16
    assert without.epoch_s < with_eval.epoch_s
    assert np.all(np.array(without.rank_bytes) < np.array(with_eval.rank_bytes))
