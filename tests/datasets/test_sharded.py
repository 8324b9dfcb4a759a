"""Shard sets (gnnmesh.datasets.sharded): the reader's slices, the whole graph it rebuilds, and
every way a set on disk can be wrong."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gnnmesh import ConfigError, GraphError
from gnnmesh.datasets import load, shard_writer, sharded
from gnnmesh.datasets.sharding import write_shards
from gnnmesh.datasets.sharded import ShardSet, is_shard_set, open_shards
from tests.helpers import gnnmesh_in_process, one_error_line, same_graph


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def no_disk_flush(monkeypatch):
    """Files reach the disk's cache only: what these tests check does not depend on the flush,
    which takes most of their time on a busy disk."""
    monkeypatch.setattr(shard_writer, "sync_file", lambda fh: fh.flush())


RMAT = "rmat:nodes=500,edges=3000,features=4,classes=3"


@pytest.fixture
def rmat_set(tmp_path):
    return write_shards(RMAT, tmp_path / "set", 3)


def as_loaded(graph):
    """``graph`` with its meta as JSON keeps it (what a shard set records)."""
    graph.meta = json.loads(json.dumps(graph.meta))
    return graph


def rewrite_meta(directory, change):
    path = directory / "meta.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize("spec", [RMAT, "rmat:nodes=300,edges=1500,features=0,undirected=true",
                                  "rmat:nodes=1000,edges=4000,features=3,permute=false,seed=7",
                                  "sbm:nodes=400,classes=4,features=5", "sbm:nodes=300,features=0,seed=2"])
def test_generated_shards_rebuild_the_generators_graph(tmp_path, spec):
    shards = write_shards(spec, tmp_path / "set", 4)
    assert isinstance(shards, ShardSet) and is_shard_set(tmp_path / "set")
    rebuilt = shards.graph()
    same_graph(rebuilt, as_loaded(load(spec)))
    assert load(tmp_path / "set").num_edges == rebuilt.num_edges  # --dataset DIR


def test_generated_rows_are_drawn_block_by_block(tmp_path, monkeypatch):
    """Blocks of a few rows (many per node shard, some spanning two) give the same values."""
    from gnnmesh.datasets import shard_writer
    monkeypatch.setattr(shard_writer, "BLOCK_BYTES", 4 * 4 * 7)  # 7 rows of 4 features
    monkeypatch.setattr(shard_writer, "BLOCK_EDGES", 333)
    shards = write_shards(RMAT, tmp_path / "set", 3)
    same_graph(shards.graph(), as_loaded(load(RMAT)))
    sbm = "sbm:nodes=200,features=4"
    same_graph(write_shards(sbm, tmp_path / "sbm", 3).graph(), as_loaded(load(sbm)))


def test_meta_and_shard_sizes(rmat_set):
    meta = rmat_set.meta
    assert meta["format"] == "gnnmesh-shards" and meta["version"] == 1 and meta["source"] == RMAT
    assert (rmat_set.num_nodes, rmat_set.num_edges, rmat_set.num_features) == (500, 3000, 4)
    assert (rmat_set.num_classes, rmat_set.task, rmat_set.directed) == (3, "classification", True)
    assert not rmat_set.weighted and not rmat_set.symmetrize and not rmat_set.drop_self_loops
    assert [s["edges"] for s in meta["edge_shards"]] == [1000, 1000, 1000]
    assert [(s["start"], s["stop"]) for s in meta["node_shards"]] == [(0, 166), (166, 333), (333, 500)]
    assert rmat_set.node_ranges == [(0, 166), (166, 333), (333, 500)]
    assert rmat_set.edge_ranges == [(0, 1000), (1000, 2000), (2000, 3000)]
    assert sorted(meta["edge_shards"][0]["files"]) == ["dst", "src"]
    assert sorted(meta["node_shards"][2]["files"]) == ["test_mask", "train_mask", "val_mask", "x", "y"]


@pytest.mark.parametrize("start,stop", [(0, 3000), (0, 0), (999, 1001), (5, 2995), (1000, 2000),
                                        (2999, 3000), (1500, 1500)])
def test_read_edges_slices_across_shards(rmat_set, start, stop):
    whole = rmat_set.graph()
    src, dst, weight = rmat_set.read_edges(start, stop)
    assert src.dtype == dst.dtype == np.int64 and weight is None
    assert src.shape == dst.shape == (stop - start,)
    # the generator lists its keys sorted by (dst, src): the adjacency's own entry order
    assert np.array_equal(dst, whole.adj.row().numpy()[start:stop])
    assert np.array_equal(src, whole.adj.indices.numpy()[start:stop])


@pytest.mark.parametrize("start,stop", [(0, 500), (165, 167), (0, 0), (100, 450), (499, 500)])
def test_read_nodes_slices_across_shards(rmat_set, start, stop):
    whole = rmat_set.graph()
    rows = rmat_set.read_nodes(start, stop)
    assert rows["x"].dtype == np.float32 and rows["x"].shape == (stop - start, 4)
    for field in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(rows[field], getattr(whole, field).numpy()[start:stop]), field
    assert rows["train_mask"].dtype == bool and rows["y"].dtype == np.int64


def test_reads_outside_the_set_are_refused(rmat_set):
    for start, stop in ((-1, 5), (10, 5), (0, 3001)):
        with pytest.raises(ValueError, match="not within"):
            rmat_set.read_edges(start, stop)
    with pytest.raises(ValueError, match="not within"):
        rmat_set.read_nodes(0, 501)


def test_each_file_is_hashed_once(rmat_set, monkeypatch):
    hashed = []
    real = sharded.checksum
    monkeypatch.setattr(sharded, "checksum", lambda path: hashed.append(path.name) or real(path))
    rmat_set.read_edges(10, 20)
    rmat_set.read_edges(30, 1500)
    rmat_set.read_nodes(0, 10)
    rmat_set.read_nodes(5, 7)
    assert sorted(hashed) == sorted(["edges-00000.src.npy", "edges-00000.dst.npy",
                                     "edges-00001.src.npy", "edges-00001.dst.npy"] +
                                    [f"nodes-00000.{f}.npy" for f in
                                     ("x", "y", "train_mask", "val_mask", "test_mask")])
    open_shards(rmat_set.directory).read_edges(0, 1)  # a new ShardSet checks again
    assert hashed.count("edges-00000.src.npy") == 2


def test_dataset_directory_loads_as_its_graph(rmat_set, tmp_path):
    same_graph(load(rmat_set.directory), rmat_set.graph())
    same_graph(load(str(rmat_set.directory)), as_loaded(load(RMAT)))
    with pytest.raises(GraphError, match="unknown option 'nodes'"):
        load(f"{rmat_set.directory}:nodes=5")


def test_is_shard_set(rmat_set, tmp_path):
    assert is_shard_set(rmat_set.directory)
    assert not is_shard_set(tmp_path / "absent")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "meta.json").write_text('{"format": "something else"}')
    assert not is_shard_set(tmp_path / "other")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "meta.json").write_text("{")
    assert not is_shard_set(tmp_path / "broken")


# -- bad sets: one clear error each -------------------------------------------------------------

def test_missing_directory_or_not_a_directory(tmp_path):
    with pytest.raises(ConfigError, match="no such directory"):
        open_shards(tmp_path / "absent")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        open_shards(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraphError, match=r"empty/meta.json: file not found"):
        open_shards(tmp_path / "empty")


@pytest.mark.parametrize("field,change,message", [
    ("format", lambda m: m.update(format="other"), "must be 'gnnmesh-shards'"),
    ("version", lambda m: m.update(version=2), "this gnnmesh reads version 1"),
    ("num_nodes", lambda m: m.pop("num_nodes"), "is missing"),
    ("num_nodes", lambda m: m.update(num_nodes="500"), "must be an integer >= 1"),
    ("num_features", lambda m: m.update(num_features=0), "must be an integer >= 1"),
    ("num_edges", lambda m: m.update(num_edges=2999), "the edge shards list 3000 edges"),
    ("directed", lambda m: m.update(directed=1), "must be true or false"),
    ("task", lambda m: m.update(task="ranking"), "must be one of classification"),
    ("task", lambda m: m.update(task=None), "exactly when the node fields hold y"),
    ("features", lambda m: m.pop("features"), "is missing"),
    ("node_fields", lambda m: m.update(node_fields=["y", "x"]), "must list x"),
    ("meta", lambda m: m.update(meta=[]), "must be an object"),
    ("edge_shards", lambda m: m.update(edge_shards=[]), "non-empty list"),
    ("edge_shards[1].name", lambda m: m["edge_shards"][1].update(name="../x"), "edges-NNNNN"),
    ("edge_shards[0].edges", lambda m: m["edge_shards"][0].update(edges=-1), "integer >= 0"),
    ("edge_shards[0].files", lambda m: m["edge_shards"][0]["files"].pop("dst"), "expected src, dst"),
    ("edge_shards[2].files.src", lambda m: m["edge_shards"][2]["files"].update(src="abc"), "32 hex"),
    ("node_shards[1].start", lambda m: m["node_shards"][1].update(start=170), "contiguously"),
    ("node_shards", lambda m: m["node_shards"].pop(), "num_nodes is 500"),
    ("weighted", lambda m: m.update(weighted=True), None),  # then a weight file is missing
    # an output width no model is built for: refused before the model allocates hidden x 10^12 weights
    ("num_classes", lambda m: m.update(num_classes=10**12), "must be an integer in [1, 65,536]"),
])
def test_meta_json_fields_are_checked(rmat_set, field, change, message):
    rewrite_meta(rmat_set.directory, change)
    if message is None:
        with pytest.raises(GraphError, match=r"edge_shards\[0\].files"):
            open_shards(rmat_set.directory)
        return
    with pytest.raises(GraphError) as err:
        open_shards(rmat_set.directory)
    text = str(err.value)
    assert "meta.json" in text and f"'{field}'" in text and message in text, text
    assert "\n" not in text


def test_meta_json_that_is_not_json(rmat_set):
    (rmat_set.directory / "meta.json").write_text("{not json")
    with pytest.raises(GraphError, match="meta.json: not valid JSON"):
        open_shards(rmat_set.directory)


def test_meta_json_nested_too_deeply_is_one_line(rmat_set):
    """In train (and every rank of 'partition --input'): a GraphError naming meta.json, not a
    RecursionError."""
    (rmat_set.directory / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GraphError, match="meta.json: not valid JSON .nested more than 100 levels deep"):
        open_shards(rmat_set.directory)
    assert not is_shard_set(rmat_set.directory)
    one_error_line(gnnmesh_in_process("train", "--dataset", str(rmat_set.directory), "--epochs", "1"), "meta.json")


def test_missing_shard_file(rmat_set):
    (rmat_set.directory / "edges-00001.dst.npy").unlink()
    with pytest.raises(GraphError, match=r"edges-00001.dst.npy: file not found"):
        open_shards(rmat_set.directory)


def test_torn_shard_file(rmat_set):
    path = rmat_set.directory / "nodes-00002.x.npy"
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.raises(GraphError, match=r"nodes-00002.x.npy: truncated"):
        open_shards(rmat_set.directory)
    path.write_bytes(data + b"\0" * 16)  # a longer file is no more the one written
    with pytest.raises(GraphError, match=r"nodes-00002.x.npy: \d+ bytes, 16 more than its header describes"):
        open_shards(rmat_set.directory)
    path.write_bytes(data[:60])  # not even a whole header
    with pytest.raises(GraphError, match=r"nodes-00002.x.npy: not a readable .npy file"):
        open_shards(rmat_set.directory)


def test_shard_of_another_shape_or_type(rmat_set):
    np.save(rmat_set.directory / "edges-00000.src.npy", np.zeros(999, dtype=np.int64))
    with pytest.raises(GraphError, match=r"edges-00000.src.npy: has shape \[999\], but meta.json says 1000"):
        open_shards(rmat_set.directory)
    np.save(rmat_set.directory / "edges-00000.src.npy", np.zeros(1000, dtype=np.int32))
    with pytest.raises(GraphError, match=r"edges-00000.src.npy: holds int32, expected int64"):
        open_shards(rmat_set.directory)
    np.save(rmat_set.directory / "edges-00000.src.npy", np.zeros(1000, dtype=np.int64))
    np.save(rmat_set.directory / "nodes-00001.x.npy", np.zeros((167, 5), dtype=np.float32))
    with pytest.raises(GraphError, match=r"nodes-00001.x.npy: has shape \[167, 5\], expected \[167, 4\]"):
        open_shards(rmat_set.directory)


def test_altered_shard_fails_its_checksum_when_read(rmat_set):
    path = rmat_set.directory / "edges-00002.src.npy"
    data = bytearray(path.read_bytes())
    data[-8:] = np.int64(3).tobytes()  # still in range: only the checksum can tell
    path.write_bytes(bytes(data))
    shards = open_shards(rmat_set.directory)  # headers only: opens
    shards.read_edges(0, 2000)  # other shards read fine
    with pytest.raises(GraphError, match=r"edges-00002.src.npy: corrupt shard file \(checksum"):
        shards.read_edges(1999, 2001)


def rechecksum(directory, shard_list, index, field):
    from gnnmesh.atomic import checksum
    name = json.loads((directory / "meta.json").read_text())[shard_list][index]["name"]
    digest = checksum(directory / f"{name}.{field}.npy")
    rewrite_meta(directory, lambda m: m[shard_list][index]["files"].update({field: digest}))


def test_node_ids_out_of_range(rmat_set):
    path = rmat_set.directory / "edges-00001.dst.npy"
    dst = np.load(path)
    dst[17] = 500
    np.save(path, dst)
    rechecksum(rmat_set.directory, "edge_shards", 1, "dst")
    shards = open_shards(rmat_set.directory)
    shards.read_edges(1018, 3000)
    with pytest.raises(GraphError, match=r"edges-00001.dst.npy: edge 17 has node id 500, out of range for 500 nodes"):
        shards.read_edges(1000, 1018)
    with pytest.raises(GraphError, match="edge 17 has node id 500"):
        shards.graph()


def test_bad_node_rows(rmat_set):
    directory = rmat_set.directory
    y = np.load(directory / "nodes-00001.y.npy")
    y[3] = 3
    np.save(directory / "nodes-00001.y.npy", y)
    rechecksum(directory, "node_shards", 1, "y")
    with pytest.raises(GraphError, match=r"nodes-00001.y.npy: row 3 \(node 169\) has label 3, out of range for 3 classes"):
        open_shards(directory).read_nodes(160, 180)
    x = np.load(directory / "nodes-00000.x.npy")
    x[5, 2] = np.nan
    np.save(directory / "nodes-00000.x.npy", x)
    rechecksum(directory, "node_shards", 0, "x")
    with pytest.raises(GraphError, match=r"nodes-00000.x.npy: row 5 \(node 5\) has a non-finite feature nan in column 2"):
        open_shards(directory).read_nodes(0, 10)
    train = np.load(directory / "nodes-00002.train_mask.npy")
    test = np.load(directory / "nodes-00002.test_mask.npy")
    row = int(np.flatnonzero(train)[0])
    test[row] = True
    np.save(directory / "nodes-00002.test_mask.npy", test)
    rechecksum(directory, "node_shards", 2, "test_mask")
    with pytest.raises(GraphError, match=rf"nodes-00002.test_mask.npy: row {row} .* is also in train_mask"):
        open_shards(directory).read_nodes(333, 500)


def test_weighted_sets_check_their_weights(tmp_path):
    edges = tmp_path / "w.txt"
    edges.write_text("0 1 0.5\n1 2 2.0\n2 0 1.5\n0 1 0.25\n")
    shards = write_shards(edges, tmp_path / "set", 2)
    assert shards.weighted
    src, dst, weight = shards.read_edges(0, 4)
    assert weight.dtype == np.float32 and weight.tolist() == [0.5, 2.0, 1.5, 0.25]
    path = tmp_path / "set" / "edges-00001.weight.npy"
    np.save(path, np.array([1.5, np.inf], dtype=np.float32))
    rechecksum(tmp_path / "set", "edge_shards", 1, "weight")
    with pytest.raises(GraphError, match=r"edges-00001.weight.npy: edge 1 has a non-finite weight inf"):
        open_shards(tmp_path / "set").read_edges(0, 4)


def test_degree_features_stand_in_for_missing_ones(tmp_path):
    """A graph without features gets the degree features in x (what the trainer computes), and
    graph() leaves x None as the source has it."""
    from gnnmesh.datasets import structural_features
    spec = "rmat:nodes=300,edges=2000,features=0"
    shards = write_shards(spec, tmp_path / "set", 2)
    assert shards.features == "degree" and shards.num_features == 2  # directed: in and out
    x = shards.read_nodes(0, 300)["x"]
    loaded = load(spec)
    assert torch.equal(torch.from_numpy(x), structural_features(loaded, "degree"))
    assert shards.graph().x is None
