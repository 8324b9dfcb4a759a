"""Mini-batch training: APT's four strategies (gdp, nfp, snp, dnp)
equal to single-process mini-batch training on the same batches, on 1 to 4 ranks."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
import torch

from tests.dist import run_ranks
from tests.forked import run_cli
from tests.helpers import random_graph
from tests.parity import assert_same_run

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)


def graph():
    return random_graph(n=120, e=700, features=9, classes=4, directed=True, isolated=3)


def config(model, **fields) -> Config:
    extra = {"heads": 2} if model == "gat" else {}
    # 60 training nodes in batches of 13: 5 steps an epoch, 50 steps in 10 epochs.
    fields = {"epochs": 10, "batch_size": 13, **extra, **fields}
    return Config.of(dataset="random", model=model, seed=4, hidden=8, minibatch=True, fanouts="3,4", dropout=0.3,
                     **fields)


def _train(rank, world, runs):
    """Each (model, strategy, settings) of ``runs`` trained on this rank."""
    from gnnmesh.train.minibatch import MiniBatchTrainer
    out = []
    for model, strategy, fields in runs:
        parallel = {"strategy": strategy, "nproc": world} if strategy != "single" else {}
        trainer = MiniBatchTrainer(config(model, **parallel, **fields), graph())
        result = trainer.fit()
        out.append({"losses": [r.loss for r in result.history],
                    "accs": [(r.train_acc, r.val_acc, r.test_acc) for r in result.history],
                    "params": {n: v.detach().clone() for n, v in trainer.model.state_dict().items()},
                    "steps": sum(r.extra["steps"] for r in result.history),
                    "sampled": [r.extra["sampled_edges"] for r in result.history],
                    "extra": result.history[0].extra, "dry_run": trainer.dry_run,
                    "strategy": trainer.strategy.name, "held_rows": trainer.features.source.store.num_rows,
                    "whole_x": trainer.rank_data.x is not None, "describe": trainer.strategy.describe()})
    return out


@functools.lru_cache(maxsize=None)
def _single(model):
    """The single process's run of ``model``, once per module: every strategy, on every
    number of ranks, compares with it."""
    return _train(0, 1, [(model, "single", {})])[0]


def _singles(runs) -> list:
    return [_single(model) for model, _, _ in runs]


def _train_on_hosts(rank, world, hosts, runs):
    """``_train`` in a job of ``hosts`` machines (the ranks per host as torchrun sets them)."""
    os.environ["LOCAL_WORLD_SIZE"] = str(world // hosts)
    return _train(rank, world, runs)


MODELS = ["gcn", "sage", "gat", "gin"]
# APT's four strategies; snp and dnp partition vertices (rp: no extra needed), nfp and snp refuse gat.
STRATEGIES = {"gdp": {}, "nfp": {}, "snp": {"partitioner": "rp"}, "dnp": {"partitioner": "rp"}}
RUNS = [(m, s, f) for s, f in STRATEGIES.items() for m in MODELS if m != "gat" or s in ("gdp", "dnp")]


def runs_for(world: int) -> list:
    """One process runs everything; 2 ranks run gcn and sage with every strategy, gat with
    the two that take it, and gin with one strategy, a different one for each world size;
    3 and 4 ranks (slower to run) gcn with every strategy, the other models with one each."""
    if world == 1:
        return RUNS
    gin = list(STRATEGIES)[world % len(STRATEGIES)]
    if world == 2:
        return [r for r in RUNS if r[0] in ("gcn", "sage", "gat") or r[1] == gin]
    others = [[r for r in RUNS if r[0] == model] for model in ("sage", "gat", "gin")]
    return [r for r in RUNS if r[0] == "gcn"] + [pool[world % len(pool)] for pool in others]


def _check_against_single(runs, got, want, world):
    for (model, strategy, _), mine, ref in zip(runs, got[0], want):
        assert ref["steps"] == 50
        try:
            assert mine["strategy"] == strategy
            assert_same_run(mine, ref)
            assert mine["accs"] == ref["accs"]
            assert mine["sampled"] <= [world * s for s in ref["sampled"]]
        except AssertionError as err:
            raise AssertionError(f"{model} with {strategy} on {world} ranks: {err}") from None
    for rank in range(1, world):  # every rank ends with the same model
        for run in range(len(runs)):
            for name, value in got[0][run]["params"].items():
                assert torch.equal(got[rank][run]["params"][name], value)


@pytest.mark.timeout(620)
@pytest.mark.slow  # every route on 1-4 ranks; the fast suite checks the routes' counted bytes on 2 and 3
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_strategy_equals_single_process_minibatch(world):
    runs = runs_for(world)
    want = _singles(runs)
    got = run_ranks(_train, world, runs, timeout=600) if world > 1 else [_train(0, 1, runs)]
    _check_against_single(runs, got, want, world)


# Batches smaller than the job: the last batch of 60 training nodes in batches of 59 holds one
# seed, and batches of 1 leave every rank but one without a seed of its own.
SMALL_BATCHES = [(model, strategy, {**fields, "batch_size": size, "epochs": epochs})
                 for strategy, fields in STRATEGIES.items() for model in ("gcn",)
                 for size, epochs in ((59, 2), (1, 1))]


@pytest.mark.slow  # two and four ranks; the strategies' 2-rank parity stays in the fast suite
@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 4])
def test_batches_with_fewer_seeds_than_ranks_train_the_single_process_model(world):
    runs = SMALL_BATCHES if world == 2 else [(m, s, {**f, "batch_size": 3}) for m, s, f in SMALL_BATCHES[::2]]
    want = _train(0, 1, [(m, "single", {k: v for k, v in f.items() if k != "partitioner"}) for m, _, f in runs])
    got = run_ranks(_train, world, runs, timeout=280)
    for (model, strategy, fields), mine, ref in zip(runs, got[0], want):
        try:
            assert_same_run(mine, ref)
        except AssertionError as err:
            raise AssertionError(f"{strategy}, batches of {fields['batch_size']} on {world} ranks: {err}") from None


# Features spread over hosts: every strategy with gcn, and gat (attention) with dnp, sage (a
# self term beside the neighbours') with nfp.
HOST_RUNS = [("gcn", s, f) for s, f in STRATEGIES.items()] + [("gat", "dnp", STRATEGIES["dnp"]), ("sage", "nfp", {})]


@pytest.mark.timeout(620)
@pytest.mark.slow
@pytest.mark.parametrize("world, hosts", [(2, 2), (4, 2)])
def test_features_spread_over_hosts_train_the_single_process_model(world, hosts):
    want = _singles(HOST_RUNS)
    got = run_ranks(_train_on_hosts, world, hosts, HOST_RUNS, timeout=600)
    _check_against_single(HOST_RUNS, got, want, world)
    per_host = world // hosts
    for rank, runs in enumerate(got):
        for (model, strategy, _), run in zip(HOST_RUNS, runs):
            # Only the host's rows (every rank of a host the same ones), no whole feature matrix.
            assert not run["whole_x"] and 0 < run["held_rows"] < 120, (strategy, rank)
            assert run["held_rows"] == got[rank - rank % per_host][HOST_RUNS.index((model, strategy, _))]["held_rows"]
            assert "features spread over 2 hosts" in run["describe"]
    for run_index, (model, strategy, _) in enumerate(HOST_RUNS):  # the hosts' rows together are all rows
        assert sum(got[h * per_host][run_index]["held_rows"] for h in range(hosts)) == 120, strategy
        assert min(got[0][run_index]["extra"]["rank_remote_bytes"]) > 0 or strategy in ("snp", "dnp"), strategy
        assert max(got[0][run_index]["extra"]["rank_remote_bytes"]) == 0 or strategy != "snp", strategy


@pytest.mark.slow
def test_training_learns_on_a_real_graph(data_root):
    from gnnmesh.train.minibatch import MiniBatchTrainer
    cfg = Config.of(dataset="cora", data_root=str(data_root), model="sage", epochs=30, minibatch=True, fanouts="10,10",
                 batch_size=32)
    result = MiniBatchTrainer(cfg, datasets.load("cora", root=data_root)).fit()
    assert result.test_acc > 0.7  # full-graph SAGE reaches about 0.77


@pytest.mark.parametrize("fields, message", [
    ({"fanouts": "10,0"}, "'0' is neither a positive integer nor -1"),
    ({"fanouts": "10,x"}, "'x' is neither"),
    ({"fanouts": "-2,5"}, "'-2' is neither"),
    ({"fanouts": "10"}, "gives 1 hops for a 2-layer model"),
    ({"eval_fanouts": "5,5,5"}, "gives 3 hops"),
    ({"batch_size": 0}, "batch_size"),
    ({"strategy": "partition"}, "runs with --strategy single or gdp or nfp or snp or dnp or auto"),
    ({"strategy": "nfp", "model": "gat"}, "attention needs them all in one place; run gat or rgat with --strategy gdp or dnp"),
    ({"strategy": "snp", "model": "gat"}, "run gat or rgat with --strategy gdp or dnp"),
    ({"strategy": "gdp", "cache_memory": "lots"}, "cache_memory"),
    ({"strategy": "auto", "bandwidths": "load=fast"}, "'bandwidths': 'fast' is not a size"),
    ({"strategy": "auto", "bandwidths": "disk=1GB"}, "'disk=1GB' is not one of load=SIZE, cache=SIZE, net=SIZE, latency=TIME"),
    ({"strategy": "gdp", "partitioner": "gp"}, "applies only to --strategy partition or offload or snp"),
    ({"decoupled": True}, "decoupled"),
])
def test_bad_minibatch_settings_are_refused(fields, message):
    with pytest.raises(ConfigError, match=message):
        Config.of(minibatch=True, **fields).validate()


def test_minibatch_settings_need_minibatch():
    with pytest.raises(ConfigError, match="applies only with --minibatch"):
        Config.of(fanouts="5,5").validate()
    with pytest.raises(ConfigError, match="add --minibatch"):
        Config.of(strategy="gdp").validate()


def test_cli_refuses_a_batch_larger_than_the_training_set(data_root):
    out = run_cli("train", "--dataset", "cora", "--data-root", str(data_root),
                  "--minibatch", "--batch-size", "500", "--epochs", "1", timeout=300)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "batch_size" in lines[0] and "140" in lines[0], out.stderr


def test_a_resumed_run_continues_the_same_batches(tmp_path):
    from gnnmesh.train.minibatch import MiniBatchTrainer
    whole = MiniBatchTrainer(config("sage", epochs=4), graph()).fit()
    path = str(tmp_path / "run.pt")
    MiniBatchTrainer(config("sage", epochs=2, checkpoint=path), graph()).fit()
    resumed = MiniBatchTrainer(config("sage", epochs=4, checkpoint=path, resume=True), graph()).fit()
    assert [r.loss for r in resumed.history] == [r.loss for r in whole.history]


def _check_prediction(extra: dict, prediction) -> None:
    want = prediction.ranks
    assert extra["rank_graph_bytes"] == want["graph_bytes"]
    assert extra["rank_shuffle_bytes"] == want["shuffle_bytes"]
    assert extra["rank_load_bytes"] == want["load_bytes"]
    assert extra["rank_cache_bytes"] == want["cache_bytes"]
    assert (extra["cache_hits"], extra["cache_misses"]) == (sum(want["hits"]), sum(want["misses"]))


@pytest.mark.parametrize("world", [2, 3])
def test_counted_bytes_equal_the_dry_runs_prediction(world):
    # 9 features: 36-byte rows, so 400 bytes cache 11 of them (more of nfp's narrower rows).
    runs = [("sage", s, {**f, "cache_memory": "400B", "epochs": 1}) for s, f in STRATEGIES.items()]
    links = {"load": 1e9, "cache": 4e9, "net": 1e8, "latency": 1e-3}  # given: the times follow from the bytes
    runs.append(("gcn", "auto", {"partitioner": "rp", "cache_memory": "400B", "epochs": 1,
                                 "bandwidths": "load=1GB,cache=4GB,net=100MB,latency=1ms"}))
    got = run_ranks(_train, world, runs, timeout=280)[0]
    for (model, strategy, _), run in zip(runs, got):
        try:
            if strategy == "auto":
                assert [p.name for p in run["dry_run"]] == ["gdp", "nfp", "snp", "dnp"]
                best = min(run["dry_run"], key=lambda p: p.time)
                assert run["strategy"] == best.name and best.time <= min(p.time for p in run["dry_run"])
                assert run["extra"]["dry_run"][0]["strategy"] == "gdp"  # the table is in the metrics
                _check_prediction(run["extra"], best)
                for p in run["dry_run"]:
                    r = p.ranks
                    assert p.seconds == pytest.approx([
                        r["load_bytes"][q] / links["load"] + r["cache_bytes"][q] / links["cache"] + (r["graph_bytes"][q] + r["shuffle_bytes"][q]) / links["net"]
                        + r["calls"][q] * links["latency"] for q in range(world)])
                    assert p.time == max(p.seconds)
            else:
                _check_prediction(run["extra"], run["dry_run"][0])
            assert run["extra"]["cache_hits"] > 0 and run["extra"]["cache_misses"] > 0
            if strategy in ("nfp", "snp", "dnp"):  # they exchange, and the counters see it
                assert min(run["extra"]["rank_shuffle_bytes"]) > 0 and min(run["extra"]["rank_graph_bytes"]) > 0
        except AssertionError as err:
            raise AssertionError(f"{strategy} on {world} ranks: {err}") from None


@pytest.mark.slow
@pytest.mark.parametrize("world, hosts", [(4, 2)])
def test_remote_feature_reads_equal_the_dry_runs_prediction(world, hosts):
    runs = [("sage", s, {**f, "cache_memory": "400B", "epochs": 1}) for s, f in STRATEGIES.items()]
    got = run_ranks(_train_on_hosts, world, hosts, runs, timeout=280)[0]
    for (model, strategy, _), run in zip(runs, got):
        try:
            want = run["dry_run"][0].ranks
            _check_prediction(run["extra"], run["dry_run"][0])
            assert run["extra"]["rank_remote_bytes"] == want["remote_bytes"]
            assert run["extra"]["rank_features_bytes"] == want["features_bytes"]
            if strategy == "snp":  # it reads the rows of its own partition, homed on its own host
                assert sum(want["remote_bytes"]) == 0
            elif strategy in ("gdp", "nfp"):  # any row: half of them live on the other host
                assert sum(want["remote_bytes"]) > 0 and sum(want["features_bytes"]) > 0
        except AssertionError as err:
            raise AssertionError(f"{strategy} on {world} ranks, {hosts} hosts: {err}") from None


def test_a_cache_smaller_than_one_row_is_refused():
    from gnnmesh.train.minibatch import MiniBatchTrainer
    with pytest.raises(ConfigError, match="cache_memory.*holds no feature row"):
        MiniBatchTrainer(config("gcn", strategy="gdp", cache_memory="20B"), graph())


def test_each_strategy_caches_the_rows_it_reads():
    # APT §4.3: gdp and nfp the globally hottest rows, snp its partition's, dnp its partition's
    # and their in-neighbours' (the sources its rows read); ties go to the lower id.
    from gnnmesh.parallel.minibatch import ROUTES
    from gnnmesh.parallel.minibatch.dryrun import cache_rows
    from gnnmesh.graph import Adjacency
    # 6 vertices; rank 0 owns 0-2, rank 1 owns 3-5; vertex 1 reads vertex 4 (an in-edge 4 -> 1).
    op = Adjacency(torch.tensor([0, 1, 3, 4, 5, 6, 7]), torch.tensor([0, 1, 4, 2, 3, 4, 5]), None, (6, 6))
    owner = np.array([0, 0, 0, 1, 1, 1])
    counts = np.array([1, 2, 0, 9, 8, 7])
    route = {name: ROUTES[name](2, owner) for name in ROUTES}
    assert cache_rows(route["gdp"], counts, 2, 0, op).tolist() == [3, 4]
    assert cache_rows(route["nfp"], counts, 3, 1, op).tolist() == [3, 4, 5]
    assert cache_rows(route["snp"], counts, 2, 0, op).tolist() == [0, 1]
    assert cache_rows(route["dnp"], counts, 2, 0, op).tolist() == [1, 4]
    assert cache_rows(route["dnp"], counts, 2, 1, op).tolist() == [3, 4]
    assert cache_rows(route["snp"], np.zeros(6, dtype=int), 2, 1, op).tolist() == [3, 4]  # ties: lower ids
    assert cache_rows(route["gdp"], counts, 0, 0, op).tolist() == []
