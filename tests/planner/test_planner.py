"""The 3D performance model (gnnmesh.planner.grid3d) and the ``gnnmesh plan`` command."""

import json
import time

import numpy as np
import pytest

from gnnmesh.cli import main
from gnnmesh.commands.plan_inputs import graph_size
from gnnmesh.layout.grid import Grid, factorizations
from gnnmesh.planner import grid3d as m
from gnnmesh.planner import machine
from gnnmesh.planner.probe import _fit

NET = machine.Network(intra_bw=100e9, inter_bw=20e9, intra_latency=0.0, inter_latency=0.0)


# ---------------------------------------------------------------------------- grids

@pytest.mark.parametrize("world", [1, 2, 4, 8, 12, 30, 64, 1024])
def test_factorizations_are_every_ordered_triple(world):
    grids = factorizations(world)
    triples = {(x, y, z) for x in range(1, world + 1) for y in range(1, world + 1)
               for z in range(1, world + 1) if x * y * z == world} if world <= 64 else None
    assert len(set(grids)) == len(grids)
    assert all(g.size == world for g in grids)
    if triples is not None:
        assert {(g.x, g.y, g.z) for g in grids} == triples
    else:  # 2^10: compositions of 10 into three parts
        assert len(grids) == 66


# ---------------------------------------------------------------------------- collectives

def test_ring_costs_closed_form():
    mb = 1e6
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert machine.ring_time(kind, mb, 1, 1e9, 1e-3) == 0.0    # one rank: nothing moves
    for p in (2, 4, 8, 64):
        once = (p - 1) / p * mb / 1e9
        assert machine.ring_time("all_gather", mb, p, 1e9, 0.0) == pytest.approx(once)
        assert machine.ring_time("reduce_scatter", mb, p, 1e9, 0.0) == pytest.approx(once)
        assert machine.ring_time("all_reduce", mb, p, 1e9, 0.0) == pytest.approx(2 * once)
        assert machine.ring_time("all_reduce", 0, p, 1e9, 1e-6) == pytest.approx(2 * (p - 1) * 1e-6)
    # the bandwidth term approaches 2 M / beta from below as p grows
    assert machine.ring_time("all_reduce", mb, 1024, 1e9, 0) < 2 * mb / 1e9
    with pytest.raises(ValueError):
        machine.ring_time("broadcast", mb, 2, 1e9, 0)


def test_small_buffers_take_the_tree():
    # 4 bytes over 1024 ranks: 2 x 10 latency steps instead of 2 x 1023
    assert machine.tree_time("all_reduce", 4, 1024, 1e9, 1e-6) == pytest.approx(20e-6 + 20 * 4 / 1e9)
    assert machine.collective_time("all_reduce", 4, 1024, 1e9, 1e-6) == machine.tree_time("all_reduce", 4, 1024, 1e9, 1e-6)
    # a large buffer keeps the ring's (p-1)/p bandwidth term
    big = 1e9
    assert machine.collective_time("all_reduce", big, 1024, 1e9, 1e-6) == machine.ring_time("all_reduce", big, 1024, 1e9, 1e-6)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert machine.collective_time(kind, 1e6, 1, 1e9, 1e-3) == 0.0


def test_message_sizes_follow_block_shapes():
    # 12 nodes, widths 6 -> 4 -> 2 on X=2, Y=3, Z=1. Layer 0: rows z, cols x, feats y.
    work = m.Workload(nodes=12, nnz=48, widths=(6, 4, 2))
    grid = Grid(2, 3, 1)
    forward = [
        machine.SpMM(rows=12, common=6, nnz=24, width=2),      # A block 12 x 6 times F block 6 x 2
        m.Collective("all_reduce", "x", 12 * 2 * 4),     # H 12 x 2
        machine.GEMM(12, 2, 2),                                # H times W block 2 x 2
        machine.Elementwise(2 * 12 * 2),
        m.Collective("all_reduce", "y", 12 * 2 * 4),     # Q 12 x 2
    ]
    assert m.layer_ops(work, grid, 0, backward=False) == forward
    # a learned input is cut along Z as well (Plexus): its 6 x 2 block is gathered first
    learned = m.Workload(nodes=12, nnz=48, widths=(6, 4, 2), trainable_input=True)
    assert m.layer_ops(learned, grid, 0, backward=False) == [m.Collective("all_gather", "z", 6 * 2 * 4)] + forward
    assert m.layer_ops(learned, grid, 0, backward=True)[-1] == m.Collective("reduce_scatter", "z", 6 * 2 * 4)
    # layer 1: rows y, cols z, feats x; its input is layer 0's output block, 12 x 2
    assert m.layer_ops(work, grid, 1, backward=True) == [
        machine.Elementwise(4 * 2),
        machine.GEMM(2, 4, 2),                                 # dW block 2 x 2 = H^T (2 x 4) dQ (4 x 2)
        m.Collective("reduce_scatter", "y", (2 * 2 + 2) * 4),   # and the bias block
        machine.GEMM(4, 2, 2),                                 # dH 4 x 2
        machine.Elementwise(4 * 2 + 12 * 2),
        m.Collective("all_reduce", "z", 4 * 2 * 4),
        machine.SpMM(rows=12, common=4, nnz=16, width=2),      # A^T block
        m.Collective("all_reduce", "y", 12 * 2 * 4),     # dF, replicated along Y
    ]
    # fixed input features: layer 0's backward stops at dW
    assert [type(op) for op in m.layer_ops(work, grid, 0, backward=True)] == [machine.Elementwise, machine.GEMM, m.Collective]


def test_spmm_flops_are_the_same_on_every_grid():
    """Plexus eq. 4.3: 2 nnz D / G per rank whatever the grid (divisible sizes)."""
    work = m.Workload(nodes=64, nnz=640, widths=(16, 8, 4))
    for grid in factorizations(8):
        for layer in range(work.layers):
            spmm = next(op for op in m.layer_ops(work, grid, layer, False) if isinstance(op, machine.SpMM))
            assert spmm.nnz * spmm.width * 8 == work.nnz * work.widths[layer]


def test_bandwidth_of_groups_that_span_nodes():
    links = machine.group_links(Grid(2, 2, 2), 4, NET)        # ranks (z, x, y), 4 per node
    assert links["y"] == (100e9, 0.0) and links["x"] == (100e9, 0.0)
    assert links["z"] == (20e9 / 4, 0.0)                 # 4 Z rings leave every node (eq. 4.6)
    assert machine.group_links(Grid(2, 2, 2), 8, NET)["z"] == (100e9, 0.0)
    assert machine.group_links(Grid(2, 2, 2), 4, NET, order="xyz")["x"] == (20e9 / 4, 0.0)
    assert machine.group_links(Grid(8, 1, 1), 4, NET)["world"] == (20e9, 0.0)  # one ring


def test_tall_skinny_penalty_reproduces_plexus_u_and_v():
    """ogbn-products on 64 GPUs: the same flops on a 64x thinner operand ran ~8x slower."""
    work = m.Workload.gcn(2_449_029, 123_718_280, 100, 128, 47, 3)
    spmm = {}
    for name, grid in (("U", Grid(64, 1, 1)), ("V", Grid(1, 64, 1))):
        op = next(op for op in m.layer_ops(work, grid, 0, backward=False) if isinstance(op, machine.SpMM))
        spmm[name] = machine.GPU_RATES.spmm(op)
    assert 5 < spmm["V"] / spmm["U"] < 12


def test_prediction_adds_up_and_ranks():
    work = m.Workload.gcn(100_000, 1_000_000, 128, 16, 10, 2)
    ranked = m.rank_grids(work, 8, machine.GPU_RATES, NET)
    assert len(ranked) == 10 and [p.total for p in ranked] == sorted(p.total for p in ranked)
    best = ranked[0]
    assert best.total == pytest.approx(best.spmm + best.dense + sum(best.comm.values()))
    assert m.best_grid(8, 100_000, 1_100_000, (128, 16, 10), network=NET) == \
        {"x": best.grid.x, "y": best.grid.y, "z": best.grid.z}


# Wall-clock bound only against a pathological slowdown (a loaded machine must not fail it);
# the operation counts are what the planner's cost is asserted by.
GENEROUS = 30.0


@pytest.fixture()
def predictions(monkeypatch):
    """Counts the model's evaluations: one per grid, each a fixed list of operations."""
    counts = {"predict": 0, "ops": []}
    predict, epoch_ops = m.predict, m.epoch_ops

    def counting_predict(*args, **kwargs):
        counts["predict"] += 1
        return predict(*args, **kwargs)

    def counting_epoch_ops(*args, **kwargs):
        ops = epoch_ops(*args, **kwargs)
        counts["ops"].append(len(ops))
        return ops

    monkeypatch.setattr(m, "predict", counting_predict)
    monkeypatch.setattr(m, "epoch_ops", counting_epoch_ops)
    return counts


def test_planning_1024_ranks_is_fast(predictions):
    work = m.Workload.gcn(100_000_000, 1_000_000_000, 128, 256, 64, 3)
    start = time.perf_counter()
    ranked = m.rank_grids(work, 1024, machine.GPU_RATES, machine.GPU_NETWORK, ranks_per_node=4)
    assert time.perf_counter() - start < GENEROUS
    assert len(ranked) == 66
    # one prediction per grid, each over as many operations as 8 ranks or a tiny graph need:
    # the cost grows with the number of grids only, not with ranks, nodes or edges
    assert predictions["predict"] == 66 and len(predictions["ops"]) == 66
    small = len(m.epoch_ops(m.Workload.gcn(1000, 8000, 128, 256, 64, 3), Grid(2, 2, 2)))
    assert max(predictions["ops"]) <= small


def test_fit_recovers_linear_costs():
    rng = np.random.default_rng(0)
    cols = rng.uniform(1, 100, size=(20, 3))
    truth = np.array([2.0, 0.5, 0.0])
    assert _fit(cols.tolist(), (cols @ truth).tolist()) == pytest.approx(truth, abs=1e-9)


def test_rmat_spec_is_sized_without_generating(monkeypatch):
    from gnnmesh import datasets
    from gnnmesh.datasets import generators
    monkeypatch.setattr(datasets, "load", lambda *a, **k: pytest.fail("the graph was loaded"))
    monkeypatch.setattr(generators, "rmat", lambda *a, **k: pytest.fail("the graph was generated"))
    start = time.perf_counter()
    name, nodes, entries, features, classes = graph_size("rmat:scale=30,edge_factor=16,undirected=true", None)
    assert (nodes, entries, features, classes) == (2**30, 2 * 16 * 2**30, 128, 10)
    assert time.perf_counter() - start < GENEROUS


# ---------------------------------------------------------------------------- the command

def _plan(capsys, *flags):
    code = main(["plan", "--strategy", "grid3d", *flags])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_every_grid_ranked(capsys):
    code, out, err = _plan(capsys, "--nproc", "8", "--nodes", "100000", "--edges", "1000000",
                           "--intra-bw", "100", "--inter-bw", "20", "--gpus-per-node", "4")
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank"))
    rows = [line.split() for line in lines[start + 1:-1]]
    assert [int(r[0]) for r in rows] == list(range(1, 11))
    assert lines[-1].startswith(f"choice: grid3d {rows[0][1]} (fastest predicted epoch, ") and "% of its epoch is " in lines[-1]
    grids = [tuple(map(int, r[1].split("x"))) for r in rows]
    assert sorted(grids) == sorted((g.x, g.y, g.z) for g in factorizations(8))
    totals = [float(r[2]) for r in rows]
    assert totals == sorted(totals)
    assert "2 nodes (4 per node)" in out and "100 GB/s" in out


def test_plan_1024_ranks_from_the_command_line(capsys, predictions):
    start = time.perf_counter()
    code, out, _ = _plan(capsys, "--nproc", "1024", "--gpus-per-node", "4", "--nodes", "100000000",
                         "--edges", "1000000000", "--hidden", "256", "--layers", "3", "--top", "5")
    assert code == 0 and time.perf_counter() - start < GENEROUS
    assert predictions["predict"] == 66  # every grid once, from sizes alone
    assert "256 nodes" in out and out.strip().splitlines()[-2].split()[0] == "5"
    assert out.strip().splitlines()[-1].startswith("choice: grid3d ")


def test_plan_rates_file_round_trip(capsys, tmp_path):
    path = tmp_path / "rates.json"
    code, first, _ = _plan(capsys, "--nproc", "4", "--nodes", "1000", "--edges", "8000",
                           "--save-rates", str(path))
    assert code == 0 and set(json.loads(path.read_text())) == {"compute", "network"}
    code, again, _ = _plan(capsys, "--nproc", "4", "--nodes", "1000", "--edges", "8000",
                           "--rates", str(path))
    assert code == 0 and again == first


@pytest.mark.parametrize("flags, named", [
    (["--nproc", "0", "--nodes", "10", "--edges", "10"], "--nproc"),
    (["--nproc", "4"], "--dataset"),
    (["--nproc", "4", "--nodes", "10"], "--edges"),
    (["--nproc", "4", "--nodes", "10", "--edges", "-1"], "--edges"),
    (["--nproc", "4", "--dataset", "cora", "--nodes", "10", "--edges", "5"], "--dataset"),
    (["--nproc", "4", "--nodes", "10", "--edges", "10", "--intra-bw", "0"], "--intra-bw"),
    (["--nproc", "4", "--nodes", "10", "--edges", "10", "--layers", "0"], "--layers"),
    (["--nproc", "4", "--nodes", "10", "--edges", "10", "--rates", "missing.json"], "--rates"),
    (["--nproc", "4", "--dataset", "rmat:nodes=10,bogus=1"], "bogus"),
    # a bandwidth so low, or a latency so long, that an epoch would be priced at infinity
    (["--nproc", "4", "--nodes", "10", "--edges", "10", "--intra-bw", "1e-300"], "--intra-bw"),
    (["--nproc", "4", "--nodes", "10", "--edges", "10", "--inter-latency", "1e300"], "--inter-latency"),
    # a model the planner would have to allocate to trace (2^48 features: petabytes of weights; the
    # grid3d view prices from sizes alone and plans it)
    (["--strategy", "all", "--nproc", "4", "--nodes", "10", "--edges", "10", "--features", "281474976710655"],
     "268,435,456"),
    (["--strategy", "all", "--nproc", "4", "--nodes", "10", "--edges", "10", "--features", "1000000", "--hidden", "256",
      "--model", "gat"], "2,048,026,654 parameters"),
    (["--strategy", "offload", "--dataset", "cora", "--device-memory", "1GiB", "--features", "281474976710655"],
     "268,435,456"),
])
def test_plan_bad_input_exits_2_with_one_line(capsys, flags, named):
    code, out, err = _plan(capsys, *flags)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gnnmesh: error:")
    assert named in lines[0]


def test_plan_bad_flag_value_exits_2(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["plan", "--nproc", "four", "--nodes", "10", "--edges", "10"])
    assert stop.value.code == 2 and "--nproc" in capsys.readouterr().err


@pytest.mark.parametrize("table, field, value", [("compute", "epoch_overhead", 1e308), ("network", "intra_bw", 1e-300),
                                                 ("compute", "spmm_per_nnz", 1e300), ("compute", "crowding", 1e300)])
def test_rates_with_finite_extremes_are_refused(tmp_path, capsys, table, field, value):
    """Finite rates that price an epoch at infinity (an OverflowError in plan, a rank's traceback
    under --strategy auto) are refused when the file is read, naming the field."""
    from gnnmesh.planner.rates import write
    path = tmp_path / "rates.json"
    write(path, machine.GPU_RATES, machine.GPU_NETWORK)
    content = json.loads(path.read_text())
    content[table][field] = value
    path.write_text(json.dumps(content))
    code, out, err = _plan(capsys, "--nproc", "4", "--nodes", "1000", "--edges", "10000", "--rates", str(path))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and f"'{table}.{field}'" in lines[0] and str(path) in lines[0], err
