"""Parts whose ranks disagree: each rank's folder passes its own checks (the array rewritten,
its checksum recomputed), but contradicts a peer's. Opening them stops every rank alike with
one error naming the rank, its file and what disagrees."""

import json

import numpy as np
import pytest
import torch

from gnnmesh.atomic import checksum
from gnnmesh.errors import GraphError
from gnnmesh.parallel.grid3d.strategy import Grid3D
from gnnmesh.parallel.partition.strategy import PartitionParallel
from gnnmesh.parallel.tensor.strategy import TensorParallel
from gnnmesh.parts import MANIFEST, open_parts
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.parallel.grid3d.parts import write_grid_parts
from gnnmesh.parallel.tensor.parts import write_tensor_parts
from gnnmesh.partition import partition

from tests.dist import run_ranks
from tests.parts.test_parts import one_host_per_rank
from tests.helpers import gnnmesh as run_cli, layout, one_error_line, random_graph


def make_graph():
    return random_graph(n=40, e=200, features=5, classes=3, weighted=True)


def rewrite(directory, rank: int, name: str, change) -> None:
    """Rank ``rank``'s array ``name`` replaced by ``change(array)``, its checksum recomputed."""
    path = directory / f"rank-{rank:05d}" / f"{name}.npy"
    array = change(np.load(path))
    path.unlink()  # a new file: tensor parts hard-link one topology into every folder
    np.save(path, array)
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["ranks"][rank]["files"][name] = checksum(path)
    (directory / MANIFEST).write_text(json.dumps(manifest))


def take_a_peers(name, directory):
    """Rank 1's first id of the array ``name`` replaced by rank 0's first; returns that id."""
    theirs = np.load(directory / "rank-00000" / f"{name}.npy")
    rewrite(directory, 1, name, lambda mine: np.sort(np.concatenate([mine[1:], theirs[:1]])))
    return int(theirs[0])


def swapped_order(orders):
    orders = orders.copy()
    orders[0, [0, 1]] = orders[0, [1, 0]]
    return orders


def other_value(values):
    values = values.copy()
    values[0] += 1.0
    return values


# kind, tampering (returns the detail the error names), the fragments of the error
CASES = {
    "owned taken from a peer": ("partition", lambda d: take_a_peers("owned", d),
                                ["rank 1:", "rank-00001/owned.npy", "is rank 0's too"]),
    "send reversed": ("partition", lambda d: rewrite(d, 0, "gcn.send", lambda a: a[::-1].copy()),
                      ["rank 1:", "rank-00001/gcn.halo.npy", "halo ids from rank 0", "rank-00000/gcn.send.npy"]),
    "send repeating a row": ("partition", lambda d: rewrite(d, 1, "gcn.send", lambda a: np.r_[a[:1], a[:-1]]),
                             ["rank 0:", "rank-00000/gcn.halo.npy", "from rank 1", "rank-00001/gcn.send.npy"]),
    "halo of -1": ("partition", lambda d: rewrite(d, 1, "gcn.halo", lambda a: np.r_[-1, a[1:]]),
                   ["rank-00001/gcn.halo.npy", "id -1 at position 0 is outside [0, 40)"]),
    "halo of 10^9": ("partition", lambda d: rewrite(d, 0, "mean.halo", lambda a: np.r_[a[:-1], 10**9]),
                     ["rank-00000/mean.halo.npy", "id 1000000000", "is outside [0, 40)"]),
    "entries taken from a peer": ("partition", lambda d: take_a_peers("gcn.entries", d),
                                  ["rank 1:", "rank-00001/gcn.entries.npy", "is rank 0's too"]),
    "entry held twice": ("partition", lambda d: rewrite(d, 0, "mean.entries", lambda a: np.r_[a[:1], a[:-1]]),
                         ["rank 0:", "rank-00000/mean.entries.npy", "is rank 0's twice"]),
    "grid orders differing": ("grid3d", lambda d: rewrite(d, 1, "orders", swapped_order),
                              ["rank 1:", "rank-00001/orders.npy", "node orders differ from rank 0's"]),
    "tensor topology differing": ("tensor", lambda d: rewrite(d, 1, "adj.values", other_value),
                                  ["rank 1:", "rank-00001/adj.indices.npy", "topology", "differ from rank 0's"]),
}

MANIFESTS = {"manifests differing": (None, None, ["rank 1:", "host1/manifest.json", "differs from rank 0's manifest"])}


def write_parts(kind: str, directory):
    graph = make_graph()
    if kind == "partition":
        return write_partition_parts(graph, partition(graph, 2, "rp", seed=2, cache=False), directory, "random")
    if kind == "grid3d":
        return write_grid_parts(graph, {"x": 2, "y": 1, "z": 1}, directory, "random")
    return write_tensor_parts(graph, 2, directory, "random")


def strategy(kind: str):
    if kind == "partition":
        return PartitionParallel(layout("partition"), torch.device("cpu"))
    if kind == "grid3d":
        return Grid3D(layout("grid3d", "2,1,1"), torch.device("cpu"))
    return TensorParallel(layout("tensor"), torch.device("cpu"))


def _open_each(rank, world, cases):
    """Per case, the error opening its parts raised on this rank (None: opened)."""
    errors = {}
    for name, (kind, directory) in cases.items():
        mine = directory if isinstance(directory, str) else directory[rank]  # a host per rank
        try:
            strategy(kind).rank_data_from_parts(open_parts(mine), 0, torch.device("cpu"))
            errors[name] = None
        except GraphError as err:
            errors[name] = str(err)
    return errors


@pytest.fixture(scope="module")
def tampered(tmp_path_factory):
    root = tmp_path_factory.mktemp("disagreeing")
    cases = {**{f"sound {kind}": (kind, None, None) for kind in ("partition", "grid3d", "tensor")}, **CASES}
    dirs = {}
    for i, (name, (kind, tamper, _)) in enumerate(cases.items()):
        directory = write_parts(kind, root / f"case-{i}")
        if tamper is not None:
            tamper(directory)
        dirs[name] = (kind, str(directory))
    dirs["manifests differing"] = ("partition", hosts_with_another_manifest(root / "case-0", root))
    return dirs


def hosts_with_another_manifest(directory, root) -> list:
    """A copy of ``directory`` per rank (the manifest and that rank's folder), rank 1's
    manifest saying another seed: each host's folder passes its own manifest's checks."""
    hosts = one_host_per_rank(directory, root, 2)
    manifest = json.loads((root / "host1" / MANIFEST).read_text())
    manifest["seed"] += 1
    (root / "host1" / MANIFEST).write_text(json.dumps(manifest))
    return hosts


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_every_rank_refuses_parts_that_disagree_with_the_same_line(tampered):
    by_rank = run_ranks(_open_each, 2, tampered, timeout=240)
    for name in ("sound partition", "sound grid3d", "sound tensor"):
        assert by_rank[0][name] is None and by_rank[1][name] is None, (name, by_rank[0][name], by_rank[1][name])
    for name, (_, _, fragments) in {**CASES, **MANIFESTS}.items():
        message = by_rank[0][name]
        assert message is not None and message == by_rank[1][name], (name, by_rank[0][name], by_rank[1][name])
        assert len(message.splitlines()) == 1
        for fragment in fragments:
            assert fragment in message, (name, fragment, message)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_the_command_stops_every_rank_with_one_line(tmp_path):
    directory = write_parts("partition", tmp_path / "p")
    node = take_a_peers("owned", directory)
    result = run_cli("train", "--parts", directory, "--nproc", "2", "--strategy", "partition", "--epochs", "1",
                     "--threads", "1", timeout=180)
    one_error_line(result, "rank 1:", "rank-00001/owned.npy", f"node {node} is rank 0's too")


def test_checking_a_split_holds_little_beside_the_ids(tmp_path):
    """The check counts the ids of its slice rather than sorting them with their holders: on
    one rank, numpy's allocations peak at two arrays of the ids (the sorted copy and the
    counts; the ids received are torch's), where sorting took more than nine."""
    import tracemalloc
    from types import SimpleNamespace

    from gnnmesh.parts.agreement import check_split

    ids = np.random.default_rng(0).permutation(1_000_000)
    tracemalloc.start()
    try:
        check_split(SimpleNamespace(), "gcn.entries", ids, len(ids), "entry")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * ids.nbytes, peak / ids.nbytes
