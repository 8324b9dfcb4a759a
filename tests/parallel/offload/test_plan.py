"""The offload plan: dedup modes and reorganization order their costs as they should, the
budget picks K, bad budgets and store directories are refused in one line, and a graph
whose vertex data is several times the budget trains within it (measured)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from tests.helpers import gnnmesh_in_process, random_graph

from gnnmesh.errors import ConfigError
from gnnmesh.validate import parse_bytes
from gnnmesh.models import build_model
from gnnmesh.parallel.offload import Plan, build_plan
from gnnmesh.parallel.offload.pipeline import stages_of
from gnnmesh.parallel.offload.plan import RESIDENT, epoch_traffic, fixed_bytes, footprint
from tests.forked import run_cli

MODES = ("none", "inter", "intra", "both")


def graph():
    return random_graph(n=400, e=2400, features=16, classes=4, directed=True, isolated=5, seed=7)


def owned_by(graph, world, seed=0):
    assignment = np.random.default_rng(seed).integers(0, world, graph.num_nodes)
    return [np.flatnonzero(assignment == r) for r in range(world)]


def stages(in_dim=16, model="sage"):
    return stages_of(build_model(model, in_dim, 4, hidden=8), in_dim)


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_dedup_modes_never_load_more(world, k):
    g, s = graph(), stages()
    owned = owned_by(g, world)
    load = {mode: epoch_traffic(Plan(g.adj, owned, k, mode, False, 0, 16), s).total("load")
            for mode in MODES}
    assert load["both"] <= load["inter"] <= load["none"]
    assert load["both"] <= load["intra"] <= load["none"]
    if k > 1:  # consecutive chunks of a random graph share rows
        assert load["intra"] < load["none"]
    if world > 1:  # so do concurrent chunks
        assert load["inter"] < load["none"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("world", [1, 2, 4])
def test_reorganized_order_costs_no_more(mode, world):
    g, s = graph(), stages()
    owned = owned_by(g, world, seed=world)
    plain = Plan(g.adj, owned, 8, mode, False, 0, 16)
    organized = Plan(g.adj, owned, 8, mode, True, 0, 16)
    assert epoch_traffic(organized, s).total("load") <= epoch_traffic(plain, s).total("load")
    for r in range(world):  # every rank still runs each of its chunks once
        assert sorted(organized.order[r]) == list(range(8))


def test_auto_takes_the_smallest_fitting_k():
    g, s = graph(), stages()
    owned = owned_by(g, 1)

    def need(k):
        return max(footprint(Plan(g.adj, owned, k, "both", False, 0, 16), s, 4))

    budget = need(6)
    chosen = build_plan(adj=g.adj, owned=owned, rank=0, in_dim=16, stages=s, classes=4, heads=1,
                        budget=budget, chunks=None, dedup="both", reorganize=False)
    assert need(chosen.k) <= budget and (chosen.k == 1 or need(chosen.k - 1) > budget)
    fixed = fixed_bytes()  # held beside the chunks whatever K: half of the rest
    smaller = build_plan(adj=g.adj, owned=owned, rank=0, in_dim=16, stages=s, classes=4, heads=1,
                         budget=fixed + (budget - fixed) // 2, chunks=None, dedup="both", reorganize=False)
    assert smaller.k > chosen.k


@pytest.mark.parametrize("world", [1, 2])
def test_overlap_holds_the_neighbouring_batches_transfers(world):
    """With overlap, a batch's working set sits beside the next batch's loads and the batch
    before's results: the estimate grows with K > 1 (not with one chunk: nothing is in
    flight), the same bytes move, and the budget picks K with them counted."""
    g, s = graph(), stages()
    owned = owned_by(g, world)
    for k in (1, 4):
        plain, ahead = (Plan(g.adj, owned, k, "both", False, 0, 16, overlap=o) for o in (False, True))
        low, high = (footprint(p, s, 4) for p in (plain, ahead))
        assert (high == low) if k == 1 else all(h > lo for h, lo in zip(high, low)), (k, low, high)
        assert epoch_traffic(plain, s) == epoch_traffic(ahead, s)
    settings = dict(adj=g.adj, owned=owned, rank=0, in_dim=16, stages=s, classes=4, heads=1, chunks=None,
                    dedup="both", reorganize=False)
    budget = max(footprint(Plan(g.adj, owned, 4, "both", False, 0, 16), s, 4))
    plain, ahead = (build_plan(budget=budget, overlap=o, **settings) for o in (False, True))
    assert ahead.overlap and max(footprint(ahead, s, 4)) <= budget
    assert ahead.k > plain.k


def test_too_small_a_budget_names_one_that_works():
    g, s = graph(), stages()
    owned = owned_by(g, 1)
    with pytest.raises(ConfigError, match="device_memory") as err:
        build_plan(adj=g.adj, owned=owned, rank=0, in_dim=16, stages=s, classes=4, heads=1,
                   budget=1000, chunks=None, dedup="both", reorganize=True)
    named = parse_bytes(re.search(r"give at least ([\d.]+ [KMGT]?i?B)", str(err.value)).group(1), "named")
    plan = build_plan(adj=g.adj, owned=owned, rank=0, in_dim=16, stages=s, classes=4, heads=1,
                      budget=named, chunks=None, dedup="both", reorganize=True)  # the size named suffices
    assert plan.k >= 1
    with pytest.raises(ConfigError, match="too small for 2 chunks"):
        build_plan(adj=g.adj, owned=owned, rank=0, in_dim=16, stages=s, classes=4, heads=1,
                   budget=1000, chunks=2, dedup="both", reorganize=True)


def _gnnmesh(*args, cwd=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    return run_cli(*args, timeout=timeout, env=env, cwd=cwd)


def test_unwritable_store_dir_is_one_line_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = _gnnmesh("train", "--dataset", "sbm:nodes=200", "--strategy", "offload", "--host-store", "file",
                   "--store-dir", str(blocker / "store"), "--epochs", "2", "--metrics", str(tmp_path / "m.jsonl"))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(blocker) in lines[0], out.stderr
    assert "epoch" not in out.stdout and not (tmp_path / "m.jsonl").exists()


def test_flags_refused_elsewhere_and_file_store_needs_a_directory():
    out = gnnmesh_in_process("train", "--dataset", "sbm:nodes=200", "--device-memory", "1GiB", "--epochs", "1")
    assert out.returncode == 2 and "applies only to --strategy offload" in out.stderr
    out = gnnmesh_in_process("train", "--dataset", "sbm:nodes=200", "--strategy", "offload", "--host-store", "file")
    assert out.returncode == 2 and "store_dir" in out.stderr
    out = gnnmesh_in_process("train", "--dataset", "sbm:nodes=200", "--strategy", "offload", "--device-memory", "lots")
    assert out.returncode == 2 and "'lots' is not a size" in out.stderr


@pytest.mark.slow
def test_plan_command_prints_what_training_counts(tmp_path):
    spec = "sbm:nodes=300,features=12"
    out = _gnnmesh("plan", "--strategy", "offload", "--dataset", spec, "--device-memory", "18MiB",
                   "--chunks", "4")
    assert out.returncode == 0, out.stderr
    planned = float(re.search(r"host -> fast\s+([\d.]+) MiB", out.stdout).group(1))
    metrics = tmp_path / "m.jsonl"
    out = _gnnmesh("train", "--dataset", spec, "--strategy", "offload", "--device-memory", "18MiB", "--chunks", "4",
                   "--epochs", "2", "--metrics", str(metrics))
    assert out.returncode == 0, out.stderr
    for line in metrics.read_text().splitlines():
        assert round(json.loads(line)["offload_load_bytes"] / 2**20, 2) == planned
    out = _gnnmesh("plan", "--strategy", "offload", "--dataset", spec, "--device-memory", "18MiB",
                   "--chunks", "4", "--overlap")  # the same bytes, with the batches either side in flight
    assert out.returncode == 0, out.stderr
    assert ", overlapped;" in out.stdout
    assert float(re.search(r"host -> fast\s+([\d.]+) MiB", out.stdout).group(1)) == planned


# A uniform R-MAT (no hubs) of 90k nodes: all layers' vertex data, gradients and cached
# aggregates take about 120 MiB of host tier with offload's gcn, over 4x what the larger budget
# leaves beside the process's own growth (RESIDENT; the file store's buffers come on
# top); with wider features, about 137 MiB with tensor parallelism's decoupled gcn.
RMAT = "rmat:nodes=90000,edges=900000,features={},classes=4,a=0.25,b=0.25,c=0.25"
ENGINES = {"offload": (RMAT.format(128), ["--strategy", "offload"], (44, 32)),
           "tensor": (RMAT.format(320), ["--strategy", "tensor", "--decoupled", "--nproc", "2"], (44, 34))}


@pytest.mark.slow  # real resident memory of whole training runs
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_training_stays_within_the_budget(tmp_path, engine):
    spec, strategy, budgets = ENGINES[engine]
    runs = {}
    for budget in budgets:
        metrics = tmp_path / f"{budget}.jsonl"
        out = _gnnmesh("train", "--dataset", spec, *strategy, "--device-memory", f"{budget}MiB",
                       "--host-store", "file", "--store-dir", str(tmp_path / "store"), "--epochs", "1",
                       "--metrics", str(metrics), "--quiet", timeout=600)
        assert out.returncode == 0, out.stderr
        store = tmp_path / "store"
        assert not store.exists() or not any(p.is_file() for p in store.rglob("*"))  # the host tier's files are gone
        runs[budget] = [json.loads(line) for line in metrics.read_text().splitlines()]
    for budget, records in runs.items():
        for r in records:
            assert r["host_tier_bytes"] >= 4 * (budget * 2**20 - RESIDENT)
            assert r["footprint_estimate_bytes"] <= budget * 2**20
            assert r["fast_peak_bytes_max"] <= budget * 2**20
    large, small = (runs[b][0] for b in budgets)
    assert small["chunks"] > large["chunks"]
    assert small["fast_peak_bytes_max"] < large["fast_peak_bytes_max"]
