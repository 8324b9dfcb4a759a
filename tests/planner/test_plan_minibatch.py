"""The mini-batch strategies in ``gnnmesh plan --allow-sampling`` (``gnnmesh.planner.minibatch``):
the dry run of every rank in one process."""

from __future__ import annotations

import pytest
from tests.dist import run_ranks
from tests.helpers import random_graph

from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.partition import partition
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
from gnnmesh.planner.minibatch import links, rank_routes
from gnnmesh.planner.trace import build

SEED, FANOUTS, BATCH = 4, "3,4", 13


def graph():
    return random_graph(n=120, e=700, features=9, classes=4, directed=True, isolated=3)


def _dry_run(rank, world):
    from gnnmesh.train.minibatch import MiniBatchTrainer
    config = Config.of(dataset="random", model="sage", seed=SEED, hidden=8, minibatch=True, fanouts=FANOUTS,
                    batch_size=BATCH, strategy="auto", nproc=world, partitioner="rp", epochs=1, cache_memory="400B")
    return MiniBatchTrainer(config, graph()).dry_run


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_the_plans_counts_are_a_jobs_dry_run(world):
    """Every route's per-rank bytes and calls equal what the job's own dry run counts (which
    the run's counters equal: tests/parallel/minibatch/test_strategy.py)."""
    job = {p.name: p for p in run_ranks(_dry_run, world, timeout=280)[0]}
    g = graph()
    owner = partition(g, world, "rp", epsilon=0.01, seed=SEED, cache=False).assignment
    net = build((g.num_features, 8, g.num_classes), "sage")
    planned = rank_routes(g, world, net, GPU_RATES, GPU_NETWORK, fanouts=FANOUTS, batch_size=BATCH, owner=owner,
                          seed=SEED, cache_bytes=400)
    assert all(sum(p.ranks["hits"]) > 0 for p in planned)   # 9 features: 36-byte rows, 11 of them cached
    assert sorted(p.name for p in planned) == sorted(job) == ["dnp", "gdp", "nfp", "snp"]
    for p in planned:
        assert p.ranks == job[p.name].ranks, p.name
    times = [p.time for p in planned]
    assert times == sorted(times)
    bandwidths = links(GPU_RATES, GPU_NETWORK, world, None)
    r = planned[0].ranks
    assert planned[0].seconds == pytest.approx([
        r["load_bytes"][q] / bandwidths["load"] + r["cache_bytes"][q] / bandwidths["cache"]
        + (r["graph_bytes"][q] + r["shuffle_bytes"][q]) / bandwidths["net"] + r["calls"][q] * bandwidths["latency"]
        for q in range(world)])


def test_a_nodes_ranks_share_its_memory_reads():
    assert links(GPU_RATES, GPU_NETWORK, 8, 4)["load"] == GPU_NETWORK.gather_bw / 4
    assert links(GPU_RATES, GPU_NETWORK, 2, None)["load"] == GPU_NETWORK.gather_bw / 2


def test_attention_and_a_missing_partition_leave_routes_out():
    g = graph()
    net = build((g.num_features, 8, g.num_classes), "gat", heads=2)
    names = [p.name for p in rank_routes(g, 2, net, GPU_RATES, GPU_NETWORK, fanouts="3,4", attention=True)]
    assert sorted(names) == ["gdp"]   # nfp and snp split a row's sources; dnp needs the partition


@pytest.mark.timeout(120)
def test_plan_ranks_the_minibatch_strategies_apart(capsys):
    code = main(["plan", "--dataset", "cora", "--nproc", "2", "--allow-sampling", "--partitioner", "rp",
                 "--fanouts", "5,5", "--batch-size", "64"])
    out, err = capsys.readouterr()
    assert code == 0, err
    full, sampled = out.split("mini-batch strategies (--allow-sampling)")
    assert "choice: " in full and "partition rp" in full and "gdp" not in full
    assert "fanouts 5,5, 64 seeds per batch; snp and dnp on the rp partition" in sampled
    assert all(f" {name} " in sampled for name in ("gdp", "nfp", "snp", "dnp"))
    assert sampled.splitlines()[-1].startswith("mini-batch choice: ")


@pytest.mark.parametrize("flags, named", [
    (["--nodes", "100", "--edges", "400", "--allow-sampling"], "--dataset"),
    (["--dataset", "cora", "--fanouts", "5,5"], "--allow-sampling"),
    (["--dataset", "cora", "--cache-memory", "1MiB"], "--allow-sampling"),
    (["--dataset", "cora", "--allow-sampling", "--cache-memory", "lots"], "cache_memory"),
    (["--dataset", "cora", "--allow-sampling", "--fanouts", "5"], "fanouts"),
    (["--dataset", "cora", "--allow-sampling", "--decoupled"], "decoupled"),
    (["--strategy", "grid3d", "--dataset", "cora", "--allow-sampling"], "--strategy all"),
])
def test_bad_sampling_flags_exit_2_with_one_line(capsys, flags, named):
    assert main(["plan", "--nproc", "2", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gnnmesh: error:") and named in err[0], err
