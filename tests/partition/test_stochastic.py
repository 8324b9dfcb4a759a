"""Stochastic hypergraph partitioning ('shp'): sampled column nets, their merging, the
Hoeffding count, net weights reaching mt-KaHyPar, held-out batch volume against 'hp' on real
graphs, the store and the command."""

from __future__ import annotations

import functools
import importlib
import math

import numpy as np
import pytest
from scipy import stats

from gnnmesh import Adjacency, ConfigError, datasets
from gnnmesh.partition import batch_volumes, hoeffding_nets, partition, stochastic_partition
from gnnmesh.partition import methods, stochastic
from gnnmesh.partition.stochastic import batch_nets, concat_nets, merge_nets, stochastic_hypergraph
from gnnmesh.sampling import NeighborSampler
from gnnmesh.view import OPERATORS

try:
    importlib.import_module("mtkahypar")
    HAVE_MTKAHYPAR = True
except ImportError:
    HAVE_MTKAHYPAR = False
needs_mtkahypar = pytest.mark.skipif(not HAVE_MTKAHYPAR, reason="needs mtkahypar (gnnmesh[partitioners])")

RMAT = "rmat:nodes=300,edges=2000,features=0"


def tiny() -> Adjacency:
    """Rows are destinations: 0 reads 1 and 2, 1 reads 2, 3 reads 0."""
    return Adjacency.from_coo([0, 0, 1, 3], [1, 2, 2, 0], (4, 4))


def as_lists(starts, pins) -> list:
    return [pins[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])]


def weighted(starts, pins, weights) -> dict:
    return {tuple(net): int(w) for net, w in zip(as_lists(starts, pins), weights)}


# -- nets --------------------------------------------------------------------------------------
def test_block_nets_are_column_nets_in_global_ids():
    sample = NeighborSampler(tiny(), [-1, -1], seed=0).sample(np.array([3]), 0, 0)
    # hop 1: 3 reads 0; hop 2 (destinations 3, 0): 3 reads 0, 0 reads 1 and 2. Column 3's net
    # is {3} alone in both blocks: never cut, left out.
    assert [as_lists(*stochastic.block_nets(b, 4)) for b in sample.blocks] == [[[0, 3]], [[0, 3], [0, 1], [0, 2]]]


def test_identical_nets_of_two_batches_merge_with_weight_two():
    sampler = NeighborSampler(tiny(), [-1], seed=0)
    first, second, third = (batch_nets(sampler.sample(np.array(seeds), 0, step), 4)
                            for step, seeds in enumerate([[0], [0], [1]]))
    assert as_lists(*first) == as_lists(*second) == [[0, 1], [0, 2]]
    starts, pins = concat_nets([first, second, third])
    merged = merge_nets(starts, pins, np.ones(starts.shape[0] - 1, dtype=np.int64))
    assert weighted(*merged) == {(0, 1): 2, (0, 2): 2, (1, 2): 1}


def test_merge_sums_weights_across_sizes():
    nets = [[0, 1, 2], [3, 4], [0, 1, 2], [3, 4], [1, 5], [0, 1, 2]]
    starts = np.concatenate([[0], np.cumsum([len(n) for n in nets])])
    merged = merge_nets(starts, np.concatenate(nets), np.array([1, 2, 3, 4, 5, 6]))
    assert weighted(*merged) == {(0, 1, 2): 10, (3, 4): 6, (1, 5): 5}


def test_every_hop_adds_its_nets():
    """A batch's hops are one SpMM each: the net {0, 3} of both blocks counts twice."""
    sampler = NeighborSampler(tiny(), [-1, -1], seed=0)
    starts, pins = batch_nets(sampler.sample(np.array([3]), 0, 0), 4)
    merged = merge_nets(starts, pins, np.ones(starts.shape[0] - 1, dtype=np.int64))
    assert weighted(*merged) == {(0, 3): 2, (0, 1): 1, (0, 2): 1}


def test_batch_volume_is_connectivity_minus_one_of_each_block():
    sampler = NeighborSampler(tiny(), [-1, -1], seed=0)
    sample = sampler.sample(np.array([3]), 0, 0)
    owner = np.array([0, 1, 1, 2])
    # block 1: net {0, 3} spans 2 parts; block 2: {0, 3} 2, {0, 1} 2, {0, 2} 2 -> 1 + 3
    assert [stochastic.block_volume(b, owner, 3) for b in sample.blocks] == [1, 3]


# -- how many batches --------------------------------------------------------------------------
@pytest.mark.parametrize("parts, theta, delta", [(3, 0.1, 0.5), (9, 0.1, 0.5), (27, 0.1, 0.5), (16, 0.05, 0.1)])
def test_hoeffding_count_is_the_formula(parts, theta, delta):
    assert hoeffding_nets(parts, theta, delta) == math.ceil((parts - 1) ** 2 * math.log(2 / delta) / (2 * theta ** 2))


def test_hoeffding_count_values():
    assert (hoeffding_nets(3), hoeffding_nets(9), hoeffding_nets(27)) == (278, 4437, 46857)


def test_draw_stops_at_the_hoeffding_count_or_the_epoch(monkeypatch):
    graph = datasets.load(RMAT)
    op, pool = OPERATORS["gcn"](graph.adj), np.arange(graph.num_nodes)
    alone = stochastic_hypergraph(op, 9, [3, 3], 16, pool, 0.1, 0.5, seed=0, min_batches=1)
    assert alone.stop == "hoeffding" and alone.nets >= alone.needed == 4437 and alone.batches > 1
    assert alone.weights.sum() == alone.sampled_nets  # merging keeps every sampled net's count
    monkeypatch.setattr(stochastic, "MAX_BATCHES", alone.batches - 1)
    fewer = stochastic_hypergraph(op, 9, [3, 3], 16, pool, 0.1, 0.5, seed=0, min_batches=1)
    assert fewer.stop == "max batches" and fewer.nets < fewer.needed
    monkeypatch.undo()
    epoch = stochastic_hypergraph(op, 3, [3, 3], 16, pool, 0.1, 0.5, seed=0)  # 278 nets: one epoch binds
    assert epoch.stop == "epoch" and (epoch.batches, epoch.epochs) == (math.ceil(300 / 16), 1)


# -- mt-KaHyPar --------------------------------------------------------------------------------
@needs_mtkahypar
def test_net_weights_change_mtkahypars_optimum():
    """Three heavy pairs across two light triangles: unit weights cut the pairs, their
    weights keep two of them whole."""
    nets = [[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [3, 5], [0, 3], [1, 4], [2, 5]]
    starts = np.concatenate([[0], np.cumsum([len(n) for n in nets])])
    pins = np.concatenate(nets)

    def cut_pairs(net_weights):
        a = methods.run_mtkahypar(6, starts, pins, np.ones(6, np.int64), 2, 0.01, "default", 1, 0,
                                  net_weights=net_weights)
        return int(sum(a[i] != a[i + 3] for i in range(3)))

    assert cut_pairs(None) == 3
    assert cut_pairs(np.array([1] * 6 + [10] * 3)) == 1


@needs_mtkahypar
def test_sampled_counts_reach_mtkahypar_as_net_weights(monkeypatch):
    seen = {}
    real = methods.run_mtkahypar

    def spy(*args, net_weights=None, **kwargs):
        seen["weights"] = net_weights
        return real(*args, net_weights=net_weights, **kwargs)

    monkeypatch.setattr(stochastic, "run_mtkahypar", spy)
    part = stochastic_partition(datasets.load(RMAT), 3, [3, 3], 16, cache=False)
    assert seen["weights"].shape == (part.sampling["nets"],)
    assert seen["weights"].sum() == part.sampling["sampled_nets"] and seen["weights"].max() > 1


@needs_mtkahypar
def test_stored_by_sampling_settings(tmp_path):
    graph = datasets.load(RMAT)
    first = stochastic_partition(graph, 3, [3, 3], 16, cache_dir=tmp_path)
    again = stochastic_partition(graph, 3, "3,3", 16, cache_dir=tmp_path)
    other = stochastic_partition(graph, 3, [3, 3], 32, cache_dir=tmp_path)
    assert not first.from_cache and again.from_cache and not other.from_cache
    assert np.array_equal(first.assignment, again.assignment) and again.sampling == first.sampling
    assert first.method == "shp" and first.path != other.path and first.sampling["batch_size"] == 16
    assert np.bincount(first.assignment, minlength=3).min() > 0


@pytest.mark.parametrize("kwargs, field", [
    ({"theta": 0}, "theta"), ({"theta": 1.0}, "theta"), ({"delta": -0.5}, "delta"),
    ({"delta": float("nan")}, "delta"), ({"batch_size": 0}, "batch_size"),
    ({"batch_size": 301}, "batch_size"), ({"fanouts": [10, 0]}, "fanouts"),
    ({"fanouts": "ten"}, "fanouts"), ({"seeds_pool": [0, 0, 1]}, "seeds_pool"),
    ({"seeds_pool": [300]}, "seeds_pool"), ({"min_batches": 0}, "min_batches"),
    ({"operator": "max"}, "operator")])
def test_bad_settings_are_config_errors(kwargs, field):
    args = {"fanouts": [3, 3], "batch_size": 16, **kwargs}
    with pytest.raises(ConfigError, match=f"'{field}'"):
        stochastic_partition(datasets.load(RMAT), 3, args.pop("fanouts"), args.pop("batch_size"),
                             cache=False, **args)


# -- held-out batches on real graphs -----------------------------------------------------------
@functools.lru_cache(maxsize=None)
def real_graph(name: str, root: str):
    if not {info.name: info.present for info in datasets.available(root)}.get(name):
        pytest.skip(f"dataset {name} is not under {root}")
    return datasets.load(name, root=root, features="none")


@needs_mtkahypar
@pytest.mark.parametrize("name", ["facebook", "twitch-de"])
@pytest.mark.slow  # quality on real graphs, hypergraph partitioning of each
@pytest.mark.parametrize("parts", [3, 9, 27])
def test_shp_moves_no_more_than_hp_on_held_out_batches(name, parts, data_root):
    graph = real_graph(name, str(data_root))
    fanouts, batch, pool = [10, 5], 1024, graph.train_mask
    hp = partition(graph, parts, "hp")
    shp = stochastic_partition(graph, parts, fanouts, batch, seeds_pool=pool)
    first = stochastic.held_out_epoch([shp])
    volume = np.concatenate([batch_volumes(graph, [hp, shp], fanouts, batch, seeds_pool=pool, epoch=first + e)
                             for e in range(2)], axis=1)
    diff = volume[1] - volume[0]
    half = stats.t.ppf(0.975, diff.shape[0] - 1) * diff.std(ddof=1) / math.sqrt(diff.shape[0])
    assert volume[1].mean() <= volume[0].mean(), (
        f"{name} P={parts}: shp {volume[1].mean():.1f} vs hp {volume[0].mean():.1f} rows per batch over "
        f"{diff.shape[0]} held-out batches; shp - hp = {diff.mean():.1f} ± {half:.1f} (95% CI); "
        f"shp built from {shp.sampling['batches']} batches, {shp.sampling['nets']} nets")


# -- command -----------------------------------------------------------------------------------
@needs_mtkahypar
def test_command_runs_and_reports_the_sampling(tmp_path, capsys):
    from gnnmesh import cli
    argv = ["partition", "--dataset", RMAT, "--parts", "3", "--method", "shp", "--fanouts", "3,3",
            "--batch-size", "16", "--theta", "0.2", "--delta", "0.4", "--cache-dir", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "partition:     shp (mt-KaHyPar" in out and "(computed)" in out and "volume:" in out
    assert "fanouts 3,3, 16 seeds per batch" in out and "training nodes" in out
    assert "stopped at one epoch" in out and "after merging identical ones" in out
    assert "theta 0.2, delta 0.4" in out and "held-out batches" in out
    assert cli.main(argv) == 0
    assert "(reused)" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--theta", "0"], "'theta'"), (["--theta", "1"], "'theta'"), (["--delta", "1.5"], "'delta'"),
    (["--batch-size", "0"], "'batch_size'"), (["--batch-size", "100000"], "'batch_size'"),
    (["--fanouts", "10,0"], "'fanouts'"), (["--fanouts", "x"], "'fanouts'"),
    (["--method", "hp"], "--fanouts applies only to --partitioner shp"),
    (["--strategy", "grid3d", "--grid", "2,2"], "--partitioner applies to vertex partitions; --strategy grid3d")])
def test_command_bad_input_exits_2_with_one_line(flags, message, tmp_path, capsys):
    from gnnmesh import cli
    argv = ["partition", "--dataset", RMAT, "--parts", "3", "--method", "shp", "--fanouts", "3,3",
            "--cache-dir", str(tmp_path)]
    assert cli.main(argv + flags) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("gnnmesh: error:") and message in err


def test_command_shp_needs_fanouts(tmp_path, capsys):
    from gnnmesh import cli
    assert cli.main(["partition", "--dataset", RMAT, "--parts", "3", "--method", "shp",
                     "--cache-dir", str(tmp_path)]) == 2
    assert "needs --fanouts" in capsys.readouterr().err


@needs_mtkahypar
def test_a_typed_graph_is_sampled_per_relation_for_a_model_that_aggregates_per_relation(tmp_path):
    from gnnmesh.sampling import RELATIONS, RelationSampler
    from gnnmesh.sampling.relations import relation_fanouts
    from tests.helpers import typed_graph
    graph = typed_graph()
    names = graph.adj.relations.names
    pool = np.flatnonzero(graph.train_mask.numpy())
    part = stochastic_partition(graph, 2, "x=3,1;2", 8, seeds_pool=pool, operator=RELATIONS, cache_dir=tmp_path)
    assert part.sampling["fanouts"] == [[3, 1, 1, 1, 1, 1, 1, 1], [2] * 8]
    # the batches it weighs are those mini-batch training samples per relation
    sampler = RelationSampler(graph.adj, relation_fanouts("x=3,1;2", names), 0)
    volumes = batch_volumes(graph, [part], [[3, 1, 1, 1, 1, 1, 1, 1], [2] * 8], 8, seeds_pool=pool,
                            operator=RELATIONS, epoch=5, batches=1)
    from gnnmesh.partition.stochastic import block_volume
    from gnnmesh.sampling import draw_batches
    sample = sampler.sample(draw_batches(pool, 8, 0, 5)[0], 5, 0)
    owner = np.asarray(part.assignment)
    assert volumes[0, 0] == sum(block_volume(block, owner, 2) for block in sample.blocks)
    with pytest.raises(ConfigError, match="'relations' samples a typed graph per relation; this graph has none"):
        stochastic_partition(tiny(), 2, [1], 2, operator=RELATIONS)
