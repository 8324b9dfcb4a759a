"""2D block files: written once, each rank reads and merges only its blocks."""

import json
import sys

import numpy as np
import pytest
import torch

from gnnmesh import cli, datasets
from gnnmesh.graph import sparse_csr
from gnnmesh.errors import ConfigError, GraphError
from gnnmesh.parallel.grid3d.permutation import inverse, permutations, permute_adjacency
from gnnmesh.parallel.grid3d.block_files import open_block_files, read_cost, write_block_files
from gnnmesh.partition import graph_key

from tests.helpers import random_graph

RANGES = [0, 2, (1, 3), range(0, 3)]


def expected_orders(n, seed, swap):
    if seed is None:
        return None, None
    row_perm, col_perm = permutations(n, seed)
    return (col_perm, row_perm) if swap else (row_perm, col_perm)


@pytest.mark.parametrize("seed, swap, weighted", [(None, False, False), (7, False, True),
                                                  (7, True, False)])
def test_round_trip_equals_the_permuted_adjacency_in_memory(tmp_path, seed, swap, weighted):
    graph = random_graph(n=47, e=400, weighted=weighted)
    write_block_files(graph, tmp_path / "s", (3, 4), seed=seed, swap=swap)
    files = open_block_files(tmp_path / "s", fingerprint=graph_key(graph.adj), grid=(3, 4), seed=seed)
    row_perm, col_perm = expected_orders(47, seed, swap)
    full = permute_adjacency(graph.adj, row_perm, col_perm).to_scipy().toarray()
    rb, cb = files.row_bounds, files.col_bounds
    assert rb.tolist() == [0, 16, 32, 47] and cb.tolist() == [0, 12, 24, 36, 47]
    for rows in RANGES[:3]:
        for cols in RANGES + [(0, 4)]:
            block = files.block(rows, cols)
            r = range(rows, rows + 1) if isinstance(rows, int) else range(*rows)
            c = range(cols, cols + 1) if isinstance(cols, int) else \
                cols if isinstance(cols, range) else range(*cols)
            want = full[rb[r.start]:rb[r.stop], cb[c.start]:cb[c.stop]]
            assert block.shape == want.shape
            assert np.array_equal(block.to_scipy().toarray(), want)
            assert (block.values is not None) == weighted
            assert block.indptr.dtype == block.indices.dtype == torch.int64
            assert block.to_scipy().has_sorted_indices
    order = np.arange(47) if row_perm is None else inverse(row_perm)
    for name in ("x", "y", "train_mask", "val_mask", "test_mask"):
        got = files.vertex(name, (1, 3))
        assert torch.equal(got, getattr(graph, name)[torch.from_numpy(order[16:])])
    assert set(files.vertex_data(0)) == {"x", "y", "train_mask", "val_mask", "test_mask"}


def test_sparse_features_and_missing_fields(tmp_path):
    graph = random_graph(n=30, e=100)
    dense = (graph.x > 1.0).float()
    csr = dense.to_sparse_csr()
    x = sparse_csr(csr.crow_indices(), csr.col_indices(), csr.values(), dense.shape)
    graph = graph.replace(x=x, val_mask=None)
    write_block_files(graph, tmp_path / "s", (2, 2), seed=1)
    files = open_block_files(tmp_path / "s")
    order = inverse(permutations(30, 1)[0])
    got = files.vertex("x", (0, 2))
    assert got.layout == torch.sparse_csr
    assert torch.equal(got.to_dense(), dense[torch.from_numpy(order)])
    assert files.vertex("val_mask", 0) is None


def test_rewrite_replaces_the_set_and_leaves_no_temporaries(tmp_path):
    graph = random_graph(n=40, e=200)
    write_block_files(graph, tmp_path / "s", (2, 2), seed=0)
    write_block_files(graph, tmp_path / "s", (4, 1), seed=None)
    assert open_block_files(tmp_path / "s").grid == (4, 1)
    assert not list((tmp_path / "s").glob("adj-0-1.*"))  # nothing left from the 2 x 2 set
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_refuses_to_overwrite_a_directory_of_other_files(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not a block-file directory"):
        write_block_files(random_graph(), tmp_path / "d", (2, 2))
    assert (tmp_path / "d" / "notes.txt").read_text() == "keep me"


@pytest.fixture()
def written(tmp_path):
    graph = random_graph(n=40, e=300, weighted=True)
    write_block_files(graph, tmp_path / "s", (2, 2), seed=3)
    return graph, tmp_path / "s"


def test_a_set_of_another_graph_grid_or_seed_is_refused(written):
    graph, path = written
    other = random_graph(n=40, e=300, seed=9)
    with pytest.raises(ConfigError, match=r"manifest\.json: the block files are of another graph"):
        open_block_files(path, fingerprint=graph_key(other.adj))
    with pytest.raises(ConfigError, match=r"manifest\.json: the blocks are cut 2 x 2, expected 4 x 4"):
        open_block_files(path, grid=(4, 4))
    with pytest.raises(ConfigError, match="permutation seed 3, expected None"):
        open_block_files(path, seed=None)
    open_block_files(path, fingerprint=graph_key(graph.adj), grid=(2, 2), seed=3)


def test_missing_or_damaged_manifest(written, tmp_path):
    _, path = written
    with pytest.raises(GraphError, match=r"empty[/\\]manifest\.json: missing"):
        open_block_files(tmp_path / "empty")
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(GraphError, match=r"manifest\.json: unreadable"):
        open_block_files(path)


def test_manifest_inconsistent_with_its_grid(written):
    _, path = written
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["grid"] = [3, 2]
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(GraphError, match="do not match the grid"):
        open_block_files(path)


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.unlink(), "missing block file"),
    (lambda f: f.write_bytes(f.read_bytes()[:-16]), "unreadable block file"),
    (lambda f: f.write_bytes(b"garbage"), "unreadable block file"),
    (lambda f: np.save(f, np.load(f)[:-1]), "corrupt block file"),
    (lambda f: np.save(f, np.load(f).astype(np.int32)), "corrupt block file"),
    (lambda f: np.save(f, np.load(f) + 1000), "corrupt block file: column ids outside"),
])
def test_a_missing_or_corrupt_shard_names_its_file(written, damage, message):
    _, path = written
    files = open_block_files(path)
    if files.nnz[1, 0] == 0:
        pytest.skip("empty block")
    damage(path / "adj-1-0.indices.npy")
    with pytest.raises(GraphError, match=r"adj-1-0\.indices\.npy: " + message):
        files.block(1, (0, 2))
    files.block(0, (0, 2))  # the other row block is still readable


def test_corrupt_row_pointer_and_vertex_piece(written):
    _, path = written
    ptr = np.load(path / "adj-0-1.indptr.npy")
    ptr[-1] += 1  # one entry more than the manifest and the indices file hold
    np.save(path / "adj-0-1.indptr.npy", ptr)
    files = open_block_files(path)
    with pytest.raises(GraphError, match=r"adj-0-1\.indptr\.npy: corrupt block file"):
        files.block(0, 1)
    np.save(path / "y-1.npy", np.zeros(3, dtype=np.int64))
    with pytest.raises(GraphError, match=r"y-1\.npy: holds int64 \[3\]"):
        files.vertex("y", 1)


@pytest.mark.parametrize("rows", [2, (1, 1), (0, 3), (-1, 1), range(0, 2, 2), (0, 1, 2), "a"])
def test_block_ranges_are_checked(written, rows):
    _, path = written
    with pytest.raises(ConfigError, match="row blocks"):
        open_block_files(path).block(rows, 0)


def test_command_writes_shards(tmp_path, capsys):
    spec = "rmat:nodes=500,edges=4000,features=4"
    out = tmp_path / "shards"
    assert cli.main(["partition", "--dataset", spec, "--strategy", "grid3d", "--grid", "2,3",
                     "--seed", "5", "--write-shards", str(out)]) == 0
    assert f"written to {out}" in capsys.readouterr().out
    graph = datasets.load(spec)
    files = open_block_files(out, fingerprint=graph_key(graph.adj), grid=(2, 3), seed=5)
    row_perm, col_perm = permutations(500, 5)
    full = permute_adjacency(graph.adj, row_perm, col_perm).to_scipy()
    assert (files.block((0, 2), (0, 3)).to_scipy() != full).nnz == 0
    assert cli.main(["partition", "--dataset", spec, "--method", "rp", "--parts", "2",
                     "--write-shards", str(out)]) == 2


@pytest.mark.slow  # a memory run
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_rank_reads_a_fraction_of_the_graph(tmp_path):
    graph = datasets.load("rmat:nodes=250000,edges=4000000,features=0", cache=False)
    write_block_files(graph.replace(y=None, train_mask=None, val_mask=None, test_mask=None),
                 tmp_path / "s", (4, 4), seed=0)
    whole = graph.adj.indptr.numel() * 8 + graph.adj.indices.numel() * 8
    del graph

    def peak(blocks):  # (extra peak RSS, nonzeros read) in a fresh interpreter
        return read_cost(tmp_path / "s", blocks, timeout=120)

    one, nnz = peak("(0, 0)")
    assert 0.04 * 4_000_000 < nnz < 0.1 * 4_000_000  # about 1/16 of the entries
    assert one < 0.5 * whole, f"one block of 16 grew RSS by {one / whole:.2f} x the whole graph"
    # Control: reading every block costs about the whole graph, so the probe measures reads.
    everything, nnz = peak("((0, 4), (0, 4))")
    assert nnz == 4_000_000 and everything > 0.9 * whole
