"""Writing shard sets: every streaming source gives the graph ``load`` gives for the same spec,
without building it; the set is replaced only whole; the command line."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest
import torch

from gnnmesh import ConfigError, GraphError
from gnnmesh.cli import main
from gnnmesh.datasets import load, registry, shard_sources, shard_writer, structural_features
from gnnmesh.datasets.sharding import write_shards
from gnnmesh.datasets.sharded import open_shards
from gnnmesh.graph import Graph
from tests.datasets.test_ogb import fixture_arrays, fixture_texts, write
from tests.helpers import same_graph

FLUSH = shard_writer.sync_file


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def no_disk_flush(monkeypatch):
    """Files reach the disk's cache only: what these tests check does not depend on the flush,
    which takes most of their time on a busy disk (the command's test flushes)."""
    monkeypatch.setattr(shard_writer, "sync_file", lambda fh: fh.flush())


def written(spec, out, shards=3, **options):
    """The set written from ``spec`` without ever building its Graph."""
    with pytest.MonkeyPatch.context() as patch:
        def refuse(*args, **kwargs):
            raise AssertionError("a streaming source built the whole graph")
        patch.setattr(registry, "load", refuse)
        patch.setattr(Graph, "from_adjacency", refuse)
        return write_shards(spec, out, shards, **options)


def same_as_loaded(shards, spec, **options):
    """The set's graph equals what ``load`` makes of ``spec``, its degree features too."""
    loaded = load(spec, cache=False, **options)
    loaded.meta = json.loads(json.dumps(loaded.meta))
    same_graph(shards.graph(), loaded)
    x = torch.from_numpy(shards.read_nodes(0, shards.num_nodes)["x"])
    assert torch.equal(x, loaded.x if loaded.x is not None else structural_features(loaded, "degree"))
    assert shards.features == ("given" if loaded.x is not None else "degree")
    return loaded


EDGES = """# a comment
% another
0 1
1 2
2 0
3 3
0 1
4 2

5 0
2 4
"""
WEIGHTED = "0,1,0.5\n1,0,0.5\n1,2,3\n2,1,1.25\n2,2,7\n0,1,0.25\n3,0,2\n"
HEADER = "source,target\n0,1\n1,0\n1,2\n2,1\n0,2\n2,0\n"


@pytest.mark.parametrize("name,text,options", [
    ("edges.txt", EDGES, ""),
    ("edges.txt", EDGES, ":directed=false"),
    ("edges.txt", EDGES, ":directed=true,remove_self_loops=true"),
    ("edges.txt", EDGES, ":num_nodes=9,random_labels=3"),
    ("edges.el", "1 2\n2 3\n6 1\n3 3\n1 2\n", ":index_base=1,directed=false"),
    ("weighted.csv", WEIGHTED, ""),
    ("weighted.csv", WEIGHTED, ":directed=false"),
    ("weighted.csv", WEIGHTED, ":weighted=false"),
    ("symmetric.csv", HEADER, ""),  # a header line; symmetric: undirected
    ("edges.txt.gz", EDGES, ":remove_self_loops=true"),
])
def test_edge_lists_stream_into_the_loaders_graph(tmp_path, name, text, options):
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    spec = f"{path}{options}"
    shards = written(spec, tmp_path / "set")
    same_as_loaded(shards, spec)
    assert shards.meta["source"] == spec


def test_small_pieces_and_a_small_structure_budget(tmp_path, monkeypatch):
    """Many pieces of text (line numbers carried across them) and degree passes over several
    ranges of rows give the same graph, features and errors as the loader."""
    rng = np.random.default_rng(3)
    pairs = rng.integers(0, 300, (4000, 2))
    weights = rng.integers(1, 5, 4000)
    path = tmp_path / "big.csv"
    path.write_text("src,dst,w\n" + "".join(f"{a},{b},{w}\n" for (a, b), w in zip(pairs, weights)))
    monkeypatch.setattr(shard_sources, "READ_BYTES", 997)
    monkeypatch.setattr(shard_writer, "STRUCTURE_BUDGET", 500)
    monkeypatch.setattr(shard_writer, "BLOCK_EDGES", 301)
    for options in ("", ":directed=false", ":weighted=false,remove_self_loops=true"):
        same_as_loaded(written(f"{path}{options}", tmp_path / "set", 5), f"{path}{options}")
    symmetric = tmp_path / "sym.txt"
    both = np.concatenate([pairs, pairs[:, ::-1]])
    symmetric.write_text("".join(f"{a} {b}\n" for a, b in both))
    shards = written(symmetric, tmp_path / "sym", 4)
    assert not shards.directed  # found symmetric over several ranges of rows
    same_as_loaded(shards, symmetric)
    lines = path.read_text().splitlines()
    lines[3001] = "5,x,1"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(GraphError) as streamed:
        written(path, tmp_path / "bad")
    with pytest.raises(GraphError) as loaded:
        load(path, cache=False)
    assert str(streamed.value) == str(loaded.value) and "line 3002" in str(streamed.value)


def test_edge_shards_are_near_equal(tmp_path):
    path = tmp_path / "e.txt"
    path.write_text("".join(f"{i % 50} {(i * 7) % 50}\n" for i in range(1003)))
    shards = written(path, tmp_path / "set", 4)
    assert [s["edges"] for s in shards.meta["edge_shards"]] == [250, 251, 251, 251]
    assert [(s["start"], s["stop"]) for s in shards.meta["node_shards"]] == \
        [(0, 12), (12, 25), (25, 37), (37, 50)]
    assert not list(tmp_path.glob("set/.spool*"))
    tiny = written(path, tmp_path / "many", 80)  # more node shards than... still 80 of each
    assert len(tiny.meta["node_shards"]) == 80 and tiny.meta["node_shards"][0]["stop"] == 0
    same_as_loaded(tiny, path)


MTX = {
    "general.mtx": "%%MatrixMarket matrix coordinate real general\n% c\n5 5 6\n1 2 0.5\n2 3 1\n"
                   "3 1 2\n3 3 4\n1 2 0.25\n5 4 1\n",
    "pattern.mtx": "%%MatrixMarket matrix coordinate pattern symmetric\n4 4 4\n2 1\n3 1\n4 3\n2 2\n",
    "skew.mtx": "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1.5\n3 2 -2\n",
    "integer.mtx.gz": "%%MatrixMarket matrix coordinate integer symmetric\n\n% x\n3 3 3\n1 1 2\n2 1 3\n3 2 1\n",
    "nobanner.mtx": "1 2\n2 3\n3 1\n4 2\n",
    "array.mtx": "%%MatrixMarket matrix array real general\n2 2\n1\n0\n2\n3\n",
}


@pytest.mark.parametrize("name", sorted(MTX))
@pytest.mark.parametrize("options", ["", ":directed=false", ":remove_self_loops=true,weighted=false"])
def test_mtx_files_stream_into_the_loaders_graph(tmp_path, name, options):
    path = tmp_path / name
    text = MTX[name].encode()
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    spec = f"{path}{options}"
    if name == "array.mtx":  # dense: loaded whole
        shards = write_shards(spec, tmp_path / "set", 2)
    else:
        shards = written(spec, tmp_path / "set", 2)
    same_as_loaded(shards, spec)


def test_mtx_errors_match_the_loader(tmp_path):
    cases = {"more.mtx": MTX["general.mtx"] + "1 1 1\n",
             "fewer.mtx": MTX["general.mtx"].replace("5 4 1\n", ""),
             "range.mtx": MTX["general.mtx"].replace("5 4 1", "6 4 1"),
             "banner.mtx": "%%MatrixMarket matrix coordinate complex general\n1 1 0\n",
             "size.mtx": "%%MatrixMarket matrix coordinate real general\n% only comments\n"}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(GraphError) as streamed:
            written(path, tmp_path / "set")
        with pytest.raises(GraphError) as loaded:
            load(path, cache=False)
        assert str(streamed.value) == str(loaded.value), name
    assert not (tmp_path / "set").exists()


@pytest.mark.parametrize("options", ["", ":directed=true", ":directed=none,remove_self_loops=true"])
@pytest.mark.parametrize("features", [True, False])
def test_ogb_directories_stream_into_the_loaders_graph(tmp_path, options, features):
    texts = fixture_texts(*fixture_arrays())
    if not features:
        del texts["raw/node-feat"]
    texts["raw/edge"] += "3,3\n"
    texts["raw/num-edge-list"] = f"{texts['raw/edge'].count(chr(10))}\n"
    root = write(tmp_path / "ogbn-tiny", texts, compress=features)
    spec = f"{root}{options}"
    shards = written(spec, tmp_path / "set", 3)
    same_as_loaded(shards, spec)
    assert shards.task == "classification" and shards.num_classes == 3


def test_ogb_errors(tmp_path):
    texts = fixture_texts(*fixture_arrays())
    texts["raw/num-edge-list"] = "5\n"
    root = write(tmp_path / "more", texts)
    with pytest.raises(GraphError, match=r"edge.csv.gz: \d+ edges, but num-edge-list.csv.gz says 5"):
        written(root, tmp_path / "set")
    texts = fixture_texts(*fixture_arrays())
    texts["raw/node-feat"] += "1,2,3,4\n"
    root = write(tmp_path / "feat", texts)
    with pytest.raises(GraphError, match=r"node-feat.csv.gz: 41 feature rows, but num-node-list.csv.gz says 40"):
        written(root, tmp_path / "set")
    assert not (tmp_path / "set").exists()


def test_other_sources_are_loaded_whole(tmp_path):
    """Cora (a registered dataset, sparse bag-of-words x) and an .npz file: the adjacency's
    entries as edges rebuild it exactly."""
    shards = write_shards("cora", tmp_path / "cora", 3)
    cora = load("cora")
    assert not shards.symmetrize and shards.num_edges == cora.num_edges
    same_graph(shards.graph(), load(tmp_path / "cora"))
    assert torch.equal(shards.graph().x, cora.x.to_dense() if cora.x.layout == torch.sparse_csr else cora.x)
    rng = np.random.default_rng(0)
    n = 30
    dense = (rng.random((n, n)) < 0.2) * rng.integers(1, 4, (n, n))
    import scipy.sparse as sp
    adj = sp.csr_matrix(dense)
    np.savez(tmp_path / "g.npz", adj_data=adj.data.astype(np.float32), adj_indices=adj.indices,
             adj_indptr=adj.indptr, adj_shape=np.array(adj.shape), labels=rng.random((n, 2)) < 0.5)
    shards = write_shards(tmp_path / "g.npz", tmp_path / "npz", 2)
    assert shards.weighted and shards.task == "multilabel"
    same_as_loaded(shards, tmp_path / "g.npz")


# -- a set is replaced whole, or not at all -----------------------------------------------------

def test_a_failed_write_leaves_the_earlier_set(tmp_path, monkeypatch):
    out = tmp_path / "set"
    first = write_shards("rmat:nodes=200,edges=1000,features=2", out, 2)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1 2\n2 x\n")
    with pytest.raises(GraphError, match="line 3"):
        write_shards(bad, out, 2)

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(shard_writer.ShardWriter, "add_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_shards("rmat:nodes=300,edges=1000,features=2", out, 2)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(set(os.listdir(tmp_path)) - {"cache"}) == ["bad.txt", "set"]  # no temporaries, no lock
    same_graph(open_shards(out).graph(), first.graph())
    again = write_shards("sbm:nodes=100,features=2", out, 2)  # an earlier set is replaced
    assert again.name == "sbm-100" and not (out / "edges-00001.src.npy").read_bytes() == before["edges-00001.src.npy"]


def test_a_directory_that_is_not_a_set_is_refused(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    with pytest.raises(ConfigError, match="exists and is not a shard set"):
        write_shards("rmat:nodes=100,edges=300", out, 2)
    (out / "meta.json").write_text("{}")  # a meta.json of something else is no set either
    with pytest.raises(ConfigError, match="exists and is not a shard set"):
        write_shards("rmat:nodes=100,edges=300", out, 2)
    assert sorted(os.listdir(out)) == ["meta.json", "notes.txt"]
    with pytest.raises(ConfigError, match="--shards must be an integer >= 1"):
        write_shards("rmat:nodes=100,edges=300", tmp_path / "new", 0)


HOLDER = """
import sys, time
from pathlib import Path
from gnnmesh import locks
out, ready, go = map(Path, sys.argv[1:4])
with locks.hold(out, "shard directory"):
    ready.write_text("held")
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
"""


def test_a_second_writer_is_refused(tmp_path):
    import subprocess
    import sys
    import time
    out, ready, go = tmp_path / "set", tmp_path / "ready", tmp_path / "go"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), str(ready), str(go)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(ConfigError, match=rf"{out}: the shard set is in use by another run \(pid {holder.pid} "):
            write_shards("rmat:nodes=100,edges=300", out, 2)
        assert not out.exists()
    finally:
        go.write_text("")
        holder.wait(60)
    assert write_shards("rmat:nodes=100,edges=300", out, 2).num_edges == 300


# -- the command line ---------------------------------------------------------------------------

def test_command_writes_a_set_and_prints_one_line(tmp_path, capsys, monkeypatch):
    flushed = []
    monkeypatch.setattr(shard_writer, "sync_file", lambda fh: flushed.append(os.path.basename(fh.name)) or FLUSH(fh))
    out = tmp_path / "set"
    assert main(["datasets", "--shard", "sbm:nodes=120,features=3", "--out", str(out), "--shards", "2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {out}: 120 nodes, 600 edges, 2 shards in ") and line.endswith(" s")
    assert open_shards(out).num_edges == 600
    assert len(flushed) == len(os.listdir(out)) and flushed[-1] == "meta.json"  # every file, meta.json last


@pytest.mark.parametrize("argv,message", [
    (["--shard", "rmat"], "--shard SOURCE needs --out DIR"),
    (["--out", "x"], "--out DIR goes with --shard SOURCE"),
    (["--shard", "rmat", "--out", "{tmp}/s", "--shards", "0"], "--shards must be an integer >= 1"),
    (["--shard", "{tmp}/absent.txt", "--out", "{tmp}/s"], "absent.txt: file not found"),
    (["--shard", "rmat:bogus=1", "--out", "{tmp}/s"], "unknown option 'bogus'"),
])
def test_command_errors_are_one_line(tmp_path, capsys, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["datasets", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gnnmesh: error: ") and message in err and "\n" not in err


# -- real data ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["gunduzvd_mtx/karate.mtx", "gunduzvd_mtx/gemat11.mtx.gz",
                                 "email-Eu-core/email-Eu-core.txt.gz"])
def test_real_files_stream_into_the_loaders_graph(tmp_path, data_root, rel):
    shards = written(rel, tmp_path / "set", 4, root=data_root)
    loaded = load(rel, root=data_root, cache=False)
    loaded.meta = json.loads(json.dumps(loaded.meta))
    same_graph(shards.graph(), loaded)


@pytest.mark.slow
@pytest.mark.parametrize("rel", ["soc-Slashdot0902/soc-Slashdot0902.txt.gz",
                                 "luxembourg_osm/luxembourg_osm.mtx.gz"])
def test_larger_real_files_stream_into_the_loaders_graph(tmp_path, data_root, rel):
    shards = written(rel, tmp_path / "set", 8, root=data_root)
    same_as_loaded(shards, rel, root=data_root)
