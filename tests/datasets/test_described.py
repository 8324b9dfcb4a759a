"""Datasets described by a TOML file: the user's own edges, features, labels and split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnmesh import Graph, GraphError
from gnnmesh.datasets import load
from gnnmesh.datasets.sharding import write_shards
from tests.helpers import gnnmesh_in_process, one_error_line

EDGES = [(0, 1, 1.0), (1, 2, 2.0), (2, 3, 1.5), (3, 4, 1.0), (4, 5, 0.5), (5, 0, 1.0), (2, 0, 3.0)]
NODES = 6


def described(tmp_path, toml: str, *, edges_text=None):
    (tmp_path / "edges.csv").write_text(edges_text if edges_text is not None else
                                        "src;dst;w\n" + "".join(f"{s};{d};{w}\n" for s, d, w in EDGES))
    np.save(tmp_path / "x.npy", np.arange(NODES * 3, dtype=np.float32).reshape(NODES, 3))
    (tmp_path / "labels.txt").write_text("".join(f"{i % 2}\n" for i in range(NODES)))
    for part, ids in (("train", [0, 1]), ("val", [2, 3]), ("test", [4, 5])):
        (tmp_path / f"{part}.txt").write_text("".join(f"{i}\n" for i in ids))
    path = tmp_path / "graph.toml"
    path.write_text(toml)
    return path


FULL = """name = "ring"
directed = false
[edges]
file = "edges.csv"
source = "src"
target = "dst"
weight = "w"
header = true
delimiter = ";"
[features]
file = "x.npy"
[labels]
file = "labels.txt"
[split]
train = "train.txt"
val = "val.txt"
test = "test.txt"
"""


def test_a_description_gives_the_graph_from_edge_index_gives(tmp_path):
    graph = load(described(tmp_path, FULL), cache=False)
    src, dst, w = (np.array(c) for c in zip(*EDGES))
    expected = Graph.from_edge_index(np.stack([src, dst]), NODES, edge_weight=w, directed=False)
    assert graph.name == "ring" and not graph.directed
    assert torch.equal(graph.adj.indptr, expected.adj.indptr) and torch.equal(graph.adj.indices, expected.adj.indices)
    assert torch.equal(graph.adj.values, expected.adj.values)
    assert graph.x.shape == (NODES, 3) and graph.y.tolist() == [i % 2 for i in range(NODES)]
    assert graph.train_mask.nonzero().flatten().tolist() == [0, 1]
    assert graph.test_mask.nonzero().flatten().tolist() == [4, 5]


def test_positions_without_header_and_a_random_split(tmp_path):
    toml = '[edges]\nfile = "edges.csv"\n[labels]\nfile = "labels.txt"\n'
    graph = load(described(tmp_path, toml, edges_text="0 1\n1 2\n2 0\n3 4\n4 5\n"), cache=False, split_seed=3)
    assert graph.num_nodes == NODES and graph.x is None and graph.meta["split"]["seed"] == 3
    assert graph.directed  # kept as listed: one direction only


def test_the_shard_set_of_a_description_is_its_graph(tmp_path):
    path = described(tmp_path, FULL)
    shards = write_shards(str(path), tmp_path / "shards", 2)
    graph, rebuilt = load(path, cache=False), shards.graph()
    assert torch.equal(graph.adj.indices, rebuilt.adj.indices) and torch.equal(graph.y, rebuilt.y)


def test_parquet_edges_and_features(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    src, dst, w = (list(c) for c in zip(*EDGES))
    pq.write_table(pa.table({"a": src, "b": dst, "weight": w}), tmp_path / "edges.parquet")
    pq.write_table(pa.table({f"f{i}": np.arange(NODES, dtype=np.float64) * i for i in range(3)}),
                   tmp_path / "x.parquet")
    path = tmp_path / "pq.toml"
    path.write_text('directed = false\n[edges]\nfile = "edges.parquet"\nsource = "a"\ntarget = 1\nweight = "weight"\n'
                    '[features]\nfile = "x.parquet"\n')
    graph = load(path, cache=False)
    reference = load(described(tmp_path, FULL), cache=False)
    assert torch.equal(graph.adj.indices, reference.adj.indices) and torch.equal(graph.adj.values, reference.adj.values)
    assert graph.x[:, 2].tolist() == [2.0 * i for i in range(NODES)]


@pytest.mark.parametrize("change, named", [
    (('header = true', 'header = 1'), "field 'edges.header'"),
    (('source = "src"', 'source = "from"'), "no column 'from'"),
    (('delimiter = ";"', 'delimiter = ":"'), "field 'edges.delimiter'"),
    (('test = "test.txt"', 'test = "test.txt"\ncolour = "red"'), "field 'split.colour'"),
    (('file = "x.npy"', 'file = "absent.npy"'), "absent.npy: file not found"),
    (('name = "ring"', 'name = "ring"\nnum_nodes = 4'), "'features' gives 6 nodes, but 'num_nodes' gives 4"),
    (('val = "val.txt"', 'val = "edges.csv"'), "edges.csv line 1"),
    (('[edges]', '[edges'), "not a valid dataset description"),
    (('name = "ring"\n', 'name = "ring"\nnum_nodes = 1_000_000_000_000\n'), "'features' gives 6 nodes"),
])
def test_every_bad_input_is_one_line_naming_the_file_and_field(tmp_path, change, named):
    path = described(tmp_path, FULL.replace(*change))
    with pytest.raises(GraphError) as err:
        load(path, cache=False)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_a_node_count_no_file_backs_is_bounded_by_the_edges(tmp_path):
    path = tmp_path / "g.toml"
    (tmp_path / "e.txt").write_text("0 1\n")
    path.write_text('num_nodes = 1_000_000_000_000\n[edges]\nfile = "e.txt"\n')
    with pytest.raises(GraphError, match="field 'num_nodes' is 1,000,000,000,000 for 1 edges"):
        load(path, cache=False)


def test_a_bad_line_of_a_data_file_is_named(tmp_path):
    path = described(tmp_path, FULL, edges_text="src;dst;w\n0;1;1\n1;x;2\n")
    one_error_line(gnnmesh_in_process("train", "--dataset", str(path), "--epochs", "1"), "edges.csv", "line 3")


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    from gnnmesh.datasets import columns
    monkeypatch.setattr(columns, "_pyarrow_parquet", lambda: None)
    (tmp_path / "e.parquet").write_bytes(b"PAR1")
    (tmp_path / "g.toml").write_text('[edges]\nfile = "e.parquet"\n')
    with pytest.raises(GraphError, match=r"gnnmesh\[parquet\]"):
        load(tmp_path / "g.toml", cache=False)


def test_from_edge_index_undirected_adds_the_reverse_edges_as_a_file_does(tmp_path):
    (tmp_path / "e.txt").write_text("0 1 2.0\n1 2 -1.0\n2 1 3.0\n")
    from_file = load(tmp_path / "e.txt", directed=False, cache=False)
    given = Graph.from_edge_index([[0, 1, 2], [1, 2, 1]], edge_weight=[2.0, -1.0, 3.0], directed=False)
    assert given.adj.is_symmetric() and given.num_edges == from_file.num_edges == 4
    assert torch.equal(given.adj.indices, from_file.adj.indices) and torch.equal(given.adj.values, from_file.adj.values)


def test_every_command_takes_a_description(tmp_path):
    path = str(described(tmp_path, FULL))
    shown = gnnmesh_in_process("datasets", "--dataset", path)
    assert shown.returncode == 0 and shown.stdout.splitlines()[1].split()[:3] == ["ring", "6", "14"]
    for args in (("train", "--dataset", path, "--epochs", "1", "--checkpoint", str(tmp_path / "c.pt")),
                 ("predict", "--checkpoint", str(tmp_path / "c.pt"), "--dataset", path, "--out", str(tmp_path / "p")),
                 ("partition", "--dataset", path, "--nparts", "2", "--partitioner", "rp"),
                 ("datasets", "--shard", path, "--out", str(tmp_path / "s"), "--shards", "2")):
        done = gnnmesh_in_process(*args)
        assert done.returncode == 0, (args, done.stderr)


def test_the_listing_and_one_dataset_count_edges_alike():
    listed = next(line for line in gnnmesh_in_process("datasets").stdout.splitlines() if line.startswith("cora "))
    one = gnnmesh_in_process("datasets", "--dataset", "cora").stdout.splitlines()[1]
    assert listed.split()[:5] == one.split()[:5] == ["cora", "2,708", f"{load('cora').num_edges:,}", "1,433", "7"]
