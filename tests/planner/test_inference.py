"""The planner ranking one full-graph inference pass (``rank_strategies(..., inference=True)``):
every candidate priced for the evaluation's forward alone, its setup counted in full."""

from dataclasses import replace

import pytest

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.layout.grid import Grid
from gnnmesh.parallel.partition.strategy import PartitionParallel
from gnnmesh.parallel.tensor.strategy import TensorParallel
from gnnmesh.partition import partition
from gnnmesh.planner import grid3d
from gnnmesh.planner import offload as offload_model
from gnnmesh.planner import partition as partition_model
from gnnmesh.planner import tensor as tensor_model
from gnnmesh.planner.explain import choice, table
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
from gnnmesh.planner.rank import cost, rank_sized, rank_strategies
from gnnmesh.planner.sized import SizedGraph
from gnnmesh.train import Trainer

from tests.dist import run_ranks
from tests.helpers import layout, taken

HEADS = 2
LIMIT = 2**26          # bytes per rank: offload joins the candidates, every grid fits
METHODS = ("rp", "contiguous")


@pytest.fixture(scope="module")
def cora():
    return datasets.load("cora")


def widths(graph, hidden=16):
    return (graph.num_features, hidden, graph.num_classes)


def ranked(graph, model, decoupled=False, memory_limit=LIMIT, partitioners=METHODS, **kwargs):
    return rank_strategies(graph, 2, model, widths(graph), GPU_RATES, GPU_NETWORK, partitioners=partitioners,
                           decoupled=decoupled, memory_limit=memory_limit, heads=HEADS, k=3, **kwargs)


_RANKINGS = {}


def rankings(graph, model, decoupled) -> tuple:
    """(the training ranking, the inference one) of a case, computed once."""
    if (model, decoupled) not in _RANKINGS:
        _RANKINGS[model, decoupled] = (ranked(graph, model, decoupled),
                                       ranked(graph, model, decoupled, inference=True, epochs=50))
    return _RANKINGS[model, decoupled]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model, decoupled", [("gcn", False), ("gat", True)])
def test_every_candidate_is_priced_for_one_forward_pass(cora, model, decoupled):
    training, ranking = rankings(cora, model, decoupled)
    training = {e.strategy: e for e in training.ranked}
    assert ranking.inference and ranking.epochs == 1   # asked for 50 epochs: moot for one pass
    names = {e.strategy for e in ranking.ranked}
    assert {"partition rp", "partition contiguous", "offload rp", "offload contiguous"} < names
    assert ("tensor decoupled" if decoupled else "tensor") in names
    assert any(n.startswith("grid3d") for n in names) == (model == "gcn" and not decoupled)
    for e in ranking.ranked:
        train = training[e.strategy]
        assert 0 < e.epoch_s < train.epoch_s and e.compute_s < train.compute_s, e.strategy
        assert e.setup_s == train.setup_s and e.settings == train.settings
        assert sum(e.rank_bytes) < sum(train.rank_bytes), e.strategy
        assert e.phase_bytes.get("grad", 0) == 0                     # no gradients to all-reduce
        assert max(e.peak_bytes) <= max(train.peak_bytes), e.strategy
        if not e.strategy.startswith("offload"):                   # its peak: the training plan's (a bound)
            assert max(e.peak_bytes) < max(train.peak_bytes), e.strategy
    # sorted by the pass with its setup in full
    costs = [e.epoch_s + e.setup_s for e in ranking.ranked]
    assert costs == sorted(costs) and all(ranking.cost(e) == cost(e, 1) == e.epoch_s + e.setup_s
                                          for e in ranking.ranked)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_its_bytes_are_the_evaluation_pass_of_an_epoch(cora, model):
    """An epoch with the evaluation moves, in every phase and on every rank, the bytes of
    one without it plus those of the inference pass: the forward-only exchanges (halo),
    switches (layout) and all-gathers (share), and the hits' all-reduce (metrics)."""
    part = partition(cora, 3, "rp", seed=0, cache=False)
    options = dict(heads=HEADS)

    def each(estimate, *args, **kwargs):
        return [estimate(*args, GPU_RATES, GPU_NETWORK, evaluate=evaluate, inference=inference, **options, **kwargs)
                for evaluate, inference in ((True, False), (False, False), (True, True))]

    cases = {"partition": each(partition_model.estimate, cora, part, widths(cora), model),
             "tensor": each(tensor_model.estimate, cora, 3, widths(cora), model),
             "offload": each(offload_model.estimate, cora, part, widths(cora), model, budget=LIMIT)}
    for name, (epoch, without, one) in cases.items():
        assert set(one.rank_phase_bytes) == set(epoch.rank_phase_bytes), name
        for phase, per_rank in one.rank_phase_bytes.items():
            assert per_rank == [a - b for a, b in zip(epoch.rank_phase_bytes[phase],
                                                      without.rank_phase_bytes[phase])], f"{name} {phase}"
        assert one.phase_bytes["metrics"] == 3 * 12 and one.phase_bytes["grad"] == 0   # 3 hits on 3 ranks
    assert cases["partition"][2].phase_bytes["halo"] > 0 and cases["tensor"][2].phase_bytes["layout"] > 0
    if model == "gcn":   # both aggregations' inputs want gradients: 2 of an epoch's 6 exchanges
        assert 3 * cases["partition"][2].phase_bytes["halo"] == cases["partition"][0].phase_bytes["halo"]


@pytest.mark.timeout(60)
def test_a_pass_without_gradients_fits_where_a_training_step_does_not(cora):
    training, one = (ranked(cora, "gcn", memory_limit=2**25, partitioners=("contiguous",), inference=inference)
                     for inference in (False, True))
    assert "grid3d 1x2x1" in {d.name for d in training.dropped}
    assert "grid3d 1x2x1" in {e.strategy for e in one.ranked}


def test_a_graph_known_by_its_size_is_ranked_for_one_pass_too():
    graph = SizedGraph(50000, 800000)
    training, one = (rank_sized(graph, 4, "gcn", (64, 32, 7), GPU_RATES, GPU_NETWORK, inference=inference)
                     for inference in (False, True))
    assert one.inference and one.epochs == 1 and training.epochs == 200
    by_name = {e.strategy: e for e in training.ranked}
    assert {e.strategy for e in one.ranked} == set(by_name)
    assert all(e.epoch_s < by_name[e.strategy].epoch_s for e in one.ranked)


def test_grid3d_prices_the_evaluation_ops_alone():
    work = grid3d.Workload(20000, 300000, (64, 32, 32, 7), evaluate=True, dropout=True)
    one = grid3d.Workload(20000, 300000, (64, 32, 32, 7), dropout=True, inference=True)
    without = grid3d.Workload(20000, 300000, (64, 32, 32, 7), dropout=True)
    for grid in (Grid(1, 1, 1), Grid(2, 2, 1), Grid(1, 2, 4)):
        ops = grid3d.epoch_ops(one, grid)
        assert ops == grid3d.epoch_ops(work, grid)[len(grid3d.epoch_ops(without, grid)):]   # its tail
        assert not any(isinstance(op, grid3d.Dropout) for op in ops)
        assert grid3d.payload_bytes(one, grid) == grid3d.payload_bytes(work, grid) - grid3d.payload_bytes(without, grid)
        epoch, alone = (grid3d.predict(w, grid, GPU_RATES, GPU_NETWORK) for w in (work, one))
        assert alone.total < epoch.total and alone.compute < epoch.compute
        assert alone.communication < epoch.communication or grid.size == 1
        assert grid3d.peak_bytes(one, grid) < grid3d.peak_bytes(work, grid)


def test_the_loop_overhead_is_a_training_epochs_alone(cora):
    slow = replace(GPU_RATES, epoch_overhead=1.0)   # the optimizer, loss and loop's own work
    part = partition(cora, 2, "contiguous", cache=False)
    for overhead in (GPU_RATES, slow):
        one = partition_model.estimate(cora, part, widths(cora), "gcn", overhead, GPU_NETWORK, inference=True)
        assert one.epoch_s < 0.1
    assert partition_model.estimate(cora, part, widths(cora), "gcn", slow, GPU_NETWORK).epoch_s > 1.0


@pytest.mark.timeout(60)
def test_the_table_and_choice_speak_of_one_pass(cora):
    ranking = rankings(cora, "gcn", False)[1]
    lines = table(ranking, ranking.ranked)
    assert lines[0].startswith("ranked by predicted inference pass + setup, counted in full")
    assert "ms/pass" in lines[2] and "pass ms" in lines[2] and "epoch" not in " ".join(lines[:3])
    line = choice(ranking)
    assert "epoch" not in line and "fastest predicted pass" in line and "of its pass is" in line


# ---------------------------------------------------------------------------- against a run

MEASURED = [("partition", "gcn"), ("partition", "gat"), ("tensor", "gat")]


def _evaluations(rank, world, vector):
    """Each case's counters over one evaluation pass of the trainer (after its setup)."""
    graph = datasets.load("cora")
    out = {}
    for strategy, model in MEASURED:
        parallel = (PartitionParallel(layout("partition"), "cpu", assignment=vector) if strategy == "partition"
                    else TensorParallel(layout("tensor"), "cpu"))
        trainer = Trainer(Config.of(model=model, hidden=16, layers=2, epochs=1, seed=1,
                                    **taken({"model": model}, heads=HEADS)), graph, parallel)
        trainer.evaluate()
        out[strategy, model] = {phase: c["bytes"] for phase, c in parallel.take_counters()["phases"].items()}
    return out


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_inference_bytes_equal_a_measured_evaluation_pass(cora):
    """The trainer's evaluation forward on two gloo ranks counts, on each rank and phase, the
    bytes the inference estimate predicts: forward-only halo exchanges (partition), forward
    switches and all-gathers (tensor), the hits' all-reduce; no gradients."""
    part = partition(cora, 2, "rp", seed=0, cache=False)
    runs = run_ranks(_evaluations, 2, part.assignment, timeout=100)
    for strategy, model in MEASURED:
        if strategy == "partition":
            got = partition_model.estimate(cora, part, widths(cora), model, GPU_RATES, GPU_NETWORK, heads=HEADS,
                                           inference=True)
        else:
            got = tensor_model.estimate(cora, 2, widths(cora), model, GPU_RATES, GPU_NETWORK, heads=HEADS,
                                        inference=True)
        for rank, run in enumerate(runs):
            counted = run[strategy, model]
            assert "grad" not in counted and counted, (strategy, model)
            for phase, nbytes in counted.items():
                assert nbytes == got.rank_phase_bytes[phase][rank], (strategy, model, phase, rank)
            assert sum(counted.values()) == got.rank_bytes[rank]
        if strategy == "partition":
            ranking = rank_strategies(cora, 2, model, widths(cora), GPU_RATES, GPU_NETWORK, partitioners=("rp",),
                                      heads=HEADS, inference=True)
            candidate = next(e for e in ranking.ranked if e.strategy == "partition rp")
            assert candidate.rank_phase_bytes["halo"] == [run[strategy, model]["halo"] for run in runs]
