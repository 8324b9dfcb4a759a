"""Tensor parallelism with the vertex data in the host store (--strategy tensor --host-store)
equals the single-process run, and its counters equal the plan's predictions, on 1 to 4
real ranks."""

from __future__ import annotations

import functools
import itertools

import pytest

from tests.dist import run_ranks
from tests.helpers import model_fields, random_graph, taken
from tests.parity import assert_same_run, train

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.parallel.offload.plan import RESIDENT

MODELS = ["decoupled-gcn", "decoupled-sage"]
CHUNKS = [1, 3, 8]
MODES = list(itertools.product(["none", "intra", "both"], [True, False]))
# a budget the transform meets in several row chunks: 48 KiB beside what any plan holds
SMALL = f"{(RESIDENT >> 10) + 48}KiB"
EPOCHS = 5  # several steps of Adam: parameters and moments carried from epoch to epoch


def graph():
    return random_graph(n=61, e=260, features=64, classes=3, directed=True, isolated=3)


def config(model, **fields) -> Config:
    return Config.of(dataset="random", epochs=EPOCHS, seed=3, hidden=8, **model_fields(model),
                     **taken(model_fields(model), k=3), **fields)


@functools.lru_cache(maxsize=None)
def _reference(model):
    """The single process's run, once per model (every case and world compares with it)."""
    return train(graph(), config(model))


def cases(world: int) -> list:
    """(model, K, dedup, reorganize, budget): every model at every K, the dedup modes rotating,
    every other case on a budget small enough for several row chunks."""
    out = []
    for i, (model, k) in enumerate(itertools.product(MODELS, CHUNKS)):
        dedup, reorganize = MODES[(i + world) % len(MODES)]
        out.append((model, k, dedup, reorganize, SMALL if k > 1 and (i + world) % 2 else None))
    return out


def _rank_runs(rank, world, runs):
    from gnnmesh.train import Trainer
    out = []
    for model, k, dedup, reorganize, budget in runs:
        memory = {"device_memory": budget} if budget else {}
        trainer = Trainer(config(model, strategy="tensor", nproc=world, host_store="ram", chunks=str(k),
                                 dedup=dedup, reorganize=reorganize, **memory), graph())
        result = trainer.fit()
        traffic = trainer.strategy.pass_traffic(dedup)
        out.append({"losses": [r.loss for r in result.history],
                    "params": {n: v.detach().clone() for n, v in trainer.model.state_dict().items()},
                    "extra": [r.extra for r in result.history],
                    "predicted": {kind: sum(both) for kind, both in traffic.items()}})
    return out


@pytest.mark.timeout(620)
@pytest.mark.parametrize("world", [1] + [pytest.param(w, marks=pytest.mark.slow) for w in (2, 3, 4)])
def test_tensor_host_store_equals_single_process(world):
    runs = cases(world)
    results = _rank_runs(0, 1, runs) if world == 1 else run_ranks(_rank_runs, world, runs, timeout=600)[0]
    for (model, k, dedup, reorganize, budget), got in zip(runs, results):
        where = f"{model}, K={k}, dedup {dedup}, reorganize {reorganize}, budget {budget}"
        try:
            assert_same_run(got, _reference(model))
            for extra in got["extra"]:  # every epoch trains and evaluates: one pass of each
                assert extra["offload_load_bytes"] == got["predicted"]["load"]
                assert extra["offload_store_bytes"] == got["predicted"]["store"]
                assert extra["offload_load_bytes"] <= extra["offload_baseline_load_bytes"]
                assert extra["chunks"] == k and (extra["row_chunks"] > 1) == (budget is not None)
                assert extra["layout_bytes"] > 0 or world == 1
        except AssertionError as err:
            raise AssertionError(f"{where}: {err}") from None


def test_models_without_column_propagation_are_refused():
    from gnnmesh.models import build_model
    from gnnmesh.parallel.tensor.host_store import TensorOffload
    for model in ("gcn", "decoupled-gat"):
        with pytest.raises(ConfigError, match="decoupled models without attention"):
            config(model, strategy="tensor", host_store="ram").validate()
    # A model built by hand is refused by the strategy itself.
    strategy = TensorOffload.__new__(TensorOffload)
    with pytest.raises(ConfigError, match="decoupled models without attention"):
        strategy.prepare(build_model("gcn", 7, 3))


def test_each_tensor_engine_refuses_the_others_settings():
    with pytest.raises(ConfigError, match="only with --host-store"):
        config("decoupled-gcn", strategy="tensor", device_memory="1GiB").validate()
    with pytest.raises(ConfigError, match="does not apply with --host-store"):
        config("decoupled-gcn", strategy="tensor", host_store="ram", chunk_size=8).validate()
    resolved = config("decoupled-gcn", strategy="tensor").resolved()
    assert resolved.host_tier.host_store is None and resolved.host_tier.device_memory is None and resolved.tensor.pipeline is True
    resolved = config("decoupled-gcn", strategy="tensor", host_store="ram").resolved()
    assert resolved.host_tier.device_memory == "1GiB" and resolved.tensor.pipeline is None and resolved.host_tier.chunks == "auto"
