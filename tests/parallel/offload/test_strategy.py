"""Out-of-core training (--strategy offload) equals the single-process run, and its counters
equal the plan's predictions, on 1 to 4 real ranks."""

from __future__ import annotations

import functools
import itertools

import pytest

from tests.dist import run_ranks
from tests.helpers import model_fields, random_graph, taken
from tests.parity import assert_same_run, train

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)

MODELS = ["gcn", "sage", "gin", "gat", "decoupled-gcn", "decoupled-sage", "decoupled-gat"]
CHUNKS = [1, 3, 8]
# Every dedup mode, reorganized and not, meets every model and K across the runs.
MODES = list(itertools.product(["none", "inter", "intra", "both"], [True, False]))
# Enough epochs for Adam's moments, and so every parameter, to evolve from the counts of
# several steps: a difference of one step's gradient shows in the next epoch's loss.
EPOCHS = 5


def graph():
    return random_graph(n=61, e=260, features=7, classes=3, directed=True, isolated=3)


def wide_graph():
    """Features wider than every first layer's linear map: each first layer narrows."""
    return random_graph(n=61, e=260, features=40, classes=3, directed=True, isolated=3)


def runs(world: int) -> list:
    """(model, K, dedup, reorganize) for a world size. On 1 rank every model at every K, the
    modes rotating so that each (mode, reorganize) pair meets several models and every K; on
    2 ranks every model at two of the Ks, on 3 and 4 (slower to run) at one, K and the modes
    rotating."""
    pairs = list(itertools.product(MODELS, CHUNKS))
    if world > 1:
        pairs = [(model, CHUNKS[(i + world + turn) % len(CHUNKS)]) for i, model in enumerate(MODELS)
                 for turn in range(2 if world == 2 else 1)]
    return [(model, k, *MODES[(i + 3 * world) % len(MODES)]) for i, (model, k) in enumerate(pairs)]


def config(model, **fields) -> Config:
    extra = {"heads": 2} if model.endswith("gat") else {}
    return Config.of(dataset="random", epochs=EPOCHS, seed=3, hidden=8, **model_fields(model),
                     **taken(model_fields(model), k=3, **extra), **fields)


def offload_config(model, k, dedup, reorganize, world, intermediates="auto", overlap=None) -> Config:
    partition = {"partitioner": "rp"} if world > 1 else {}
    return config(model, strategy="offload", nproc=world, chunks=str(k), dedup=dedup, reorganize=reorganize,
                  intermediates=intermediates, overlap=overlap, **partition)


def _rank_runs(rank, world, cases, make=graph, overlap=None):
    from gnnmesh.parallel.offload.plan import epoch_traffic
    from gnnmesh.train import Trainer
    out = []
    for model, k, dedup, reorganize, intermediates in cases:
        trainer = Trainer(offload_config(model, k, dedup, reorganize, world, intermediates, overlap), make())
        result = trainer.fit()
        strategy = trainer.strategy
        assert strategy.pipeline.overlap.ahead is bool(overlap)
        per_pass = epoch_traffic(strategy.pipeline.plan, strategy.stages, 1, 1)
        out.append({"losses": [r.loss for r in result.history], "tables": [s.output for s in strategy.stages],
                    "params": {n: v.detach().clone() for n, v in trainer.model.state_dict().items()},
                    "extra": [r.extra for r in result.history],
                    "predicted": {"load": per_pass.total("load"), "store": per_pass.total("store"),
                                  "peer": per_pass.total("peer"), "kept": per_pass.total("kept"),
                                  "rank_peer": per_pass.peer}})
    return out


@functools.lru_cache(maxsize=None)
def _reference(model, make):
    """The single process's run, once per model and graph (every case compares with it)."""
    return train(make(), config(model))


def _check(got, model, make=graph):
    want = _reference(model, make)
    assert_same_run(got, want)
    for extra in got["extra"]:  # every epoch trains and evaluates: one pass of each
        assert extra["offload_load_bytes"] == got["predicted"]["load"]
        assert extra["offload_store_bytes"] == got["predicted"]["store"]
        assert extra["offload_bytes"] == got["predicted"]["peer"]
        assert extra["rank_offload_bytes"] == got["predicted"]["rank_peer"]  # each rank's, not only the sum
        assert extra["offload_kept_bytes"] == got["predicted"]["kept"]
        assert extra["offload_load_bytes"] <= extra["offload_baseline_load_bytes"]


@pytest.mark.timeout(920)
@pytest.mark.parametrize("world", [pytest.param(w, marks=pytest.mark.slow) for w in (1, 2, 3, 4)])
def test_offload_equals_single_process(world):
    cases = [(m, k, d, r, "auto") for m, k, d, r in runs(world)]
    if world == 1:
        results = _rank_runs(0, 1, cases)
    else:
        results = run_ranks(_rank_runs, world, cases, timeout=900)[0]
    for (model, k, dedup, reorganize, _), got in zip(cases, results):
        try:
            _check(got, model)
        except AssertionError as err:
            raise AssertionError(f"{model}, K={k}, dedup {dedup}, reorganize {reorganize}: {err}") from None


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_overlapped_transfers_equal_the_single_process(world):
    """With --overlap, every batch fetches its loads a batch ahead and its results go back a
    batch behind (on the CPU in line, in the order CUDA's copy streams run them): the same run
    as one process, every model, and the bytes the plan predicts (overlap moves none more)."""
    cases = [(model, CHUNKS[1 + i % 2], *MODES[(i + world) % len(MODES)], how)
             for i, model in enumerate(MODELS)
             for how in (("auto", "recompute") if model in ("gcn", "sage", "gin") else ("auto",))]
    if world == 1:
        results = _rank_runs(0, 1, cases, graph, True)
    else:
        results = run_ranks(_rank_runs, world, cases, graph, True, timeout=270)[0]
    for (model, k, dedup, reorganize, how), got in zip(cases, results):
        try:
            _check(got, model)
        except AssertionError as err:
            raise AssertionError(f"{model} ({how}), K={k}, dedup {dedup}, reorganize {reorganize}: {err}") from None


@pytest.mark.parametrize("model", ["gcn", pytest.param("sage", marks=pytest.mark.slow),
                                   pytest.param("gin", marks=pytest.mark.slow)])
def test_recomputing_equals_caching(model):
    cases = [(model, 3, "both", True, how) for how in ("recompute", "cache")]
    for got in _rank_runs(0, 1, cases):
        _check(got, model)


@pytest.mark.parametrize("model", ["gcn", "sage", "gin", "gat"])
def test_a_narrowing_layer_loads_its_projected_rows(model):
    """A first layer whose linear map narrows the features runs as two stages: the map row by
    row, then the rest on the projected rows, which chunks load: the same run as one process,
    with recomputed and cached aggregates, and the counters as predicted."""
    how = ["recompute", "cache"] if model != "gat" else ["recompute"]
    cases = [(model, 3, "both", True, h) for h in how]
    for got in _rank_runs(0, 1, cases, wide_graph):
        assert got["tables"][0] == "h0.projected", got["tables"]
        _check(got, model, wide_graph)


def test_cache_is_refused_where_layers_recompute():
    from gnnmesh.train import Trainer
    for model in ("gat", "decoupled-gcn"):
        with pytest.raises(ConfigError, match="intermediates"):
            Trainer(offload_config(model, 2, "both", True, 1, "cache"), graph())
