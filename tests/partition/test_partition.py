"""Vertex partitioning: methods, communication plans, quality metrics, the on-disk store, CLI."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

import numpy as np
import pytest
import torch

from gnnmesh import Adjacency, ConfigError, GraphError, progress
from gnnmesh.partition import (MissingExtraError, Partition, halos, connectivity_minus_one,
                               graph_key, load_partition, partition, quality, rank_halo, store_dir)
from gnnmesh.commands import partition as command
from gnnmesh.partition import methods, registry
from gnnmesh.partition.base import fill_empty_parts, imbalance, vertex_weights
from gnnmesh.partition.refine import VOLUME_BUDGET, reduce_max_send
from gnnmesh.transforms import gcn_norm

from tests.helpers import random_graph

METHODS = registry.names(sampled=False)   # the methods partition() runs


def _needs(module: str):
    """Skip a test (or one parameter) whose partitioner needs ``module`` when it is missing;
    the other tests of this file need neither partitioner."""
    try:
        importlib.import_module(module)
        missing = False
    except ImportError:
        missing = True
    return pytest.mark.skipif(missing, reason=f"needs {module} (gnnmesh[partitioners])")


needs_pymetis, needs_mtkahypar = _needs("pymetis"), _needs("mtkahypar")
NEEDS = {"gp": [needs_pymetis], "hp": [needs_mtkahypar]}


def methods_params(names):
    """``names`` as parameters, each skipped when its partitioner's package is missing."""
    return [pytest.param(name, marks=NEEDS.get(name, [])) for name in names]


def graphs():
    """Small graphs covering directed edges, self-loops, isolated nodes, duplicates merged,
    and node counts not divisible by the part counts."""
    return {
        "directed": random_graph(37, 140, seed=1).adj,            # self-loops, 2 isolated nodes
        "undirected": random_graph(31, 60, seed=2, directed=False).adj,
        "weighted": random_graph(29, 90, seed=3, weighted=True).adj,
        "sparse": random_graph(23, 12, seed=4, isolated=6).adj,  # mostly isolated nodes
    }


@pytest.fixture(scope="module")
def medium():
    """A 30x40 grid plus a few random long edges, directed: big enough for balance within
    epsilon, with structure a good partitioner can exploit."""
    rows, cols = 30, 40
    ids = np.arange(rows * cols).reshape(rows, cols)
    src = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    dst = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    rng = np.random.default_rng(7)
    extra = rng.integers(0, rows * cols, (2, 60))
    src, dst = np.concatenate([src, dst, extra[0]]), np.concatenate([dst, src, extra[1]])
    return Adjacency.from_coo(dst, src, (rows * cols, rows * cols))


# -- methods -----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", methods_params(METHODS))
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_every_method_gives_a_valid_partition(method, parts):
    for name, adj in graphs().items():
        part = partition(adj, parts, method, cache=False)
        a = part.assignment
        assert a.shape == (adj.shape[0],) and a.dtype == np.int64, name
        assert a.min() == 0 and a.max() == parts - 1, name
        assert (part.sizes() > 0).all(), (name, part.sizes())
        assert (part.parts, part.method, part.graph_key) == (parts, method, graph_key(adj))
        for rank in range(parts):
            owned = part.owned(rank)
            assert np.array_equal(owned, np.flatnonzero(a == rank)) and (np.diff(owned) > 0).all()


@pytest.mark.parametrize("method", methods_params(METHODS))
def test_deterministic_per_seed(method, medium):
    first = partition(medium, 4, method, seed=3, cache=False).assignment
    again = partition(medium, 4, method, seed=3, cache=False).assignment
    assert np.array_equal(first, again)
    if method != "contiguous":  # the others are randomized: the seed matters
        assert not np.array_equal(first, partition(medium, 4, method, seed=4, cache=False).assignment)


def test_rp_and_contiguous_balance(medium):
    sizes = partition(medium, 7, "rp", cache=False).sizes()
    assert sizes.max() - sizes.min() <= 1
    a = partition(medium, 7, "contiguous", cache=False).assignment
    assert (np.diff(a) >= 0).all()  # id ranges
    w = vertex_weights(medium)
    assert imbalance(a, 7, w) <= w.max() / (w.sum() / 7) + 1e-9  # within one row of perfect


@pytest.mark.parametrize("method", methods_params(["gp", "hp"]))
def test_gp_and_hp_balance_within_epsilon(method, medium):
    eps = 0.03
    part = partition(medium, 4, method, epsilon=eps, cache=False)
    actual = imbalance(part.assignment, 4, vertex_weights(medium))
    print(f"{method}: imbalance {actual:.4f} (epsilon {eps})")
    slack = 0.0 if method == "hp" else 0.02  # METIS treats ufactor as a target, not a bound
    assert actual <= eps + slack + 1e-9, f"{method} imbalance {actual:.4f} > epsilon {eps}"


@pytest.fixture(scope="module")
def skewed():
    """Power-law degrees: balancing nonzeros alone leaves vertex counts far apart here."""
    from gnnmesh.datasets import load
    return load("rmat:nodes=20000,edges=200000,features=1,seed=5", cache=False).adj


@needs_pymetis
def test_gp_balances_vertex_counts_too(skewed):
    """A rank's memory follows its vertex count: gp keeps both counts and loads within
    epsilon (balancing loads alone gave one of 8 parts 3x the average count here)."""
    eps, parts = 0.03, 8
    part = partition(skewed, parts, "gp", epsilon=eps, cache=False)
    q = quality(skewed, part)
    print(f"gp: node imbalance {q['node_imbalance']:.4f}, load imbalance {q['compute_imbalance']:.4f}")
    assert q["node_imbalance"] <= eps + 0.02 and q["compute_imbalance"] <= eps + 0.02
    assert q["node_imbalance"] == pytest.approx(imbalance(part.assignment, parts, np.ones(part.num_nodes)))


@needs_pymetis
def test_gp_without_exported_metis_balances_load_and_warns(skewed, monkeypatch):
    from gnnmesh.partition import metis_kway
    monkeypatch.setattr(metis_kway, "available", lambda: False)
    with pytest.warns(UserWarning, match="balances nonzeros only"):
        a = partition(skewed, 4, "gp", epsilon=0.03, cache=False).assignment
    assert imbalance(a, 4, vertex_weights(skewed)) <= 0.05


@needs_pymetis
@needs_mtkahypar
def test_gp_and_hp_cut_far_less_than_random(medium):
    rp = quality(medium, partition(medium, 4, "rp", cache=False))["volume_total"]
    for method in ("gp", "hp"):
        assert quality(medium, partition(medium, 4, method, cache=False))["volume_total"] < 0.2 * rp


def test_fill_empty_parts_is_deterministic():
    a = np.array([0, 0, 0, 1, 1, 0])
    fixed = fill_empty_parts(a, 4)
    assert np.array_equal(fixed, fill_empty_parts(a, 4))
    assert (np.bincount(fixed, minlength=4) > 0).all()
    assert fixed.tolist() == [0, 0, 3, 1, 1, 2]  # each from the end of the then-largest part


def test_tool_returning_an_empty_part_is_fixed(monkeypatch):
    adj = graphs()["directed"]
    monkeypatch.setattr(methods, "hypergraph", lambda adj, p, e, s: np.zeros(adj.shape[0], np.int64))
    part = partition(adj, 3, "hp", cache=False)
    assert (part.sizes() > 0).all()


@pytest.mark.parametrize("start", ["rp", "contiguous"])
@pytest.mark.parametrize("parts", [2, 5])
def test_refinement_lowers_max_send_within_budget(medium, start, parts):
    w = vertex_weights(medium)
    before = partition(medium, parts, start, cache=False).assignment
    after = reduce_max_send(medium, before, parts, w, epsilon=0.03)
    q0, q1 = quality(medium, before), quality(medium, after)
    assert np.array_equal(after, reduce_max_send(medium, before, parts, w, epsilon=0.03))
    assert q1["send_volume_max"] <= q0["send_volume_max"]
    if start == "rp":  # random parts leave plenty to gain
        assert q1["send_volume_max"] < q0["send_volume_max"]
    assert q1["volume_total"] <= q0["volume_total"] * (1 + VOLUME_BUDGET)
    cap = max(1.03 * w.sum() / parts, np.bincount(before, weights=w).max())
    assert np.bincount(after, weights=w, minlength=parts).max() <= cap
    assert (np.bincount(after, minlength=parts) > 0).all()


# -- hp: large nets, preset, progress -----------------------------------------------------------
def test_column_nets_leave_out_single_pin_and_large_nets(medium):
    n = medium.shape[0]
    sizes = np.bincount(medium.indices.numpy(), minlength=n) + 1  # + the self pin (no self-loops here)
    starts, pins, dropped = methods.column_nets(medium, max_pins=4)
    kept = np.diff(starts)
    assert ((kept > 1) & (kept <= 4)).all() and dropped == int((sizes > 4).sum()) > 0
    assert kept.shape[0] == int(((sizes > 1) & (sizes <= 4)).sum()) and pins.max() < n
    everything = methods.column_nets(medium)
    assert everything[2] == 0 and everything[1].shape[0] == int(sizes[sizes > 1].sum())


@needs_mtkahypar
def test_hp_without_large_nets_is_valid_and_its_volume_counts_every_net(medium, monkeypatch):
    monkeypatch.setattr(methods, "MAX_NET_PINS", 3)  # most nets of the grid have 4-5 pins
    eps = 0.03
    part = partition(medium, 4, "hp", epsilon=eps, cache=False)
    assert (part.sizes() > 0).all()
    assert imbalance(part.assignment, 4, vertex_weights(medium)) <= eps + 1e-9
    q = quality(medium, part)
    assert q["volume_total"] == connectivity_minus_one(medium, part.assignment) \
        == _brute_force_volume(medium, part.assignment)
    starts, pins, _ = methods.column_nets(medium, max_pins=3)  # what mt-KaHyPar saw
    a = part.assignment[pins]
    seen = sum(len(set(a[starts[k]:starts[k + 1]].tolist())) - 1 for k in range(starts.shape[0] - 1))
    assert q["volume_total"] > seen  # the left-out nets are cut, and counted


@needs_mtkahypar
def test_hp_reports_its_phases_where_progress_is_enabled(monkeypatch, capsys):
    monkeypatch.delenv("GNNMESH_HP_PRESET", raising=False)
    monkeypatch.delenv("GNNMESH_PARTITION_THREADS", raising=False)
    partition(graphs()["directed"], 3, "hp", cache=False)
    assert capsys.readouterr().err == ""  # the library is quiet by default
    progress.enable(delay=0)
    try:
        partition(graphs()["directed"], 3, "hp", cache=False)
    finally:
        progress.disable()
    err = capsys.readouterr().err
    for phase in ("hp: partitioning", "hp: building the column-net hypergraph",
                  "hp: mt-KaHyPar, default preset, 1 thread:", "hp: refining the largest send volume"):
        assert f"gnnmesh:   {phase}" in err or f"gnnmesh: {phase}" in err, (phase, err)
    assert all(line.startswith("gnnmesh: ") and (line.endswith(" ...") or " done in " in line)
               for line in err.splitlines()), err


@needs_mtkahypar
def test_hp_preset_is_recorded_and_keys_the_store(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GNNMESH_HP_PRESET", raising=False)
    argv = ["--dataset", "rmat:nodes=300,edges=2000,features=0", "--parts", "4", "--method", "hp",
            "--cache-dir", str(tmp_path)]
    assert _run_command(argv) == 0
    out = capsys.readouterr().out
    assert "partition:     hp (mt-KaHyPar, default preset), 4 parts" in out and "(computed)" in out
    stored = next((tmp_path / "partitions").glob("*-hp-*.npy"))
    assert json.loads(stored.with_suffix(".json").read_text())["preset"] == "default"
    assert load_partition(stored, _rmat300()).preset == "default"
    monkeypatch.setenv("GNNMESH_HP_PRESET", "LARGE_K")  # names are case-insensitive
    assert _run_command(argv) == 0
    out = capsys.readouterr().out
    assert "large_k preset" in out and "(computed)" in out  # not the default preset's entry
    assert _run_command(argv) == 0
    assert "(reused)" in capsys.readouterr().out


def test_bad_hp_preset_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    from gnnmesh import cli
    monkeypatch.setenv("GNNMESH_HP_PRESET", "fastest")
    argv = ["partition", "--dataset", "rmat:nodes=300,edges=2000,features=0", "--parts", "2",
            "--method", "hp", "--cache-dir", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "GNNMESH_HP_PRESET must be one of default" in err and "'fastest'" in err


@needs_mtkahypar
def test_mtkahypar_failure_names_the_cause(monkeypatch, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text("import sys\nsys.exit('out of memory, say')\n")
    monkeypatch.setattr(methods, "WORKER", worker)
    with pytest.raises(RuntimeError, match="mt-KaHyPar failed .*out of memory, say"):
        partition(graphs()["directed"], 2, "hp", cache=False)


def _rmat300():
    from gnnmesh import datasets
    return datasets.load("rmat:nodes=300,edges=2000,features=0")


# -- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("parts", [0, -1, 38, 1000])
def test_bad_part_counts(parts):
    adj = graphs()["directed"]  # 37 nodes
    with pytest.raises(ConfigError, match="part"):
        partition(adj, parts, "rp", cache=False)


def test_unknown_method():
    with pytest.raises(ConfigError, match="unknown partitioning method 'kl'.*hp"):
        partition(graphs()["directed"], 2, "kl", cache=False)


@pytest.mark.parametrize("method, module", [("gp", "pymetis"), ("hp", "mtkahypar")])
def test_missing_extra_names_the_install_command(monkeypatch, method, module):
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
    with pytest.raises(MissingExtraError, match=r"gnnmesh\[partitioners\]") as info:
        partition(graphs()["directed"], 2, method, cache=False)
    assert isinstance(info.value, ImportError) and isinstance(info.value, ConfigError)


# -- quality -----------------------------------------------------------------------------------
def _brute_force_volume(adj: Adjacency, assignment) -> int:
    """Literally: for every column, the parts other than its owner whose rows reference it."""
    dense = adj.to_scipy().toarray() != 0
    total = 0
    for j in range(adj.shape[0]):
        readers = set(assignment[np.flatnonzero(dense[:, j])].tolist())
        total += len(readers - {assignment[j]})
    return total


@pytest.mark.parametrize("method", methods_params(METHODS + ("arbitrary",)))
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_volume_equals_connectivity_minus_one(method, parts):
    rng = np.random.default_rng(parts)
    for name, adj in graphs().items():
        if method == "arbitrary":  # any assignment, not only balanced ones
            assignment = rng.integers(0, parts, adj.shape[0])
        else:
            assignment = partition(adj, parts, method, cache=False).assignment
        q = quality(adj, assignment)
        km1 = connectivity_minus_one(adj, assignment)
        assert q["volume_total"] == km1 == _brute_force_volume(adj, assignment), name
        plans = halos(adj, assignment, parts)
        assert sum(p.num_halo for p in plans) == km1
        assert sum(int(p.send_counts.sum()) for p in plans) == km1
        assert q["send_volume_max"] == max(int(p.send_counts.sum()) for p in plans)
        assert q["recv_volume_max"] == max(p.num_halo for p in plans)
        assert q["messages_total"] == sum(len(p.send_peers()) for p in plans)
        assert q["messages_max"] == max(len(p.send_peers()) for p in plans)


def test_quality_report_fields():
    adj = graphs()["weighted"]
    part = partition(adj, 3, "rp", cache=False)
    q = quality(adj, part, feature_bytes=64)
    assert q["parts"] == 3 and q["seconds"] == part.seconds
    assert q["bytes_per_layer"] == 64 * q["volume_total"]
    assert q["send_bytes_max"] == 64 * q["send_volume_max"]
    load = np.bincount(part.assignment, weights=vertex_weights(adj), minlength=3)
    assert q["compute_load_max"] == load.max() and q["compute_load_mean"] == pytest.approx(load.mean())
    assert quality(adj, np.zeros(adj.shape[0], np.int64))["volume_total"] == 0


@needs_pymetis
@needs_mtkahypar
def test_hp_beats_rp_and_gp_on_cora(data_root):
    from gnnmesh import datasets
    adj = datasets.load("cora", root=data_root).adj
    vol = {m: quality(adj, partition(adj, 8, m, cache=False))["volume_total"] for m in ("rp", "gp", "hp")}
    assert vol["hp"] < 0.3 * vol["rp"], vol
    assert vol["hp"] <= vol["gp"], vol


# -- communication plan ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["directed", "weighted", "sparse"])
@pytest.mark.parametrize("parts", [1, 2, 4])
def test_comm_plan_is_consistent(name, parts):
    adj = gcn_norm(graphs()[name])  # an operator with values and self-loops
    n = adj.shape[0]
    assignment = np.random.default_rng(parts).integers(0, parts, n)
    assignment[:parts] = np.arange(parts)  # no empty part
    plans = halos(adj, assignment, parts)
    dense = torch.zeros(n, n)
    dense[adj.row(), adj.indices] = adj.values
    x = torch.randn(n, 5, dtype=torch.float32)
    for m, plan in enumerate(plans):
        assert plan.rank == m and np.array_equal(plan.owned, np.flatnonzero(assignment == m))
        owners = assignment[plan.halo]
        assert (owners != m).all() and (np.diff(owners) >= 0).all()
        assert np.array_equal(plan.recv_counts, np.bincount(owners, minlength=parts))
        offsets = plan.recv_offsets
        for n_ in range(parts):
            from_n = plan.halo[offsets[n_]:offsets[n_ + 1]]
            assert (np.diff(from_n) > 0).all()
            # what n sends m is exactly, in order, what m lists as its halo from n
            sent = plans[n_].owned[plans[n_].send_index[m]]
            assert np.array_equal(sent, from_n), (m, n_)
        assert plan.send_index[m].shape[0] == 0 and plan.recv_counts[m] == 0
        # the local block reproduces the global product on the owned rows
        block = plan.block
        assert block.shape == (plan.num_owned, plan.num_owned + plan.num_halo)
        local = torch.zeros(block.shape)
        local[block.row(), block.indices] = block.values
        x_local = x[torch.from_numpy(np.concatenate([plan.owned, plan.halo]))]
        expect = (dense @ x)[torch.from_numpy(plan.owned)]
        assert torch.allclose(local @ x_local, expect, atol=1e-5)
        assert torch.equal(block.values, adj.values[torch.from_numpy(plan.entry_ids)])
        # the one-rank entry point gives the same plan
        single = rank_halo(adj, assignment, parts, m)
        assert np.array_equal(single.halo, plan.halo) and torch.equal(single.block.indices, block.indices)
        assert all(np.array_equal(a, b) for a, b in zip(single.send_index, plan.send_index))


def test_comm_plan_keeps_pattern_operators_unweighted():
    adj = graphs()["directed"]
    assert adj.values is None
    plans = halos(adj, partition(adj, 3, "contiguous", cache=False))
    assert all(p.block.values is None for p in plans)
    assert sum(p.block.nnz for p in plans) == adj.nnz


def test_comm_plan_rejects_bad_assignments():
    adj = graphs()["directed"]
    with pytest.raises(GraphError, match="length 37"):
        halos(adj, np.zeros(5, np.int64), 2)
    with pytest.raises(GraphError, match=r"\[0, 2\)"):
        halos(adj, np.full(37, 2), 2)


# -- store -------------------------------------------------------------------------------------
@needs_mtkahypar
def test_store_round_trip_and_reuse(tmp_path, monkeypatch):
    adj = graphs()["directed"]
    part = partition(adj, 3, "hp", epsilon=0.05, seed=2, cache_dir=tmp_path)
    path = tmp_path / "partitions" / f"{graph_key(adj)}-hp-P3-eps0.05-s2.npy"
    assert part.path == str(path) and path.is_file() and path.with_suffix(".json").is_file()
    assert not list((tmp_path / "partitions").glob(".tmp*"))  # temporaries renamed away
    loaded = load_partition(path, adj, parts=3)
    assert np.array_equal(loaded.assignment, part.assignment)
    assert (loaded.method, loaded.epsilon, loaded.seed, loaded.graph_key) == ("hp", 0.05, 2, part.graph_key)
    assert loaded.seconds == pytest.approx(part.seconds)
    # a second call reuses the stored partition instead of computing
    monkeypatch.setattr(methods, "hypergraph", lambda *a: pytest.fail("recomputed"))
    again = partition(adj, 3, "hp", epsilon=0.05, seed=2, cache_dir=tmp_path)
    assert np.array_equal(again.assignment, part.assignment)
    # the key depends on the structure only: a normalized operator finds the same entry
    assert graph_key(gcn_norm(adj, self_loops=False)) == graph_key(adj)


def test_store_default_root_follows_gnnmesh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path))
    assert store_dir() == tmp_path / "partitions"
    part = partition(graphs()["sparse"], 2, "rp")
    assert part.path.startswith(str(tmp_path / "partitions"))


def _write(path, assignment, meta):
    np.save(path, np.asarray(assignment))
    if meta is not None:
        path.with_suffix(".json").write_text(json.dumps(meta))
    return path


@pytest.mark.parametrize("case, message", [
    ("length", "has 36 entries but the graph has 37 nodes"),
    ("range", "node 0 is in part 3, out of range for 3 parts"),
    ("negative", "node 0 is in part -1"),
    ("empty", "part 2 of 3 is empty"),
    ("other graph", "computed for another graph"),
    ("parts", "has 3 parts, expected 4"),
    ("not an array", "not a readable .npy"),
    ("floats", "1-D integer array"),
    ("bad json", "unreadable partition description"),
    ("missing", "partition file not found"),
])
def test_load_partition_rejects_bad_files(tmp_path, case, message):
    adj = graphs()["directed"]
    good = partition(adj, 3, "rp", cache=False).assignment
    meta = {"graph_key": graph_key(adj), "parts": 3, "method": "rp", "epsilon": 0.0, "seed": 0,
            "seconds": 0.0}
    path = tmp_path / "p.npy"
    parts = None
    if case == "length":
        _write(path, good[:-1], meta)
    elif case in ("range", "negative"):
        bad = good.copy()
        bad[0] = 3 if case == "range" else -1
        _write(path, bad, meta)
    elif case == "empty":
        _write(path, np.minimum(good, 1), meta)
    elif case == "other graph":
        _write(path, good, {**meta, "graph_key": graph_key(graphs()["weighted"])})
    elif case == "parts":
        _write(path, good, meta)
        parts = 4
    elif case == "not an array":
        path.write_bytes(b"garbage")
    elif case == "floats":
        _write(path, good.astype(np.float64), meta)
    elif case == "bad json":
        _write(path, good, None)
        path.with_suffix(".json").write_text("{oops")
    with pytest.raises(GraphError, match=message) as info:
        load_partition(path, adj, parts=parts)
    assert str(path.with_suffix("")) in str(info.value)  # names the file (.npy or .json)


def test_bare_npy_loads_without_description(tmp_path):
    adj = graphs()["directed"]
    good = partition(adj, 3, "rp", cache=False).assignment
    part = load_partition(_write(tmp_path / "bare.npy", good.astype(np.int32), None), adj)
    assert part.parts == 3 and part.method == "file" and part.assignment.dtype == np.int64


def test_damaged_cache_entry_is_recomputed(tmp_path):
    adj = graphs()["directed"]
    part = partition(adj, 2, "rp", cache_dir=tmp_path)
    np.save(part.path, np.zeros(3, np.int64))  # truncated
    with pytest.warns(UserWarning, match="ignoring unusable stored partition"):
        again = partition(adj, 2, "rp", cache_dir=tmp_path)
    assert np.array_equal(again.assignment, part.assignment)
    assert np.array_equal(load_partition(part.path, adj).assignment, part.assignment)  # rewritten


def test_partition_pickles():
    import pickle
    part = partition(graphs()["directed"], 2, "rp", cache=False)
    again = pickle.loads(pickle.dumps(part))
    assert isinstance(again, Partition) and np.array_equal(again.assignment, part.assignment)


# -- command -----------------------------------------------------------------------------------
def _run_command(argv):
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers(dest="command"))
    return command.run(parser.parse_args(["partition"] + argv))


@needs_pymetis
def test_command_reports_and_stores(tmp_path, capsys):
    argv = ["--dataset", "rmat:nodes=300,edges=2000,features=0", "--parts", "4", "--method", "gp",
            "--cache-dir", str(tmp_path), "--feature-bytes", "256"]
    assert _run_command(argv) == 0
    out = capsys.readouterr().out
    assert "(computed)" in out and str(tmp_path / "partitions") in out
    for word in ("volume:", "max send:", "max receive:", "messages:", "compute load:", "bytes:"):
        assert word in out
    assert _run_command(argv) == 0
    assert "(reused)" in capsys.readouterr().out


def test_command_bad_part_count_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="300 nodes into 301 parts"):
        _run_command(["--dataset", "rmat:nodes=300,edges=2000,features=0", "--parts", "301",
                      "--cache-dir", str(tmp_path)])


def test_report_says_when_parts_differ_in_vertex_count(skewed):
    from gnnmesh.partition.base import Partition as P
    graph = type("G", (), {"name": "skewed", "num_nodes": skewed.shape[0], "num_edges": skewed.nnz})()
    n = skewed.shape[0]
    lopsided = np.where(np.arange(n) < n // 2, 0, np.arange(n) % 3 + 1)  # half the vertices in part 0
    for method, noted in (("hp", True), ("gp", False)):
        part = P(lopsided, 4, method, 0.01, 0, 0.0, "key")
        lines = command.report_lines(graph, part, quality(skewed, part))
        assert any("part sizes:" in line and "imbalance 100.0%" in line for line in lines)
        assert any(line.startswith("note:") and "gp balances vertex counts" in line for line in lines) == noted


def test_quality_does_not_depend_on_its_block_size(skewed, monkeypatch):
    from gnnmesh import transforms
    a = np.random.default_rng(0).integers(0, 7, skewed.shape[0])
    whole = quality(skewed, a)
    monkeypatch.setattr(transforms, "ENTRY_BLOCK", 997)
    assert quality(skewed, a) == whole
    assert whole["volume_total"] == connectivity_minus_one(skewed, a)
