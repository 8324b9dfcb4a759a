"""Partitioned datasets on disk: written once, each rank reads only its own folder, and
training from them equals training from the dataset (real gloo ranks)."""

import json
import shutil

import numpy as np
import pytest
import torch

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError, GraphError
from gnnmesh.parallel.grid3d.strategy import Grid3D
from gnnmesh.parallel.partition.strategy import PartitionParallel
from gnnmesh.parallel.tensor.strategy import TensorParallel
from gnnmesh.partition import partition, rank_halo
from gnnmesh.parts import MANIFEST, open_parts
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.parallel.grid3d.parts import write_grid_parts
from gnnmesh.parallel.tensor.parts import write_tensor_parts
from gnnmesh.view import OPERATORS

from tests.dist import run_ranks
from tests.helpers import model_fields, random_graph, layout
from tests.parity import assert_same_run, train
from tests.forked import run_cli

EPOCHS = 5  # several steps of Adam: parameters and moments carried from epoch to epoch


def make_graph(weighted=False):
    # 37 nodes (divisible by none of 2, 3, 4), directed, self-loops, two isolated nodes
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2, weighted=weighted)


def config(model, layers=2):
    return Config.of(**model_fields(model), epochs=EPOCHS, seed=1, hidden=8, layers=layers)


def one_host_per_rank(directory, tmp_path, parts):
    """A copy of ``directory`` per rank holding the manifest and that rank's folder only."""
    hosts = []
    for rank in range(parts):
        host = tmp_path / f"host{rank}"
        host.mkdir()
        shutil.copy(directory / MANIFEST, host / MANIFEST)
        shutil.copytree(directory / f"rank-{rank:05d}", host / f"rank-{rank:05d}")
        hosts.append(str(host))
    return hosts


# -- partition parts -------------------------------------------------------------------------

def test_partition_parts_hold_each_ranks_plan(tmp_path):
    graph = make_graph(weighted=True)
    part = partition(graph, 3, "rp", cache=False)
    write_partition_parts(graph, part, tmp_path / "p", "random")
    parts = open_parts(tmp_path / "p")
    assert (parts.kind, parts.parts, parts.num_nodes, parts.num_features) == ("partition", 3, 37, 6)
    for rank in range(3):
        mine = parts.rank(rank)
        owned = mine.array("owned")
        assert np.array_equal(owned, np.flatnonzero(part.assignment == rank))
        assert np.array_equal(mine.array("x"), graph.x.numpy()[owned])
        assert np.array_equal(mine.array("y"), graph.y.numpy()[owned])
        for name, build in OPERATORS.items():
            op = build(graph.adj)
            plan = rank_halo(op, part.assignment, 3, rank)
            structure = parts.manifest["operators"][name]["structure"]
            assert np.array_equal(mine.array(f"{structure}.indices"), plan.block.indices.numpy())
            assert np.array_equal(mine.array(f"{structure}.entries"), plan.entry_ids)
            assert np.array_equal(mine.array(f"{structure}.halo"), plan.halo)
            if op.values is not None:
                assert np.array_equal(mine.array(f"{name}.values"), op.values.numpy()[plan.entry_ids])
    # gcn and loop share A + I; sum and mean share A: each structure is stored once
    assert len(parts.manifest["structures"]) == 2


def _partition_rank(rank, world, hosts, models):
    parts = open_parts(hosts[rank])
    return {model: train(parts, config(model), PartitionParallel(layout("partition"), "cpu")) for model in models}


@pytest.mark.timeout(300)
@pytest.mark.slow
@pytest.mark.parametrize("world,method", [(3, "rp")])
def test_training_from_partition_parts_equals_the_single_process_run(tmp_path, world, method):
    """Every model; each rank sees only the manifest and its own folder, as on its own host."""
    models = ["gcn", "sage", "gin", "gat", "decoupled-gcn"]
    graph = make_graph()
    reference = {m: train(graph, config(m)) for m in models}
    write_partition_parts(graph, partition(graph, world, method, cache=False), tmp_path / "p", "random")
    hosts = one_host_per_rank(tmp_path / "p", tmp_path, world)
    for rank, got in enumerate(run_ranks(_partition_rank, world, hosts, models, timeout=240)):
        for model, run in got.items():
            try:
                assert_same_run(run, reference[model])
            except AssertionError as err:
                raise AssertionError(f"{model}, rank {rank} of {world}: {err}") from None


def _both_sources(rank, world, directory, assignment, model):
    import gnnmesh.parts.features as features
    features.BLOCK_ROWS = 4  # several blocks a rank, from the mapped table and from memory alike
    passes, blocks = [], features.MappedFeatures.blocks

    def counted(self, rows=None):  # a pass over the mapped table starts at row 0
        for block in blocks(self, rows):
            passes.extend([block[0]] if block[0].start == 0 else [])
            yield block
    features.MappedFeatures.blocks = counted
    cfg = Config.of(**model_fields(model), epochs=EPOCHS, seed=1, hidden=4, layers=2)  # 6 -> 4: projects first
    strategy = (lambda **kw: PartitionParallel(layout("partition"), "cpu", **kw))
    from_parts = train(open_parts(directory), cfg, strategy())
    return from_parts, train(make_graph(), cfg, strategy(assignment=assignment)), len(passes)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("model", ["gcn", pytest.param("sage", marks=pytest.mark.slow),
                                   pytest.param("gin", marks=pytest.mark.slow)])
def test_training_from_parts_is_training_from_the_dataset_bit_for_bit(tmp_path, monkeypatch, model):
    """The first layer read a block of rows at a time (its dropout drawn, and its weights'
    gradient summed, a block at a time) and the backward products taken from the operator's
    rows (compiled kernels on this small graph): from the parts and from the dataset the same
    numbers, bit for bit, and the single process's to 1e-5."""
    monkeypatch.setenv("GNNMESH_KERNELS", "compiled")
    graph = make_graph()
    part = partition(graph, 2, "rp", cache=False)
    write_partition_parts(graph, part, tmp_path / "p", "random")
    reference = train(graph, Config.of(**model_fields(model), epochs=EPOCHS, seed=1, hidden=4, layers=2))
    for rank, (from_parts, from_graph, passes) in enumerate(run_ranks(_both_sources, 2, str(tmp_path / "p"),
                                                                      part.assignment, model, timeout=200)):
        assert passes >= 1 + 2 * EPOCHS  # the check, then each epoch's forward and backward pass
        assert from_parts["losses"] == from_graph["losses"], f"rank {rank}"
        assert all(torch.equal(from_parts["params"][k], v) for k, v in from_graph["params"].items()), f"rank {rank}"
        assert_same_run(from_parts, reference)


# -- grid3d parts ----------------------------------------------------------------------------

def _grid_rank(rank, world, directory, grid, layers):
    return train(open_parts(directory), config("gcn", layers), Grid3D(layout("grid3d", grid), "cpu"))


@pytest.mark.timeout(300)
@pytest.mark.slow  # grid3d from parts on 2 and 4 ranks; grid3d's own parity tests run in the fast suite
@pytest.mark.parametrize("grid,layers", [("1,2,2", 2), ("2,1,2", 3), ("2,1,1", 7)])
def test_training_from_grid_parts_equals_the_single_process_run(tmp_path, grid, layers):
    graph = make_graph()
    dims = dict(zip("xyz", map(int, grid.split(","))))
    write_grid_parts(graph, dims, tmp_path / "g", "random", layers=layers, seed=1)
    reference = train(graph, config("gcn", layers))
    world = int(np.prod(list(dims.values())))
    for rank, got in enumerate(run_ranks(_grid_rank, world, str(tmp_path / "g"), grid, layers, timeout=240)):
        assert_same_run(got, reference)


def test_grid_parts_use_the_training_permutations(tmp_path):
    from gnnmesh.parallel.grid3d.blocks import GridBlocks

    graph = make_graph()
    dims = {"x": 2, "y": 1, "z": 2}
    write_grid_parts(graph, dims, tmp_path / "g", "random", seed=5)
    orders = open_parts(tmp_path / "g").rank(3).array("orders")
    layout = GridBlocks(dims, graph.num_nodes, True, 5, adj=graph.adj)
    assert np.array_equal(orders[0], layout.orders[0]) and np.array_equal(orders[1], layout.orders[1])


# -- tensor parts ----------------------------------------------------------------------------

def _tensor_rank(rank, world, hosts, runs):
    parts = open_parts(hosts[rank])
    return {model: train(parts, config(model).updated(strategy="tensor"), TensorParallel(layout("tensor"), "cpu", chunk_size=9))
            for model in runs}


@pytest.mark.slow  # two tensor trainings
@pytest.mark.timeout(300)
def test_training_from_tensor_parts_equals_the_single_process_run(tmp_path):
    runs = ["gat", "gin", "decoupled-gcn"]
    graph = make_graph(weighted=True)
    reference = {run: train(graph, config(run)) for run in runs}
    write_tensor_parts(graph, 3, tmp_path / "t", "random")
    hosts = one_host_per_rank(tmp_path / "t", tmp_path, 3)
    for rank, got in enumerate(run_ranks(_tensor_rank, 3, hosts, runs, timeout=240)):
        for run, result in got.items():
            assert_same_run(result, reference[run])


# -- labels of every task --------------------------------------------------------------------

def target_graph(kind):
    """``make_graph`` with multilabel (0/1 [37, 4]) or regression ([37] floats) labels."""
    gen = torch.Generator().manual_seed(5)
    y = (torch.rand(37, 4, generator=gen) < 0.4).float() if kind == "multilabel" else torch.randn(37, generator=gen)
    return make_graph().replace(y=y)


@pytest.mark.parametrize("kind", ["multilabel", "regression"])
def test_parts_hold_targets_and_read_them_back_checked(tmp_path, kind):
    graph = target_graph(kind)
    path = tmp_path / "p"
    write_partition_parts(graph, partition(graph, 2, "rp", cache=False), path, "random")
    parts = open_parts(path)
    assert parts.task == kind and parts.num_classes == (4 if kind == "multilabel" else 1)
    for rank in range(2):
        mine = parts.rank(rank)
        owned = mine.array("owned")
        _, y, *_ = mine.vertex_data(len(owned), parts.num_features)
        assert torch.equal(y, graph.y[torch.from_numpy(owned)])
    # class ids where the manifest says targets: one line naming the file
    victim = path / "rank-00001" / "y.npy"
    np.save(victim, np.zeros(len(parts.rank(1).array("owned")), dtype=np.int64))
    manifest = json.loads((path / MANIFEST).read_text())
    from gnnmesh.parts.store import checksum
    manifest["ranks"][1]["files"]["y"] = checksum(victim)
    (path / MANIFEST).write_text(json.dumps(manifest))
    mine = open_parts(path).rank(1)
    with pytest.raises(GraphError, match=rf"rank-00001/y.npy: holds torch.int64 .*, not the {kind} labels"):
        mine.vertex_data(len(mine.array("owned")), parts.num_features)


def _target_rank(rank, world, directory):
    return train(open_parts(directory), config("gcn"), PartitionParallel(layout("partition"), "cpu"))


@pytest.mark.timeout(200)
@pytest.mark.slow
def test_training_multilabel_from_parts_equals_the_single_process_run(tmp_path):
    graph = target_graph("multilabel")
    reference = train(graph, config("gcn"))
    write_partition_parts(graph, partition(graph, 2, "rp", cache=False), tmp_path / "p", "random")
    for got in run_ranks(_target_rank, 2, str(tmp_path / "p"), timeout=150):
        assert_same_run(got, reference)
        assert np.allclose(got["accs"], reference["accs"], rtol=0, atol=1e-6)


# -- what does not match the run -------------------------------------------------------------

@pytest.fixture
def written(tmp_path):
    graph = make_graph()
    path = tmp_path / "p"
    write_partition_parts(graph, partition(graph, 2, "rp", cache=False), path, "random")
    return path


def test_a_run_the_parts_do_not_fit_is_refused(written):
    parts = open_parts(written)
    parts.check_run("partition", 2, "random")
    with pytest.raises(ConfigError, match=r"manifest.json: .*2 ranks\); this job has 3 ranks"):
        parts.check_run("partition", 3)
    with pytest.raises(ConfigError, match=r"manifest.json: .*--strategy partition, not tensor"):
        parts.check_run("tensor", 2)
    with pytest.raises(ConfigError, match=r"manifest.json: these parts hold dataset 'random', not 'cora'"):
        parts.check_run("partition", 2, "cora")


def test_missing_or_damaged_files_are_named(written):
    victim = written / "rank-00001" / "gcn.indices.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    open_parts(written).rank(0)  # another rank's damage is not this rank's business
    with pytest.raises(GraphError, match=r"rank-00001/gcn.indices.npy: corrupt part file"):
        open_parts(written).rank(1)
    victim.unlink()
    with pytest.raises(GraphError, match=r"rank-00001/gcn.indices.npy: missing part file"):
        open_parts(written).rank(1)
    shutil.rmtree(written / "rank-00001")
    with pytest.raises(GraphError, match=r"rank-00001: missing; this host has no folder for rank 1"):
        open_parts(written).rank(1)
    (written / MANIFEST).write_text("{")
    with pytest.raises(GraphError, match=r"manifest.json: unreadable parts manifest"):
        open_parts(written)


def test_writing_never_replaces_what_is_not_parts(tmp_path):
    graph = make_graph()
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not a parts directory"):
        write_partition_parts(graph, partition(graph, 2, "rp", cache=False), keep, "random")
    assert (keep / "notes.txt").read_text() == "mine"


def gnnmesh(*args, timeout=120):
    return run_cli(*args, timeout=timeout)


@pytest.mark.slow  # five command-line runs; the parts themselves are tested in-process above
@pytest.mark.timeout(200)
def test_cli_writes_parts_and_refuses_mismatched_runs_in_one_line(tmp_path):
    spec = "sbm:nodes=300,classes=3,features=8"
    out = gnnmesh("partition", "--dataset", spec, "--parts", "2", "--method", "contiguous",
                  "--write-parts", str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    assert "peak memory of this command" in out.stdout
    manifest = json.loads((tmp_path / "p" / MANIFEST).read_text())
    assert manifest["dataset"] == spec and manifest["parts"] == 2
    ok = gnnmesh("train", "--parts", str(tmp_path / "p"), "--nproc", "2", "--epochs", "1")  # strategy from the parts
    assert ok.returncode == 0 and "partition parts of" in ok.stdout, ok.stderr
    bad = gnnmesh("train", "--parts", str(tmp_path / "p"), "--nproc", "3", "--strategy", "partition",
                  "--epochs", "1")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "this job has 3 ranks" in bad.stderr
    # damage on rank 1 only: every rank stops, and rank 0 names rank 1's file
    victim = tmp_path / "p" / "rank-00001" / "x.npy"
    victim.write_bytes(victim.read_bytes()[:-4])
    bad = gnnmesh("train", "--parts", str(tmp_path / "p"), "--nproc", "2", "--strategy", "partition",
                  "--epochs", "1")
    assert bad.returncode == 2, bad.stderr
    assert "rank-00001/x.npy: corrupt part file" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    out = gnnmesh("partition", "--dataset", spec, "--strategy", "grid3d", "--grid", "2,2",
                  "--write-parts", str(tmp_path / "g"))
    assert out.returncode == 2 and "--grid X,Y,Z" in out.stderr


def test_page_out_drops_only_unmodified_file_pages(tmp_path):
    from gnnmesh.parts.vertex import page_out

    np.save(tmp_path / "a.npy", np.arange(1 << 20, dtype=np.float32))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="c")
    assert float(mapped.sum()) == float(np.arange(1 << 20, dtype=np.float64).sum())
    page_out(mapped)  # clean file pages: dropped, and read again on the next access
    assert np.array_equal(mapped, np.arange(1 << 20, dtype=np.float32))
    mapped[5] = -1.0  # a private write: that page is no longer the file's
    page_out(mapped)
    assert mapped[5] == -1.0 and mapped[6] == 6.0
    anonymous = np.arange(1 << 20, dtype=np.float32)
    page_out(anonymous)
    assert np.array_equal(anonymous, np.arange(1 << 20, dtype=np.float32))
