"""Parts written by P ranks from a sharded input (``gnnmesh.parallel.partition.parts_from_shards``), none of
which holds the whole graph, equal what the one-process writer makes from the whole graph,
file for file, for the same partition (real gloo ranks)."""

import json
import shutil

import numpy as np
import pytest

from gnnmesh.datasets.sharded import open_shards
from gnnmesh.errors import ConfigError, GraphError
from gnnmesh.partition import Partition, graph_key, partition
from gnnmesh.parts import MANIFEST, open_parts
from gnnmesh.parallel.partition.parts import write_partition_parts

from tests.dist import run_ranks
from tests.helpers import random_graph

GRAPHS = {  # directed with self-loops and isolated nodes, weighted or not; 41 nodes: no P divides it
    "plain": dict(n=41, e=170, features=5, classes=3, directed=True, isolated=2),
    "weighted": dict(n=41, e=170, features=5, classes=3, directed=True, isolated=2, weighted=True),
    "undirected": dict(n=41, e=120, features=5, classes=3, directed=False, isolated=1),
}


def shard(graph, directory, shards=3):
    from gnnmesh.datasets.sharding import write_graph_shards
    write_graph_shards(graph, directory, shards)
    return directory


def write_on_ranks(rank, world, jobs):
    """Every job (shard set, output, method, seed) on these ranks, in one start of them."""
    from gnnmesh.parallel.partition.parts_from_shards import write_parts_from_shards
    for directory, out, method, seed in jobs:
        write_parts_from_shards(open_shards(directory), out, method=method, epsilon=0.05, seed=seed, dataset="g")
    return True


def same_parts(ours, reference) -> None:
    """The two parts directories hold the same files and the same manifest (but the time)."""
    mine, theirs = (json.loads((d / MANIFEST).read_text()) for d in (ours, reference))
    for m in (mine, theirs):
        m.pop("partition_seconds")
    assert mine == theirs
    for r in range(mine["parts"]):
        folder = f"rank-{r:05d}"
        for name in mine["ranks"][r]["files"]:
            a, b = (np.load(d / folder / f"{name}.npy") for d in (ours, reference))
            assert a.dtype == b.dtype and np.array_equal(a, b), (folder, name)


def one_host(graph, parts, assignment, method, seed, out):
    """What ``gnnmesh partition --dataset`` writes for ``assignment``."""
    part = Partition(np.asarray(assignment), parts, method, 0.05, seed, 0.0, graph_key(graph.adj))
    return write_partition_parts(graph, part, out, "g")


def assignment_of(parts_dir) -> np.ndarray:
    parts = open_parts(parts_dir)
    owned = [np.load(parts_dir / f"rank-{r:05d}" / "owned.npy") for r in range(parts.manifest["parts"])]
    out = np.empty(sum(len(o) for o in owned), dtype=np.int64)
    for r, ids in enumerate(owned):
        out[ids] = r
    return out


@pytest.mark.parametrize("world", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_parts_from_shards_equal_the_one_process_writers(tmp_path, world):
    """rp and contiguous assign as the one-process partitioner does, and every file of every
    rank equals the one-process writer's: directed and undirected, weighted, self-loops."""
    jobs = []
    for name, spec in GRAPHS.items():
        source = shard(random_graph(**spec, seed=world), tmp_path / name / "shards")
        jobs += [(source, tmp_path / name / method, method, 3) for method in ("rp", "contiguous")]
    run_ranks(write_on_ranks, world, jobs, timeout=90)
    for source, out, method, seed in jobs:
        graph = open_shards(source).graph()
        expected = partition(graph, world, method, seed=seed, cache=False)
        assert np.array_equal(assignment_of(out), expected.assignment), out
        same_parts(out, one_host(graph, world, expected.assignment, method, seed, out.parent / f"{method}-one"))


def test_the_reference_graph_is_the_graph_sharded(tmp_path):
    graph = random_graph(**GRAPHS["weighted"], seed=5)
    back = open_shards(shard(graph, tmp_path / "s")).graph()
    for field in ("indptr", "indices", "values"):
        assert np.array_equal(getattr(back.adj, field).numpy(), getattr(graph.adj, field).numpy())
    assert np.array_equal(back.x.numpy(), graph.x.numpy()) and np.array_equal(back.y.numpy(), graph.y.numpy())


def test_lp_parts_equal_the_one_process_writers_for_their_partition(tmp_path):
    graph = random_graph(**GRAPHS["undirected"], seed=7)
    source = shard(graph, tmp_path / "s")
    run_ranks(write_on_ranks, 3, [(source, tmp_path / "lp", "lp", 0)], timeout=90)
    assignment = assignment_of(tmp_path / "lp")
    assert sorted(set(assignment.tolist())) == [0, 1, 2]
    same_parts(tmp_path / "lp", one_host(open_shards(source).graph(), 3, assignment, "lp", 0, tmp_path / "one"))
    assert open_parts(tmp_path / "lp").manifest["how"] == "lp, epsilon 0.05, seed 0"


def refuse_on_ranks(rank, world, inputs, out, method):
    from gnnmesh.parallel.partition.parts_from_shards import write_parts_from_shards
    try:
        write_parts_from_shards(open_shards(inputs[rank]), out, method=method, epsilon=0.05, seed=0, dataset="g")
    except (GraphError, ConfigError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def test_ranks_that_read_different_inputs_are_refused_and_write_nothing(tmp_path):
    first = shard(random_graph(**GRAPHS["plain"], seed=1), tmp_path / "a")
    second = shard(random_graph(**GRAPHS["plain"], seed=2), tmp_path / "b")
    out = tmp_path / "parts"
    errors = run_ranks(refuse_on_ranks, 2, [first, second], out, "rp", timeout=60)
    assert errors[0] == errors[1] and errors[0].startswith("GraphError: ") and "rank 1 read another" in errors[0]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_failing_rank_leaves_the_earlier_parts_intact(tmp_path):
    """Rank 1's edge shard is torn: every rank stops with its error, and the parts written
    before are as they were (nothing staged is left beside them)."""
    source = shard(random_graph(**GRAPHS["plain"], seed=1), tmp_path / "s", shards=2)
    out = tmp_path / "parts"
    write_on_ranks(0, 1, [(source, out, "rp", 0)])  # one rank, in this process
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    broken = tmp_path / "broken"
    shutil.copytree(source, broken)
    last = sorted(broken.glob("edges-*.dst.npy"))[-1]
    last.write_bytes(last.read_bytes()[:-16])
    errors = run_ranks(refuse_on_ranks, 2, [broken, broken], out, "rp", timeout=60)
    assert errors[0] == errors[1] and last.name in errors[0], errors
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "parts", "s"]


def test_methods_that_need_the_whole_graph_are_refused(tmp_path):
    from gnnmesh.parallel.partition.parts_from_shards import write_parts_from_shards
    source = open_shards(shard(random_graph(**GRAPHS["plain"], seed=1), tmp_path / "s"))
    with pytest.raises(ConfigError, match="--partitioner gp needs the whole graph in one process"):
        write_parts_from_shards(source, tmp_path / "p", method="gp", epsilon=0.05, seed=0, dataset="g")


@pytest.mark.slow  # a run large enough to be killed in the middle
@pytest.mark.timeout(300)
def test_a_rank_killed_mid_way_leaves_no_parts(tmp_path):
    """SIGKILL to one rank while the ranks write into the staging directory: the job fails,
    the output directory never appears, and the next run leaves no temporary behind."""
    import subprocess
    import sys
    import time

    import psutil

    from gnnmesh.atomic import is_temporary
    from gnnmesh.datasets.sharding import write_shards

    source = tmp_path / "g"
    write_shards("rmat:nodes=100000,edges=1000000,features=64", source, 4)
    out = tmp_path / "parts"
    command = [sys.executable, "-m", "gnnmesh", "partition", "--nproc", "2", "--input", str(source),
               "--partitioner", "rp", "--write-parts", str(out)]
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(is_temporary(p.name) for p in tmp_path.iterdir()):
            assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()
            time.sleep(0.01)
        ranks = [p for p in psutil.Process(job.pid).children(recursive=True) if "gnnmesh" in " ".join(p.cmdline())]
        ranks[-1].kill()
        assert job.wait(120) != 0
    finally:
        job.kill()
        job.stderr.close()
    assert not out.exists()
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert out.is_dir() and not [p.name for p in tmp_path.iterdir() if is_temporary(p.name)]


def write_simulated(comm, directory, out, method):
    from gnnmesh.parallel.partition.parts_from_shards import write_parts_from_shards
    write_parts_from_shards(open_shards(directory), out, method=method, epsilon=0.05, seed=3, dataset="g", comm=comm)
    return True


@pytest.mark.parametrize("method", ["rp", "contiguous"])
def test_parts_are_the_same_when_every_exchange_takes_many_rounds(tmp_path, monkeypatch, method):
    """Rounds of 5 items (so each rank's edges, rows, questions and answers take many rounds,
    some ranks sending none in the last): the files still equal the one-process writer's.
    The ranks are simulated, threads of this process taking turns."""
    from gnnmesh.parallel.partition import parts_from_shards
    from gnnmesh.partition.simulate import simulate
    monkeypatch.setattr(parts_from_shards, "ROUND_ITEMS", 5)
    graph = random_graph(**GRAPHS["weighted"], seed=11)
    source = shard(graph, tmp_path / "s")
    simulate(write_simulated, 4, source, tmp_path / "parts", method)
    expected = partition(open_shards(source).graph(), 4, method, seed=3, cache=False)
    assert np.array_equal(assignment_of(tmp_path / "parts"), expected.assignment)
    same_parts(tmp_path / "parts", one_host(open_shards(source).graph(), 4, expected.assignment, method, 3,
                                            tmp_path / "one"))


def test_a_ranks_memory_does_not_grow_with_the_graphs_nodes(tmp_path):
    """No rank holds a vector over all nodes: at the same nodes and edges per rank, a rank's
    peak (numpy's allocations, traced) at 12 ranks is that at 2, where 12 times the nodes
    would add 3.7 MiB for each int64 vector over all of them (rp's parts, say)."""
    from gnnmesh.datasets.sharding import write_graph_shards
    from gnnmesh.partition.simulate import simulate
    peaks = {}
    for world in (2, 12):
        graph = random_graph(n=40_000 * world, e=1_000 * world, features=1, classes=2, isolated=0, seed=1)
        write_graph_shards(graph, tmp_path / f"s{world}", 2)
        _, traced = simulate(write_simulated, world, tmp_path / f"s{world}", tmp_path / f"p{world}", "rp",
                             trace_memory=True)
        peaks[world] = max(traced)
    assert peaks[12] < 1.15 * peaks[2], peaks
