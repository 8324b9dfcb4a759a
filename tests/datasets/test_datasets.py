"""gnnmesh.datasets: real datasets, generators, spec strings, cache and generic files."""

from __future__ import annotations

import gzip
import os
import shutil
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnmesh import GraphError
from gnnmesh.datasets import available, dataset_options, load, names, structural_features
from gnnmesh.datasets import cache as cache_mod
from tests.helpers import same_graph


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    """Never touch ~/.cache from tests."""
    path = tmp_path / "cache"
    monkeypatch.setenv("GNNMESH_CACHE", str(path))
    return path


def self_loops(g) -> int:
    return int((g.adj.row() == g.adj.indices).sum())


# -- real data: counts from shared/data/README.md ------------------------------------------
# (name, nodes, edges as counted in the README, features, classes, directed)
# Undirected graphs store both directions and no self-loops: nnz = 2 * edges.
# Directed graphs keep the file's edges, self-loops included: nnz = edges.
REAL = [
    ("cora", 2708, 5278, 1433, 7, False),
    ("citeseer", 3327, 4552, 3703, 6, False),
    ("pubmed", 19717, 44324, 0, 3, False),
    ("facebook", 22470, 170823, 4714, 4, False),
    ("github", 37700, 289003, 4005, 2, False),
    ("deezer", 28281, 92752, 31241, 2, False),
    ("lastfm", 7624, 27806, 0, 18, False),
    ("twitch-de", 9498, 153138, 3170, 2, False),
    ("twitch-engb", 7126, 35324, 3170, 2, False),
    ("twitch-es", 4648, 59382, 3170, 2, False),
    ("twitch-fr", 6549, 112666, 3170, 2, False),
    ("twitch-ptbr", 1912, 31299, 3170, 2, False),
    ("twitch-ru", 4385, 37304, 3170, 2, False),
    ("twitch-tw", 2772, 63462, 3170, 2, False),
    ("email-eu-core", 1005, 25571, 0, 42, True),
    ("slashdot", 82168, 948464, 0, None, True),
    ("luxembourg-osm", 114599, 119666, 0, None, False),
    ("karate", 34, 78, 0, None, False),
    ("gemat11", 4929, 33185, 0, None, True),
]


@pytest.mark.parametrize("name,nodes,edges,features,classes,directed", REAL,
                         ids=[r[0] for r in REAL])
def test_real_dataset_counts(data_root, name, nodes, edges, features, classes, directed):
    # Dense MUSAE features take seconds (Deezer's are 3.5 GB); the sparse layout has the same
    # shape. The dense layout is checked on Twitch FR below.
    sparse = name in ("facebook", "github", "deezer") or name.startswith("twitch")
    options = {"features": "sparse"} if sparse else {}
    g = load(name, root=data_root, cache=False, **options)
    assert g.num_nodes == nodes
    assert g.num_features == features
    assert g.num_classes == classes
    assert g.directed == directed
    if directed:
        assert g.num_edges == edges
    else:
        assert g.num_edges == 2 * edges
        assert self_loops(g) == 0 and g.adj.is_symmetric()
    if classes is not None:
        sizes = [int(getattr(g, m).sum()) for m in ("train_mask", "val_mask", "test_mask")]
        assert min(sizes) > 0 and sum(sizes) <= nodes
    info = {row.name: row for row in available(data_root)}[name]  # what `gnnmesh datasets` lists
    assert info.present and (info.nodes, info.edges, info.features, info.classes) == \
        (nodes, g.num_edges, features, classes), "the listing and the loaded Graph count edges alike"


@pytest.mark.parametrize("name,train", [("cora", 140), ("citeseer", 120), ("pubmed", 60)])
def test_planetoid_public_split(data_root, name, train):
    g = load(name, root=data_root, cache=False)
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [train, 500, 1000]
    assert g.train_mask[:train].all() and g.val_mask[train:train + 500].all()
    assert g.meta["split"]["kind"] == "planetoid-public"


def test_planetoid_features(data_root):
    cora = load("cora", root=data_root, cache=False)
    sums = cora.x.sum(1)
    assert torch.allclose(sums, torch.ones_like(sums))  # row-normalised by default
    raw = load("cora", root=data_root, cache=False, normalize_features=False)
    assert set(raw.x.unique().tolist()) == {0.0, 1.0}
    # CiteSeer: 15 ids missing from test.index have no features and no label, so they are in
    # no mask. (README calls them isolated, but the graph file gives each 1-2 neighbours.)
    cs = load("citeseer", root=data_root, cache=False)
    gaps = torch.tensor(cs.meta["unlabeled_nodes"])
    assert gaps.numel() == 15 and gaps.min() >= 2312
    assert (cs.x[gaps] == 0).all() and (cs.adj.degrees()[gaps] > 0).all()
    assert not (cs.train_mask | cs.val_mask | cs.test_mask)[gaps].any()
    pubmed = load("pubmed", root=data_root, cache=False)
    assert pubmed.x is None and "allx" in pubmed.meta["missing"]


def test_directed_datasets_keep_file_edges(data_root):
    email = load("email-eu-core", root=data_root, cache=False)
    assert self_loops(email) == 642
    und = load("email-eu-core", root=data_root, cache=False, as_undirected=True)
    assert not und.directed and und.num_edges == 2 * 16064 and self_loops(und) == 0
    slash = load("slashdot", root=data_root, cache=False, as_undirected=True)
    assert slash.num_edges == 2 * 504230 and self_loops(slash) == 0


def test_musae_details(data_root):
    fb = load("facebook", root=data_root, cache=False, features="none")
    assert fb.x is None and fb.meta["self_loops_removed"] == 179
    assert fb.meta["class_names"] == ["company", "government", "politician", "tvshow"]
    assert torch.bincount(fb.y).tolist() == [6495, 6880, 5768, 3327]
    fr = load("twitch-fr", root=data_root, cache=False)
    assert fr.meta["duplicate_target_rows"] == 2
    # README counts 4,135 / 2,416 over the 6,551 rows; both duplicated users are mature.
    assert torch.bincount(fr.y).tolist() == [4135, 2414]
    assert set(fr.x.unique().tolist()) == {0.0, 1.0}
    sparse = load("twitch-fr", root=data_root, cache=False, features="sparse")
    assert torch.equal(sparse.x.to_dense(), fr.x)


def test_random_split_is_seeded_and_stratified(data_root):
    a = load("lastfm", root=data_root, cache=False)
    b = load("lastfm", root=data_root, cache=False, split_seed=0)
    c = load("lastfm", root=data_root, cache=False, seed=1)  # seed is the default split_seed
    assert torch.equal(a.train_mask, b.train_mask)
    assert not torch.equal(a.train_mask, c.train_mask) and c.meta["split"]["seed"] == 1
    assert not (a.train_mask & a.val_mask).any() and (a.train_mask | a.val_mask | a.test_mask).all()
    counts = torch.bincount(a.y, minlength=18)
    train = torch.bincount(a.y[a.train_mask], minlength=18)
    assert ((train - 0.6 * counts).abs() <= 1).all()
    assert a.meta["split"]["kind"] == "random-stratified"
    d = load("lastfm", root=data_root, cache=False, train_frac=0.1, val_frac=0.1)
    assert abs(int(d.train_mask.sum()) - 762) <= 18


def test_seed_is_accepted_everywhere(data_root):
    # The trainer passes seed= to every dataset; a fixed split ignores it.
    assert torch.equal(load("cora", root=data_root, seed=5).train_mask,
                       load("cora", root=data_root, cache=False).train_mask)


def test_names_and_available(data_root, tmp_path):
    all_names = names()
    assert {"cora", "citeseer", "pubmed", "facebook", "github", "deezer", "lastfm",
            "email-eu-core", "slashdot", "luxembourg-osm", "karate", "gemat11", "sbm",
            "rmat"} <= set(all_names)
    assert {f"twitch-{x}" for x in ("de", "engb", "es", "fr", "ptbr", "ru", "tw")} <= set(all_names)
    here = {r.name: r.present for r in available(data_root)}
    assert all(here.values())
    empty = {r.name: r.present for r in available(tmp_path)}
    assert empty["sbm"] and empty["rmat"] and not empty["karate"]
    assert empty["cora"] and empty["citeseer"]  # shipped in the package
    assert "nodes" in dataset_options("rmat") and "normalize_features" in dataset_options("cora")


def test_names_are_case_insensitive(data_root):
    assert load("KARATE", root=data_root).num_nodes == 34
    assert load("Twitch_PTBR", root=data_root, features="none").num_nodes == 1912


def test_data_root_from_environment(data_root, monkeypatch):
    monkeypatch.setenv("GNNMESH_DATA", str(data_root))
    assert load("karate").num_nodes == 34


# -- generators -------------------------------------------------------------------------

def test_sbm_sizes_and_determinism():
    g = load("sbm", nodes=600, classes=4, features=16, avg_degree=8, cache=False)
    assert (g.num_nodes, g.num_classes, g.num_features) == (600, 4, 16)
    assert g.num_edges == 2 * 2400 and not g.directed and g.adj.is_symmetric()
    assert self_loops(g) == 0
    assert torch.bincount(g.y).tolist() == [150] * 4
    same_graph(g, load("sbm", nodes=600, classes=4, features=16, avg_degree=8, cache=False))
    other = load("sbm", nodes=600, classes=4, features=16, avg_degree=8, seed=1, cache=False)
    assert not torch.equal(g.adj.indices, other.adj.indices)
    # Homophilous: most edges join nodes of the same class (p_in / p_out = 10 by default).
    same = (g.y[g.adj.indices] == g.y[g.adj.row()]).float().mean()
    assert 0.6 < same < 0.85
    assert g.x.dtype == torch.float32


def test_sbm_features_carry_the_class():
    g = load("sbm", nodes=2000, classes=5, features=32, cache=False)
    means = torch.stack([g.x[g.train_mask & (g.y == k)].mean(0) for k in range(5)])
    pred = torch.cdist(g.x, means).argmin(1)
    raw = (pred == g.y)[g.test_mask].float().mean()
    adj = g.adj.to_scipy() + sp.eye(g.num_nodes)
    smooth = torch.from_numpy(np.asarray(sp.diags(1 / adj.sum(1).A1) @ adj @ g.x.numpy()))
    means = torch.stack([smooth[g.train_mask & (g.y == k)].mean(0) for k in range(5)])
    agg = (torch.cdist(smooth, means).argmin(1) == g.y)[g.test_mask].float().mean()
    assert 0.35 < raw < 0.8 and agg > raw + 0.1  # learnable, and the graph helps


def test_rmat_sizes_and_determinism():
    g = load("rmat", scale=10, edge_factor=8, features=4, classes=3, cache=False)
    assert g.num_nodes == 1024 and g.num_edges == 8192 and g.directed
    assert g.num_features == 4 and g.num_classes == 3 and self_loops(g) == 0
    same_graph(g, load("rmat:scale=10,edge_factor=8,features=4,classes=3", cache=False))
    other = load("rmat", scale=10, edge_factor=8, features=4, classes=3, seed=7, cache=False)
    assert not torch.equal(g.adj.indices, other.adj.indices)
    deg = g.adj.degrees().float()
    assert deg.max() > 10 * deg.mean()  # power law: hubs
    odd = load("rmat", nodes=1000, edges=5000, features=0, undirected=True, cache=False)
    assert odd.num_nodes == 1000 and odd.num_edges == 10000 and odd.adj.is_symmetric()
    assert odd.x is None and not odd.directed
    only_edges = load("rmat", edges=3200, features=0, cache=False)
    assert only_edges.num_nodes == 200 and only_edges.num_edges == 3200


def test_generator_errors():
    with pytest.raises(GraphError, match="at most"):
        load("rmat", nodes=4, edges=100, cache=False)
    with pytest.raises(GraphError, match="disagree"):
        load("rmat", scale=4, nodes=10, cache=False)
    with pytest.raises(GraphError, match="a, b, c"):
        load("rmat", scale=4, a=0.9, b=0.2, cache=False)
    with pytest.raises(GraphError, match="classes"):
        load("sbm", nodes=3, classes=5, cache=False)


# -- spec strings -------------------------------------------------------------------------

def test_spec_strings():
    a = load("sbm:nodes=300,classes=3,avg_degree=4.5", cache=False)
    same_graph(a, load("sbm", nodes=300, classes=3, avg_degree=4.5, cache=False))
    b = load("rmat:nodes=1e3,edges=4000,features=8,undirected=true", cache=False)
    assert b.num_nodes == 1000 and b.num_edges == 8000 and not b.directed
    c = load("sbm:nodes=300,classes=3", classes=2, cache=False)  # keywords win
    assert c.num_classes == 2
    assert load("SBM:nodes=50,classes=2,cache=false").num_nodes == 50


@pytest.mark.parametrize("spec,message", [
    ("sbm:nodez=5", r"unknown option 'nodez'; valid options: .*avg_degree.*nodes"),
    ("sbm:nodes=abc", r"option 'nodes' expects int"),
    ("sbm:nodes=2.5", r"option 'nodes' expects int"),
    ("sbm:nodes", r"expected key=value"),
    ("rmat:undirected=maybe", r"option 'undirected' expects bool"),
    ("facebook:features=fancy", r"must be one of dense, sparse, none"),
])
def test_bad_specs(spec, message):
    with pytest.raises(GraphError, match=message):
        load(spec, root="/nonexistent")


# -- cache --------------------------------------------------------------------------------

def test_cache_round_trip(data_root, tmp_cache):
    for name, options in (("cora", {}), ("twitch-ptbr", {"features": "sparse"}),
                          ("gemat11", {}), ("email-eu-core", {})):
        first = load(name, root=data_root, **options)
        second = load(name, root=data_root, **options)
        same_graph(first, second)
        same_graph(first, load(name, root=data_root, cache=False, **options))
    entries = sorted(p.name.split("-")[0] for p in tmp_cache.iterdir())
    assert entries == ["cora", "email", "gemat11", "twitch"]
    g = load("sbm", nodes=100, classes=2)
    same_graph(g, load("sbm", nodes=100, classes=2))
    assert len(list(tmp_cache.iterdir())) == 5
    assert not any(p.name.startswith(".tmp") for p in tmp_cache.iterdir())


def test_cached_arrays_are_writable_without_warnings(tmp_cache, monkeypatch):
    monkeypatch.setattr(cache_mod, "_MMAP_MIN_BYTES", 0)  # memory-map every array
    load("sbm", nodes=200, classes=2)
    opened, np_load = {}, np.load

    def spy(file, *args, **kwargs):
        array = np_load(file, *args, **kwargs)
        opened[os.path.basename(file)] = array
        return array

    monkeypatch.setattr(np, "load", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = load("sbm", nodes=200, classes=2)
    x = opened["x.npy"]  # read from the cache, memory-mapped, and the very memory g.x uses
    assert isinstance(x, np.memmap) and str(x.filename).startswith(str(tmp_cache)), type(x)
    assert np.shares_memory(g.x.numpy(), x)
    g.x[0, 0] = 123.0  # copy-on-write: the file is untouched
    assert load("sbm", nodes=200, classes=2).x[0, 0] != 123.0


def test_sparse_dense_features_are_stored_compactly(data_root, tmp_cache, monkeypatch):
    monkeypatch.setattr(cache_mod, "_SPARSE_X_MIN_BYTES", 0)
    first = load("cora", root=data_root, normalize_features=False)
    (entry,) = tmp_cache.iterdir()
    assert (entry / "x_values.npy").exists() and not (entry / "x.npy").exists()
    same_graph(first, load("cora", root=data_root, normalize_features=False))


def test_cache_key_tracks_options_and_sources(tmp_path, tmp_cache):
    path = tmp_path / "g.txt"
    path.write_text("0 1\n1 2\n")
    assert load(path).num_edges == 2
    load(path, directed=False)
    assert len(list(tmp_cache.iterdir())) == 2
    path.write_text("0 1\n1 2\n2 3\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a changed file is re-read
    assert load(path).num_edges == 3
    load(path, cache=False)
    assert len(list(tmp_cache.iterdir())) == 3


def test_damaged_cache_entry_is_rebuilt(tmp_cache):
    g = load("sbm", nodes=100, classes=2)
    (entry,) = tmp_cache.iterdir()
    (entry / "indices.npy").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="unreadable cache entry"):
        again = load("sbm", nodes=100, classes=2)
    same_graph(g, again)
    same_graph(g, load("sbm", nodes=100, classes=2))


def test_cache_dir_option(tmp_path):
    where = tmp_path / "elsewhere"
    load("sbm", nodes=50, classes=2, cache_dir=str(where))
    assert len(list(where.iterdir())) == 1


def test_unwritable_cache_only_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="could not write"):
        g = load("sbm", nodes=50, classes=2, cache_dir=str(blocker / "sub"))
    assert g.num_nodes == 50


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("GNNMESH_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_mod.default_dir() == tmp_path / ".cache" / "gnnmesh"
    monkeypatch.setenv("GNNMESH_CACHE", "/x/y")
    assert str(cache_mod.default_dir()) == "/x/y"
    assert str(cache_mod.default_dir("/a")) == "/a"


@pytest.mark.slow
def test_rmat_10m_edges_second_load_is_fast(tmp_path):
    spec = "rmat:nodes=1000000,edges=10000000,features=128"
    where = tmp_path / "big-cache"
    try:
        t0 = time.perf_counter()
        first = load(spec, cache_dir=str(where))
        generated = time.perf_counter() - t0
        t0 = time.perf_counter()
        second = load(spec, cache_dir=str(where))
        loaded = time.perf_counter() - t0
        print(f"\nrmat 10M edges: generate + cache {generated:.2f}s, second load {loaded:.3f}s")
        assert second.num_edges == 10_000_000 and second.num_nodes == 1_000_000
        assert torch.equal(first.adj.indices[-1000:], second.adj.indices[-1000:])
        assert float(second.x.sum()) == pytest.approx(float(first.x.sum()))
        assert loaded < 2.0
    finally:
        shutil.rmtree(where, ignore_errors=True)  # 0.6 GB: do not leave it in pytest's tmp


# -- generic files --------------------------------------------------------------------------

def edges_of(g):
    return sorted(zip(g.adj.indices.tolist(), g.adj.row().tolist()))  # (source, target)


def test_edge_list_formats(tmp_path):
    text = "# comment\n% other comment\n0\t1\r\n1 2\n\n  2   0  \n"
    (tmp_path / "e.txt").write_text(text)
    g = load(tmp_path / "e.txt", cache=False)
    assert edges_of(g) == [(0, 1), (1, 2), (2, 0)] and g.directed
    with gzip.open(tmp_path / "e.edges.gz", "wt") as fh:
        fh.write(text)
    gz = load(tmp_path / "e.edges.gz", cache=False)
    same_graph(g, gz.replace(meta=g.meta))
    (tmp_path / "w.csv").write_text("src,dst,weight\n0,1,0.5\n1,0,0.5\n1,2,2\n")
    w = load(str(tmp_path / "w.csv"), cache=False)
    assert w.adj.values is not None and w.directed
    und = load(tmp_path / "w.csv", directed=False, cache=False)
    assert not und.directed and und.num_edges == 4 and und.adj.is_symmetric()
    assert sorted(und.adj.values.tolist()) == [0.5, 0.5, 2.0, 2.0]  # both ways: max, not sum
    plain = load(tmp_path / "w.csv", weighted=False, cache=False)
    assert plain.adj.values is None
    sym = tmp_path / "s.el"
    sym.write_text("1 2\n2 1\n2 3\n3 2\n3 3\n")
    s = load(sym, index_base=1, cache=False)
    assert not s.directed and s.num_nodes == 3 and self_loops(s) == 1
    assert self_loops(load(sym, index_base=1, remove_self_loops=True, cache=False)) == 0
    assert load(sym, num_nodes=10, cache=False).num_nodes == 10
    odd = tmp_path / "graph.data"
    odd.write_text("0 1\n")
    assert load(odd, format="edgelist", cache=False).num_edges == 1
    assert load(f"{sym}:index_base=1,directed=true", cache=False).directed


def test_edge_list_relative_to_root(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g.txt").write_text("0 1\n")
    assert load("sub/g.txt", root=tmp_path, cache=False).num_edges == 1


def test_mtx_formats(tmp_path):
    (tmp_path / "p.mtx").write_text("%%MatrixMarket matrix coordinate pattern symmetric\n"
                                    "% comment\n4 4 3\n2 1\n3 1\n4 3\n")
    p = load(tmp_path / "p.mtx", cache=False)
    assert not p.directed and p.num_edges == 6 and p.adj.values is None
    (tmp_path / "r.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                                    "3 3 3\n1 2 0.5\n2 3 -1.5\n3 3 2\n")
    r = load(tmp_path / "r.mtx", cache=False)
    # Entry (i, j) is the edge i -> j, stored as adj[j, i].
    assert r.directed
    assert np.array_equal(r.adj.to_scipy().toarray().T, [[0, 0.5, 0], [0, 0, -1.5], [0, 0, 2]])
    (tmp_path / "i.mtx").write_text("%%MatrixMarket matrix coordinate integer skew-symmetric\n"
                                    "2 2 1\n2 1 3\n")
    i = load(tmp_path / "i.mtx", cache=False)
    assert np.array_equal(i.adj.to_scipy().toarray().T, [[0, -3], [3, 0]])
    (tmp_path / "a.mtx").write_text("%%MatrixMarket matrix array real general\n2 2\n0\n1\n2\n0\n")
    a = load(tmp_path / "a.mtx", cache=False)
    assert np.array_equal(a.adj.to_scipy().toarray().T, [[0, 2], [1, 0]])
    (tmp_path / "n.mtx").write_text("2 1\n3 2\n")  # no banner: 1-based list, like luxembourg_osm
    n = load(tmp_path / "n.mtx", directed=False, cache=False)
    assert n.num_nodes == 3 and n.num_edges == 4 and "banner" in n.meta["note"]
    with gzip.open(tmp_path / "p2.mtx.gz", "wb") as fh:
        fh.write((tmp_path / "p.mtx").read_bytes())
    assert edges_of(load(tmp_path / "p2.mtx.gz", cache=False)) == edges_of(p)


def write_npz(path, n=5, **extra):
    adj = sp.csr_matrix(np.array([[0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0],
                                  [0, 0, 0, 0, 1], [1, 0, 0, 0, 0]], dtype=np.float32))
    attr = sp.csr_matrix(np.eye(n, 3, dtype=np.float32))
    arrays = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
                  adj_shape=np.array(adj.shape), attr_data=attr.data, attr_indices=attr.indices,
                  attr_indptr=attr.indptr, attr_shape=np.array(attr.shape),
                  labels=np.array([0, 1, 0, 1, 2]))
    arrays.update(extra)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_npz_round_trip(tmp_path):
    g = load(write_npz(tmp_path / "g.npz"), cache=False)
    assert g.num_nodes == 5 and g.num_edges == 5 and g.directed and g.num_classes == 3
    assert edges_of(g) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]  # row = source
    assert torch.equal(g.x, torch.eye(5, 3)) and g.y.tolist() == [0, 1, 0, 1, 2]
    assert g.train_mask is not None and g.meta["split"]["seed"] == 0
    dense = load(write_npz(tmp_path / "d.npz", attr_data=None, attr_indices=None,
                           attr_indptr=None, attr_shape=None,
                           attr_matrix=np.ones((5, 2), np.float32),
                           train_mask=np.array([1, 1, 0, 0, 0], bool)), cache=False)
    assert dense.x.shape == (5, 2) and dense.train_mask.sum() == 2 and dense.val_mask is None


def test_npz_target_matrix(tmp_path, tmp_cache):
    """An [N, T] labels field gives float targets of width T, a plain random split, and comes
    back from the cache as it was loaded."""
    targets = np.array([[0, 1], [1, 1], [0, 0], [1, 0], [0.5, 2]], np.float64)
    g = load(write_npz(tmp_path / "t.npz", labels=targets))
    assert g.y.dtype == torch.float32 and torch.equal(g.y, torch.tensor(targets, dtype=torch.float32))
    assert g.num_classes == 2 and g.meta["split"]["kind"] == "random" and int(g.train_mask.sum()) == 3
    again = load(tmp_path / "t.npz")
    assert torch.equal(again.y, g.y) and again.num_classes == 2
    flags = load(write_npz(tmp_path / "b.npz", labels=np.array([[True, False]] * 5)), cache=False)
    assert flags.y.dtype == torch.float32 and flags.y.sum() == 5  # booleans: 0/1 targets
    assert load(write_npz(tmp_path / "c.npz", labels=np.arange(5) % 2 == 1), cache=False).y.tolist() == [0, 1, 0, 1, 0]


def test_structural_features(data_root):
    g = load("karate", root=data_root)
    deg = structural_features(g, "degree")
    assert deg.shape == (34, 1) and torch.allclose(deg[:, 0], torch.log1p(g.adj.degrees().float()))
    assert structural_features(load("gemat11", root=data_root), "degree").shape == (4929, 2)
    assert torch.equal(structural_features(g, "onehot"), torch.eye(34))
    assert structural_features(g, "constant").shape == (34, 1)
    r = structural_features(g, "random", dim=8, seed=1)
    assert r.shape == (34, 8) and torch.equal(r, structural_features(g, "random", dim=8, seed=1))
    with pytest.raises(GraphError, match="degree, onehot"):
        structural_features(g, "bogus")
    with pytest.raises(GraphError, match="GB"):
        structural_features(load("luxembourg-osm", root=data_root), "onehot")
    g.replace(x=deg).validate()


def test_chunked_parsing_keeps_line_numbers(tmp_path, monkeypatch):
    from gnnmesh.datasets import _text
    monkeypatch.setattr(_text, "_CHUNK_BYTES", 16)  # many chunks, some in mid-line
    lines = ["src,dst"] + [f"{i},{i + 1}" for i in range(200)]
    lines.insert(50, "# a comment in the middle")
    path = tmp_path / "big.csv"
    path.write_text("\n".join(lines) + "\n")
    g = load(path, cache=False)
    assert g.num_edges == 200 and edges_of(g) == [(i, i + 1) for i in range(200)]
    lines[150] = "7,x"
    path.write_text("\n".join(lines))
    with pytest.raises(GraphError, match="big.csv line 151: non-integer node id 'x'"):
        load(path, cache=False)
    lines[150] = "7,8,9"
    path.write_text("\n".join(lines))
    with pytest.raises(GraphError, match=r"big.csv line 151: expected 2 columns \(as on line 2\)"):
        load(path, cache=False)


def test_random_labels_make_an_unlabeled_graph_trainable(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("0 1\n1 2\n2 3\n3 0\n4 5\n5 6\n6 7\n7 4\n")
    graph = load(str(path), random_labels=3, cache=False)
    assert graph.num_classes == 3 and graph.y.shape == (8,) and int(graph.y.max()) < 3
    masks = graph.train_mask.int() + graph.val_mask.int() + graph.test_mask.int()
    assert bool((masks == 1).all())
    assert load(str(path), cache=False).y is None
