"""Nonzeros per 2D block of the adjacency under the double permutation (random and
balanced), and its command."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from gnnmesh import cli
from gnnmesh.errors import ConfigError
from gnnmesh.graph import Adjacency
from gnnmesh.layout.ranges import block_bounds
from gnnmesh.parallel.grid3d import permutation as permute
from gnnmesh.parallel.grid3d.permutation import (balance, balanced_permutations, block_nnz, check_grid,
                                                 max_over_mean, peak_bound, permutations, permute_adjacency)
from gnnmesh.transforms import add_self_loops

from tests.forked import run_cli
from tests.helpers import random_graph

RMAT = "rmat:nodes=2000,edges=20000,features=0"


def dense_blocks(adj, grid, row_perm=None, col_perm=None):
    """Reference: place every entry explicitly, then sum the blocks of a dense matrix."""
    n_rows, n_cols = adj.shape
    mat = adj.to_scipy().tocoo()
    rows = mat.row if row_perm is None else np.asarray(row_perm)[mat.row]
    cols = mat.col if col_perm is None else np.asarray(col_perm)[mat.col]
    full = np.zeros(adj.shape)
    full[rows, cols] = 1
    return np.array([[full[np.ix_(r, c)].sum() for c in np.array_split(np.arange(n_cols), grid[1])]
                     for r in np.array_split(np.arange(n_rows), grid[0])])


def test_block_bounds_are_near_equal_ranges():
    for size, parts in [(10, 3), (9, 3), (5, 5), (1000, 7)]:
        bounds = block_bounds(size, parts)
        assert bounds[0] == 0 and bounds[-1] == size
        assert np.array_equal(np.diff(bounds), [len(p) for p in np.array_split(np.arange(size), parts)])


def test_known_small_example():
    # A dense 2 x 2 community in the top-left corner and two self-loops.
    adj = Adjacency.from_coo([0, 0, 1, 1, 2, 3], [0, 1, 0, 1, 2, 3], (4, 4))
    assert block_nnz(adj, (2, 2)).tolist() == [[4, 0], [0, 2]]
    assert max_over_mean(block_nnz(adj, (2, 2))) == pytest.approx(4 / 1.5)
    # Swapping rows 1 and 2 moves one row of the community into the bottom row block.
    moved = block_nnz(adj, (2, 2), row_perm=[0, 2, 1, 3])
    assert moved.tolist() == [[2, 1], [2, 1]]
    assert max_over_mean(moved) == pytest.approx(2 / 1.5)
    assert block_nnz(adj, (1, 4)).tolist() == [[2, 2, 1, 1]]


@pytest.mark.parametrize("grid", [(1, 1), (3, 4), (8, 8), (5, 2)])
def test_counts_sum_to_nnz_and_match_a_dense_reference(grid, monkeypatch):
    monkeypatch.setattr(permute, "_CHUNK", 17)  # many chunks, rows split across none
    adj = random_graph(n=60, e=400).adj
    row_perm, col_perm = permutations(60, seed=5)
    for perms in [(None, None), (row_perm, row_perm), (row_perm, col_perm), (None, col_perm)]:
        counts = block_nnz(adj, grid, *perms)
        assert counts.shape == grid and counts.dtype == np.int64
        assert counts.sum() == adj.nnz
        assert np.array_equal(counts, dense_blocks(adj, grid, *perms))


def test_rectangular_matrix_and_empty_rows():
    keep = np.ones(30)
    keep[5:12] = 0  # empty rows
    mat = sp.diags(keep) @ sp.random(30, 50, density=0.1, random_state=3, format="csr")
    mat.eliminate_zeros()
    adj = Adjacency.from_scipy(mat)
    counts = block_nnz(adj, (4, 3), row_perm=np.random.default_rng(1).permutation(30))
    assert counts.sum() == adj.nnz
    assert np.array_equal(counts, dense_blocks(adj, (4, 3), np.random.default_rng(1).permutation(30)))


def test_permute_adjacency_moves_entries_and_values():
    adj = random_graph(n=40, e=200, weighted=True).adj
    row_perm, col_perm = permutations(40, seed=2)
    moved = permute_adjacency(adj, row_perm, col_perm)
    expect = np.zeros((40, 40), dtype=np.float32)
    coo = adj.to_scipy().tocoo()
    expect[row_perm[coo.row], col_perm[coo.col]] = coo.data
    assert np.array_equal(moved.to_scipy().toarray(), expect)
    assert moved.to_scipy().has_sorted_indices
    assert np.array_equal(block_nnz(moved, (3, 5)), block_nnz(adj, (3, 5), row_perm, col_perm))


def test_double_permutation_balances_dense_diagonal_blocks():
    # 8 communities of 1000 nodes, about 20 neighbours inside each, every node with a
    # self-loop: all nonzeros start in the 8 diagonal blocks of an 8 x 8 grid.
    rng = np.random.default_rng(0)
    n, size = 8000, 1000
    src = rng.integers(0, n, 20 * n)
    dst = src // size * size + rng.integers(0, size, src.shape[0])
    loops = np.arange(n)
    adj = Adjacency.from_coo(np.concatenate([dst, loops]), np.concatenate([src, loops]), (n, n))
    counts = balance(adj, (8, 8), seed=0)
    assert counts["original"].sum() == np.trace(counts["original"])  # nothing off the diagonal
    result = {k: max_over_mean(v) for k, v in counts.items()}
    assert result["original"] == pytest.approx(8.0, rel=0.05)
    # One permutation scatters the communities but keeps the diagonal in diagonal blocks.
    assert 1.2 < result["one"] < 2.0
    assert result["two"] < 1.08 and result["two"] < result["one"] < result["original"]


def test_self_loops_count_a_plus_i():
    adj = random_graph(n=50, e=300).adj
    plain, with_loops = balance(adj, (2, 3)), balance(adj, (2, 3), self_loops=True)
    loops_stored = int((adj.to_scipy().diagonal() != 0).sum())
    for key in ("original", "one", "two"):
        assert with_loops[key].sum() == plain[key].sum() + 50 - loops_stored


@pytest.mark.parametrize("grid", [(0, 2), (2,), "8,8", (2.5, 2), (3, 61)])
def test_check_grid_rejects(grid):
    with pytest.raises(ConfigError, match="grid"):
        check_grid(grid, (60, 60))


def test_bad_permutation_is_rejected():
    adj = random_graph(n=10, e=30).adj
    with pytest.raises(ValueError, match="permutation"):
        block_nnz(adj, (2, 2), row_perm=[0] * 10)
    with pytest.raises(ValueError, match="permutation"):
        block_nnz(adj, (2, 2), col_perm=np.arange(9))


def test_command_reports_the_three_orders(capsys):
    assert cli.main(["partition", "--dataset", RMAT, "--strategy", "grid3d", "--grid", "4,4",
                     "--seed", "3"]) == 0
    out = capsys.readouterr().out
    from gnnmesh import datasets
    expect = balance(datasets.load(RMAT).adj, (4, 4), seed=3)
    for label, key in [("original:", "original"), ("one permutation:", "one"),
                       ("two permutations:", "two")]:
        line = next(line for line in out.splitlines() if line.strip().startswith(label))
        assert float(line.split(":")[1].split()[0]) == pytest.approx(max_over_mean(expect[key]), abs=1e-3)
    assert "4 x 4 of A," in out
    pair = balanced_permutations(datasets.load(RMAT).adj, (4, 4), seed=3, self_loops=False)
    balanced = max_over_mean(block_nnz(datasets.load(RMAT).adj, (4, 4), *pair))
    line = next(line for line in out.splitlines() if line.strip().startswith("balanced pair:"))
    assert float(line.split(":")[1].split()[0]) == pytest.approx(balanced, abs=1e-3)
    line = next(line for line in out.splitlines() if line.strip().startswith("no pair below:"))
    assert int(line.split("(max")[1].strip(" )").replace(",", "")) == peak_bound(datasets.load(RMAT).adj, (4, 4))


@pytest.mark.parametrize("args, fragment", [
    (["--grid", "4"], "--grid"), (["--grid", "4,0"], "--grid"), (["--grid", "a,b"], "--grid"),
    (["--grid", "2,2,2"], "--grid"), (["--grid", "3000,2"], "--grid"), ([], "--grid R,C"),
    (["--grid", "2,2", "--parts", "4"], "--nparts"),
])
def test_command_bad_grid_is_one_line_and_status_2(args, fragment, capsys):
    assert cli.main(["partition", "--dataset", RMAT, "--strategy", "grid3d", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gnnmesh: error:") and fragment in err[0]


def test_command_grid_flags_need_the_grid3d_strategy(capsys):
    assert cli.main(["partition", "--dataset", RMAT, "--method", "rp", "--grid", "2,2"]) == 2
    assert "--grid applies only to --strategy grid3d" in capsys.readouterr().err
    assert cli.main(["partition", "--dataset", RMAT, "--method", "rp"]) == 2
    assert "--nparts is required" in capsys.readouterr().err


def test_command_as_a_subprocess():
    run = run_cli("partition", "--dataset", RMAT, "--strategy", "grid3d", "--grid", "8,x", timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "--grid" in run.stderr


# -- balanced pair ------------------------------------------------------------------------

def communities_and_hubs(n=8000, size=1000, degree=12, hubs=6, seed=0):
    """Dense diagonal communities (every entry starts in a diagonal block of 8 x 8), hub rows
    and hub columns hundreds of entries long, and self-loops."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, degree * n)
    dst = src // size * size + rng.integers(0, size, src.shape[0])
    hub = rng.choice(n, hubs, replace=False)
    spokes = rng.integers(0, n, (hubs, n // 12))
    rows = np.concatenate([dst, np.repeat(hub, spokes.shape[1]), spokes.ravel(), np.arange(n)])
    cols = np.concatenate([src, spokes.ravel(), np.repeat(hub, spokes.shape[1]), np.arange(n)])
    return Adjacency.from_coo(rows, cols, (n, n), reduce="max")


def is_permutation(perm, size):
    return perm.shape == (size,) and np.array_equal(np.sort(perm), np.arange(size))


def test_balanced_pair_is_a_pair_of_permutations_and_deterministic():
    adj = random_graph(n=300, e=2000).adj
    row_perm, col_perm = balanced_permutations(adj, (4, 3), seed=1)
    assert is_permutation(row_perm, 300) and is_permutation(col_perm, 300)
    again = balanced_permutations(adj, (4, 3), seed=1)
    assert np.array_equal(again[0], row_perm) and np.array_equal(again[1], col_perm)
    # self_loops counts A + I, as if the loops were stored.
    stored = balanced_permutations(add_self_loops(adj), (4, 3), seed=1, self_loops=False)
    assert np.array_equal(stored[0], row_perm) and np.array_equal(stored[1], col_perm)


def test_balanced_pair_on_a_rectangular_matrix():
    mat = sp.random(90, 140, density=0.05, random_state=4, format="csr")
    adj = Adjacency.from_scipy(mat)
    row_perm, col_perm = balanced_permutations(adj, (3, 5), self_loops=False)
    assert is_permutation(row_perm, 90) and is_permutation(col_perm, 140)
    assert block_nnz(adj, (3, 5), row_perm, col_perm).sum() == adj.nnz


def test_balanced_beats_random_with_hubs_and_dense_diagonal_blocks():
    adj = communities_and_hubs()
    counts = balance(adj, (8, 8), seed=0, balanced=True)
    assert counts["balanced"].sum() == adj.nnz
    assert max_over_mean(counts["balanced"]) <= max_over_mean(counts["two"])
    assert counts["balanced"].max() >= peak_bound(adj, (8, 8))
    assert max_over_mean(counts["balanced"]) < 1.01 < max_over_mean(counts["two"])


@pytest.mark.parametrize("small", [False, True])
def test_balanced_reaches_one_percent_on_a_graph_with_enough_nonzeros(small, monkeypatch):
    if small:  # few items placed one by one, few swap candidates: the bulk paths do the work
        monkeypatch.setattr(permute, "_EXACT", 64)
        monkeypatch.setattr(permute, "_SAMPLE", 2000)
        monkeypatch.setattr(permute, "_KINDS", 32)
    from gnnmesh import datasets
    adj = add_self_loops(datasets.load("rmat:nodes=20000,edges=200000,features=0").adj)
    assert adj.nnz > 200_000
    row_perm, col_perm = balanced_permutations(adj, (8, 8), seed=0, self_loops=False)
    counts = block_nnz(adj, (8, 8), row_perm, col_perm)
    # Random pairs stay above 1.1 here (hubs); about 3,400 nonzeros per block.
    assert max_over_mean(balance(adj, (8, 8), seed=0)["two"]) > 1.1
    assert peak_bound(adj, (8, 8)) <= counts.max()
    assert max_over_mean(counts) <= 1.01


def test_balanced_for_several_block_shapes_balances_each():
    # The planes of a 2 x 4 x 8 grid: the cut points of 2, 4 and 8 parts do not nest.
    adj = communities_and_hubs(n=6000, size=750, degree=8, hubs=4, seed=2)
    x, y, z = 2, 4, 8
    pair = balanced_permutations(adj, [(z, x), (x, y), (y, z)], seed=0)
    adj = add_self_loops(adj)
    random_pair = permutations(6000, 0)
    for shape in [(z, x), (z, y), (x, y), (x, z), (y, z), (y, x)]:
        balanced = max_over_mean(block_nnz(adj, shape, *pair))
        assert balanced < 1.01
        assert balanced < max_over_mean(block_nnz(adj, shape, *random_pair))


def test_peak_bound_never_beats_the_best_pair():
    # Every split of 6 rows (and columns) into blocks of 3 and 3, for small random patterns.
    splits = [np.isin(np.arange(6), c).astype(int) ^ 1 for c in itertools.combinations(range(6), 3)]
    for seed in range(5):
        mat = sp.random(6, 6, density=0.45, random_state=seed, format="csr") + sp.eye(6, format="csr")
        adj = Adjacency.from_scipy(mat.tocsr())
        dense_pattern = mat.toarray() != 0
        best = min(max(dense_pattern[np.ix_(r == i, c == j)].sum() for i in (0, 1) for j in (0, 1))
                   for r in splits for c in splits)
        assert peak_bound(adj, (2, 2)) <= best <= block_nnz(adj, (2, 2), *balanced_permutations(
            adj, (2, 2), self_loops=False)).max()


def test_peak_bound_of_a_star():
    # Row 0 holds 40 entries; its stripe has 4 rows, the other 3 at least one entry each.
    n = 40
    rows = np.concatenate([np.zeros(n, int), np.arange(1, n)])
    cols = np.concatenate([np.arange(n), np.arange(1, n)])
    adj = Adjacency.from_coo(rows, cols, (n, n))
    assert peak_bound(adj, (10, 4)) == -(-(40 + 3) // 4)
    assert peak_bound(adj, (1, 1)) == adj.nnz


@pytest.mark.parametrize("grid", [(0, 2), (2, 61), [(2, 2), (3,)]])
def test_balanced_rejects_bad_grids(grid):
    with pytest.raises(ConfigError, match="grid"):
        balanced_permutations(random_graph(n=60, e=200).adj, grid)
