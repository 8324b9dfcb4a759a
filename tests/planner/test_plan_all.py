"""``gnnmesh plan --strategy all`` and the ranking across strategies (gnnmesh.planner.rank)."""

import re

import pytest

from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.planner.explain import choice
from gnnmesh.layout.grid import Grid, factorizations
from gnnmesh.partition import MissingExtraError, partition
from gnnmesh.partition import methods as partition_methods
from gnnmesh.planner import grid3d
from gnnmesh.planner import partition as partition_model
from gnnmesh.planner.estimate import Estimate
from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
from gnnmesh.planner.grid3d import grid3d_estimate
from gnnmesh.planner.rank import Ranking, rank_strategies
from gnnmesh.report.plan_file import read_plan

MiB = 2**20


@pytest.fixture(scope="module")
def cora():
    return datasets.load("cora")


def widths(graph, hidden=16):
    return (graph.num_features, hidden, graph.num_classes)


def plan(capsys, *flags):
    code = main(["plan", "--strategy", "all", *flags])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list:
    """The ranked table: (rank, candidate, ms/epoch, epoch ms, setup s, comm MiB, peak, dominant)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank  candidate"))
    table = []
    for line in lines[start + 1:]:
        if not re.match(r"\s*\d+\s", line):
            break
        table.append(re.split(r"\s{2,}", line.strip()))
    return table


def left_out(out: str) -> dict:
    """``{candidate: reason}`` of the 'not ranked' list."""
    lines = out.splitlines()
    if "not ranked:" not in lines:
        return {}
    found = {}
    for line in lines[lines.index("not ranked:") + 1:]:
        if not line.startswith("  "):
            break
        name, reason = line.strip().split(": ", 1)
        found[name] = reason
    return found


def choice_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("choice: "))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nproc", [2, 4])
def test_every_strategy_is_ranked_and_written(capsys, tmp_path, cora, nproc):
    path = tmp_path / "plan.json"
    code, out, err = plan(capsys, "--dataset", "cora", "--nproc", str(nproc), "--json", str(path))
    assert code == 0, err
    table = rows(out)
    names = [r[1] for r in table]
    grids = {f"grid3d {g}" for g in factorizations(nproc)}
    assert {"partition rp", "tensor"} | grids <= set(names) and len(set(names)) == len(names)
    assert "tensor decoupled" not in names                       # a different model: only with --decoupled
    for method, module in (("gp", "pymetis"), ("hp", "mtkahypar")):   # ranked where installed, else said why
        assert f"partition {method}" in names or module in left_out(out).get(f"partition {method}", "")
    assert [int(r[0]) for r in table] == list(range(1, len(table) + 1))
    costs = [float(r[2]) for r in table]
    assert costs == sorted(costs) and costs[0] < costs[-1]
    # the ranked time is the epoch plus the setup spread over the default 200 epochs
    for r in table:
        assert float(r[2]) == pytest.approx(float(r[3]) + float(r[4]) * 1e3 / 200, rel=2e-3, abs=2e-4)
        assert (float(r[4]) > 0) == r[1].startswith("partition")
    assert choice_line(out).startswith(f"choice: {names[0]} (")
    assert "The planner against measurement" in out
    written = read_plan(path)
    assert written.strategy == "all" and [c.name for c in written.candidates] == names
    for c, r in zip(written.candidates, table):
        assert c.predicted_epoch_s * 1e3 == pytest.approx(float(r[3]), rel=1e-3)
        assert c.bytes_per_rank / MiB == pytest.approx(float(r[5]), rel=1e-3)
        assert c.peak_memory_bytes / MiB == pytest.approx(float(r[6].lstrip("~")), rel=1e-3)
        assert r[6].startswith("~") == r[1].startswith("grid3d")   # grid3d's peak is marked rough
    # the partition candidate's bytes are the partition model's for the same partition
    rp = partition(cora, nproc, "rp", epsilon=0.01, seed=0)
    expected = partition_model.estimate(cora, rp, widths(cora), "gcn", GPU_RATES, GPU_NETWORK)
    assert next(c for c in written.candidates if c.name == "partition rp").bytes_per_rank == max(expected.rank_bytes)


@pytest.mark.timeout(60)
def test_the_ranking_prices_each_partition_with_its_model(cora):
    ranking = rank_strategies(cora, 3, "gcn", widths(cora), GPU_RATES, GPU_NETWORK, partitioners=("rp", "contiguous"),
                              epochs=10)
    by_name = {e.strategy: e for e in ranking.ranked}
    for method in ("rp", "contiguous"):
        part = partition(cora, 3, method, epsilon=0.01, seed=0)
        expected = partition_model.estimate(cora, part, widths(cora), "gcn", GPU_RATES, GPU_NETWORK)
        assert by_name[f"partition {method}"] == expected and expected.setup_s == part.seconds
    costs = [ranking.cost(e) for e in ranking.ranked]
    assert costs == sorted(costs)
    assert all(ranking.cost(e) == e.epoch_s + e.setup_s / 10 for e in ranking.ranked)
    # 3 ranks: grids 3x1x1, 1x3x1, 1x1x3, each its grid3d prediction
    assert {n for n in by_name if n.startswith("grid3d")} == {"grid3d 3x1x1", "grid3d 1x3x1", "grid3d 1x1x3"}


@pytest.mark.timeout(60)
def test_memory_limit_drops_candidates_with_the_reason(capsys, cora):
    code, out, err = plan(capsys, "--dataset", "cora", "--nproc", "4", "--partitioner", "rp",
                          "--device-memory", "10MiB")
    assert code == 0, err
    names = [r[1] for r in rows(out)]
    assert "partition rp" in names and "tensor" in names and not any(n.startswith("grid3d") for n in names)
    assert all(float(r[6].lstrip("~")) <= 10 for r in rows(out))
    dropped = left_out(out)
    assert set(dropped) == {f"grid3d {g}" for g in factorizations(4)} | {"offload rp"}
    assert "give at least" in dropped.pop("offload rp")  # below what any plan's fast tier holds
    for reason in dropped.values():
        peak = float(re.match(r"peak ([\d.]+) MiB per rank is over the limit of 10 MiB", reason).group(1))
        assert peak > 10
    # the library drops exactly the candidates above the limit
    free = rank_strategies(cora, 4, "gcn", widths(cora), GPU_RATES, GPU_NETWORK, partitioners=("rp",))
    limit = sorted(max(e.peak_bytes) for e in free.ranked)[2]
    kept = rank_strategies(cora, 4, "gcn", widths(cora), GPU_RATES, GPU_NETWORK, partitioners=("rp",),
                           memory_limit=limit)
    # a limit also brings out-of-core training in, under that budget
    in_memory = [e.strategy for e in kept.ranked if not e.strategy.startswith("offload")]
    assert in_memory == [e.strategy for e in free.ranked if max(e.peak_bytes) <= limit]
    assert len(in_memory) == 3 and {d.name for d in kept.dropped} - {"offload rp"} == \
        {e.strategy for e in free.ranked} - set(in_memory)
    offload = [e for e in kept.ranked if e.strategy == "offload rp"]
    assert all(max(e.peak_bytes) <= limit for e in offload)
    assert offload or "offload rp" in {d.name for d in kept.dropped}
    # nothing fits: no choice, no plan file, status 1
    code, out, _ = plan(capsys, "--dataset", "cora", "--nproc", "2", "--partitioner", "rp", "--device-memory", "1MiB")
    assert code == 1 and "no candidate left to rank" in out and choice_line(out).startswith("choice: none")


@pytest.mark.timeout(60)
def test_models_grid3d_does_not_price_are_left_out_with_the_reason(capsys):
    code, out, err = plan(capsys, "--dataset", "cora", "--nproc", "2", "--partitioner", "rp", "--model", "gat")
    assert code == 0, err
    names = [r[1] for r in rows(out)]
    assert names and not any(n.startswith("grid3d") for n in names) and "partition rp" in names
    assert left_out(out) == {"grid3d": "the grid3d strategy does not run gat"}
    assert "gat 1433-8-7 (8 heads)" in out
    code, out, err = plan(capsys, "--dataset", "cora", "--nproc", "2", "--partitioner", "rp", "--model", "sage")
    assert code == 0, err
    assert left_out(out) == {"grid3d": "the grid3d strategy runs sage, but its performance model prices GCN "
                                       "layers only"}
    # a decoupled model: tensor's decoupled form instead of the plain one, no grid3d
    code, out, err = plan(capsys, "--dataset", "cora", "--nproc", "2", "--partitioner", "rp", "--decoupled")
    names = [r[1] for r in rows(out)]
    assert code == 0 and "tensor decoupled" in names and "tensor" not in names
    assert left_out(out) == {"grid3d": "the grid3d strategy does not run decoupled gcn"}


@pytest.mark.timeout(60)
def test_a_missing_partitioner_is_left_out_with_the_reason(monkeypatch, tmp_path, cora):
    def missing(*args):
        raise MissingExtraError("method 'gp' needs pymetis: pip install 'gnnmesh[partitioners]'")

    monkeypatch.setattr(partition_methods, "metis", missing)
    ranking = rank_strategies(cora, 2, "gcn", widths(cora), GPU_RATES, GPU_NETWORK, partitioners=("rp", "gp"),
                              cache_dir=tmp_path)
    assert [(d.name, d.reason) for d in ranking.dropped] == [("partition gp", "method 'gp' needs pymetis: pip "
                                                              "install 'gnnmesh[partitioners]'")]
    assert "partition rp" in {e.strategy for e in ranking.ranked}


def test_grid3d_estimate_and_rough_peak():
    work = grid3d.Workload.gcn(10_000, 100_000, 128, 64, 10, 2, evaluate=True)
    for grid in (Grid(1, 1, 1), Grid(2, 2, 1), Grid(1, 2, 4)):
        p = grid3d.predict(work, grid, GPU_RATES, GPU_NETWORK)
        e = grid3d_estimate(work, p)
        assert e.strategy == f"grid3d {grid}" and e.epoch_s == pytest.approx(p.total) and e.setup_s == 0
        assert e.rank_bytes == [grid3d.payload_bytes(work, grid)] * grid.size
        assert e.compute_s == pytest.approx(p.spmm + p.dense) and e.comm_s == pytest.approx(p.communication)
    # one rank holds the parameters four times over, the graph and the whole features
    whole = grid3d.peak_bytes(work, Grid(1, 1, 1))
    assert whole > 4 * 4 * work.parameters + 10_000 * 128 * 4 + 110_000 * 12
    peaks = [grid3d.peak_bytes(work, Grid(n, n, n)) for n in (1, 2, 4)]
    assert peaks[0] > peaks[1] > peaks[2] > 4 * 4 * work.parameters


def _estimate(name, epoch, setup=0.0):
    return Estimate(name, epoch, epoch, 0.0, setup, [0], {}, [0], "dense")


def test_the_choice_line_says_why():
    far = Ranking((_estimate("a", 1.0), _estimate("b", 2.0)), (), 100)
    assert choice(far) == "choice: a (fastest predicted epoch, 2.00x ahead of the next, b)"
    near = Ranking((_estimate("a", 1.0), _estimate("b", 1.02)), (), 100)
    assert "b is within 2.0%" in choice(near)
    # b's epoch is shorter, but its setup spread over 100 epochs makes it slower
    setup = Ranking((_estimate("a", 1.0), _estimate("b", 0.9, setup=50.0)), (), 100)
    assert choice(setup).startswith("choice: a (fastest predicted epoch with the setup spread over 100 epochs, ")
    assert "b's epoch alone is 10.0% shorter, but it takes 50 s to set up" in choice(setup)
    assert choice(Ranking((_estimate("a", 1.0),), (), 1)) == "choice: a (the only candidate left)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags, named", [
    (["--nproc", "2"], "--dataset"),
    (["--nproc", "2", "--nodes", "10", "--edges", "10", "--dataset", "cora"], "--dataset"),
    (["--dataset", "cora"], "--nproc"),
    (["--dataset", "cora", "--nproc", "0"], "--nproc"),
    (["--dataset", "cora", "--nproc", "2", "--partitioner", "shp"], "--partitioner"),
    (["--dataset", "cora", "--nproc", "2", "--device-memory", "lots"], "device_memory"),
    (["--dataset", "cora", "--nproc", "2", "--epochs", "0"], "epochs"),
    (["--dataset", "cora", "--nproc", "2", "--model", "gin", "--decoupled"], "gin"),
    (["--dataset", "cora", "--nproc", "2", "--rates", "missing.json"], "--rates"),
    (["--dataset", "nosuch", "--nproc", "2"], "nosuch"),
])
def test_bad_input_exits_2_with_one_line(capsys, flags, named):
    code, out, err = plan(capsys, *flags)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gnnmesh: error:") and named in lines[0]


def test_other_strategies_refuse_epochs_and_take_the_node_alias(capsys):
    grid3d_plan = ["plan", "--strategy", "grid3d", "--nproc", "4", "--nodes", "100", "--edges", "400"]
    assert main(grid3d_plan + ["--epochs", "5"]) == 2
    assert "--epochs" in capsys.readouterr().err
    assert main(grid3d_plan + ["--nodes-per-host", "2"]) == 0
    assert "2 nodes (2 per node)" in capsys.readouterr().out
