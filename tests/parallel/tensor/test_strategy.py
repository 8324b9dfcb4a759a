"""Tensor parallelism (naive and decoupled) equals the single-process run (real gloo ranks)."""

import pytest

from gnnmesh.config import Config
from gnnmesh.parallel.tensor.strategy import TensorParallel

from tests.dist import run_ranks, run_ranks_once
from tests.helpers import layout, random_graph, taken
from tests.parity import assert_same_run, train

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)

EPOCHS = 5  # several steps of Adam: parameters and moments carried from epoch to epoch
NAIVE = ["gcn", "sage", "gin", "gat"]
DECOUPLED = ["gcn", "sage", "gat"]  # their decoupled forms
# (chunk rows, pipelined): one chunk, several chunks overlapped; without overlap for two models
SCHEDULES = [(None, True), (5, True)]
SERIAL = (8, False)


def make_graph():
    # 37 nodes (not divisible by 2, 3 or 4), directed, self-loops, two isolated nodes
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)


def config(model, decoupled=False, **extra):
    fields = dict(model=model, decoupled=decoupled)
    settings = dict(fields, epochs=EPOCHS, seed=1, hidden=8, layers=2, **taken(fields, k=3))
    return Config.of(**{**settings, **extra})


def _rank_run(rank, world):
    """On 1 and 2 ranks every model under every schedule; on more (slower to run) each model
    under one schedule, the schedules alternating."""
    graph = make_graph()
    models = [(mode, model) for mode, names in (("naive", NAIVE), ("decoupled", DECOUPLED)) for model in names]
    if world > 2:
        cases = [(mode, model, SCHEDULES[(i + world) % len(SCHEDULES)])
                 for i, (mode, model) in enumerate(models)]
    else:
        cases = [(mode, model, schedule) for schedule in SCHEDULES for mode, model in models]
    cases += [("naive", "gcn", SERIAL), ("decoupled", "gat", SERIAL)]
    runs = {}
    for mode, model, (chunk, pipeline) in cases:
        decoupled = mode == "decoupled"
        strategy = TensorParallel(layout("tensor"), "cpu", chunk_size=chunk, pipeline=pipeline)
        runs[mode, model, chunk, pipeline] = train(graph, config(model, decoupled=decoupled), strategy)
    return runs


@pytest.fixture(scope="module")
def reference():
    graph = make_graph()
    ref = {("naive", m): train(graph, config(m)) for m in NAIVE}
    ref.update({("decoupled", m): train(graph, config(m, decoupled=True)) for m in DECOUPLED})
    return ref


@pytest.mark.timeout(400)
@pytest.mark.parametrize("world", [1, 2, pytest.param(3, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)])
def test_every_model_and_schedule_matches_single_process(reference, world):
    results = run_ranks(_rank_run, world, timeout=360)
    for rank, got in enumerate(results):
        for (mode, model, chunk, pipeline), run in got.items():
            try:
                assert_same_run(run, reference[mode, model])
            except AssertionError as err:
                raise AssertionError(f"{mode}/{model}, chunk {chunk}, pipeline {pipeline}, "
                                     f"rank {rank} of {world}: {err}") from None


TRAFFIC_CHUNKS = [None, 4]  # one chunk, and chunks of 4 rows


def _rank_traffic_all(rank, world):
    """Every case under every chunk size in one launch (each test checks one size's)."""
    return {(chunk, decoupled, k): _rank_traffic(rank, world, decoupled, k, chunk)
            for chunk in TRAFFIC_CHUNKS for decoupled, k in ((False, 3), (True, 2), (True, 5))}


def _rank_traffic(rank, world, decoupled, k, chunk):
    graph = make_graph()
    # two epochs, the second one evaluated (eval_every > epochs: only the last one is)
    cfg = config("gcn", decoupled=decoupled, epochs=2, eval_every=5, dropout=0.0, **({"k": k} if decoupled else {}))
    strategy = TensorParallel(layout("tensor"), "cpu", chunk_size=chunk)
    extra = train(graph, cfg, strategy)["extra"]
    return extra, {"naive": strategy.predicted_layout_bytes([6, 3], backward_widths=[3], evaluate=False),
                   "naive_eval": strategy.predicted_layout_bytes([6, 3], backward_widths=[3]),
                   "decoupled": strategy.predicted_layout_bytes([3], evaluate=False),
                   "decoupled_eval": strategy.predicted_layout_bytes([3])}


@pytest.mark.timeout(400)
@pytest.mark.slow  # the planner's tests count the same bytes (tests/planner/test_estimates.py)
@pytest.mark.parametrize("chunk", TRAFFIC_CHUNKS)
def test_layout_bytes_and_rounds_equal_the_prediction(chunk):
    """GCN 6 -> 8 -> 3 naive: layer 1 aggregates the features (width 6, forward only), layer 2
    aggregates h W (width 3, forward and backward). Decoupled: the 3-wide MLP output is split
    once and gathered once per pass, whatever k is. Chunking moves the same bytes."""
    for world in (3, 4):
        runs = run_ranks_once(_rank_traffic_all, world, timeout=360)[0]
        naive, predicted = runs[chunk, False, 3]
        assert [e["layout_bytes"] for e in naive] == [predicted["naive"], predicted["naive_eval"]]
        assert [e["layout_rounds"] for e in naive] == [2 + 2 + 2, 2 + 2 + 2 + 4]
        for k in (2, 5):
            dec, predicted = runs[chunk, True, k]
            assert [e["layout_bytes"] for e in dec] == [predicted["decoupled"], predicted["decoupled_eval"]]
            assert [e["layout_rounds"] for e in dec] == [4, 6]  # 4 per training step, whatever k
            if chunk:
                assert dec[0]["layout_messages"] > naive[0]["layout_messages"] / 3
