"""``lp``: the distributed label propagation partitioner (gnnmesh.partition.propagate) on real
gloo ranks, on one process, and in the single-process simulation of many ranks."""

from __future__ import annotations

import numpy as np
import pytest

from gnnmesh import Adjacency
from gnnmesh.comm import Comm
from gnnmesh.partition import partition, quality
from gnnmesh.partition.base import csr_arrays
from gnnmesh.partition.propagate import Solo, _dealt, propagate
from gnnmesh.partition.simulate import simulate

from tests.dist import run_ranks


def sbm():
    from gnnmesh.datasets import load
    return load("sbm:nodes=2000,classes=4,features=4,p_in_ratio=40", cache=False).adj


def directed():
    """A directed graph (each edge one way only) of three groups of 150 vertices, most
    edges inside a group, with self-loops on some rows; vertex ids interleave the groups."""
    rng = np.random.default_rng(3)
    n, edges = 450, 1800
    group = np.arange(n) % 3
    src = rng.integers(0, n, edges)
    inside = rng.random(edges) < 0.9
    dst = np.where(inside, rng.integers(0, n // 3, edges) * 3 + group[src], rng.integers(0, n, edges))
    loops = np.arange(0, n, 7)
    return Adjacency.from_coo(np.concatenate([dst, loops]), np.concatenate([src, loops]), (n, n))


def with_isolated():
    """Edges among the first and last 100 vertices only; 300 vertices in between have none,
    so that with three ranks the middle rank's block holds no edge at all."""
    rng = np.random.default_rng(4)
    ends = np.concatenate([np.arange(100), np.arange(400, 500)])
    src, dst = rng.choice(ends, 800), rng.choice(ends, 800)
    return Adjacency.from_coo(np.concatenate([src, dst]), np.concatenate([dst, src]), (500, 500))


def tiny():
    """12 vertices, a ring with one chord: split into 12 parts, one vertex each."""
    src = np.concatenate([np.arange(12), [0]])
    dst = np.concatenate([(np.arange(12) + 1) % 12, [6]])
    return Adjacency.from_coo(np.concatenate([src, dst]), np.concatenate([dst, src]), (12, 12))


# name -> (graph, parts, epsilon)
CASES = {
    "sbm": (sbm, 4, 0.03),
    "directed": (directed, 3, 0.05),
    "isolated": (with_isolated, 4, 0.05),
    "one-each": (tiny, 12, 0.0),
}


def block(n: int, world: int, rank: int) -> tuple:
    return n * rank // world, n * (rank + 1) // world


def rank_labels(comm, arrays: dict, seed: int = 0) -> dict:
    """This rank's labels for every case (``arrays``: name -> (indptr, indices, parts, eps))."""
    out = {}
    for name, (indptr, indices, parts, eps) in arrays.items():
        n = indptr.shape[0] - 1
        lo, hi = block(n, comm.world_size, comm.rank)
        rows = indptr[lo:hi + 1]
        out[name] = propagate(comm, lo, hi, rows - rows[0], indices[rows[0]:rows[-1]], n, parts, eps, seed)
    return out


def on_gloo(rank, world, arrays):
    from gnnmesh import comm
    return rank_labels(comm.Comm(), arrays)


def case_arrays() -> dict:
    arrays = {}
    for name, (make, parts, eps) in CASES.items():
        indptr, indices = csr_arrays(make())
        arrays[name] = (indptr, indices, parts, eps)
    return arrays


@pytest.fixture(scope="module")
def arrays():
    return case_arrays()


@pytest.fixture(scope="module", params=[2, 3])
def ranks(request, arrays):
    """(world size, labels of every case from that many real gloo ranks)."""
    world = request.param
    results = run_ranks(on_gloo, world, arrays, timeout=100)
    return world, {name: np.concatenate([r[name] for r in results]) for name in arrays}


def joined(results: list, name: str) -> np.ndarray:
    return np.concatenate([r[name] for r in results])


def check_partition(adj, labels, parts, eps, name=""):
    """Valid labels, every part non-empty, vertices and nonzeros + 1 within epsilon."""
    assert labels.dtype == np.int64 and labels.shape == (adj.shape[0],), name
    assert labels.min() >= 0 and labels.max() < parts, name
    q = quality(adj, labels)
    sizes = np.bincount(labels, minlength=parts)
    assert (sizes > 0).all(), (name, sizes)
    loads = np.bincount(labels, weights=np.diff(csr_arrays(adj)[0]) + 1, minlength=parts)
    # at least the average rounded up is always allowed (a part holds whole vertices)
    assert sizes.max() <= max(np.floor((1 + eps) * sizes.mean()), np.ceil(sizes.mean())), (name, sizes)
    assert loads.max() <= max(np.floor((1 + eps) * loads.mean()), np.ceil(loads.mean())), (name, loads)
    return q


def test_ranks_give_valid_balanced_partitions(ranks, arrays):
    world, labels = ranks
    for name, (make, parts, eps) in CASES.items():
        check_partition(make(), labels[name], parts, eps, f"{name} on {world} ranks")
    assert sorted(labels["one-each"].tolist()) == list(range(12))


def test_ranks_cut_far_less_than_random(ranks):
    world, labels = ranks
    adj = sbm()
    lp = quality(adj, labels["sbm"])["volume_total"]
    rp = quality(adj, partition(adj, 4, "rp", cache=False))["volume_total"]
    print(f"{world} ranks: lp volume {lp}, rp {rp}")
    assert lp < 0.4 * rp  # the four blocks: about 0.2
    directed_adj = directed()
    lp = quality(directed_adj, labels["directed"])["volume_total"]
    rp = quality(directed_adj, partition(directed_adj, 3, "rp", cache=False))["volume_total"]
    print(f"directed: lp volume {lp}, rp {rp}")
    assert lp < 0.5 * rp


def test_simulated_ranks_give_the_labels_of_real_ranks(ranks, arrays):
    """benchmarks/lp_partition.py measures 16 and 64 ranks in one process: the same code
    on simulated ranks must give what gloo ranks give."""
    world, labels = ranks
    simulated, _ = simulate(rank_labels, world, arrays)
    for name in arrays:
        assert np.array_equal(joined(simulated, name), labels[name]), name


def test_deterministic_per_seed_and_world_size(arrays):
    sbm_only = {"sbm": arrays["sbm"]}
    first = joined(simulate(rank_labels, 3, sbm_only)[0], "sbm")
    assert np.array_equal(first, joined(simulate(rank_labels, 3, sbm_only)[0], "sbm"))
    assert not np.array_equal(first, joined(simulate(rank_labels, 3, sbm_only, 1)[0], "sbm"))


def test_one_process_through_partition(arrays):
    """World size 1: ``partition(..., method='lp')`` and ``propagate`` with a plain Comm()."""
    adj = sbm()
    part = partition(adj, 4, "lp", epsilon=0.03, seed=0, cache=False)
    q = check_partition(adj, part.assignment, 4, 0.03)
    assert q["volume_total"] < 0.5 * quality(adj, partition(adj, 4, "rp", cache=False))["volume_total"]
    indptr, indices = csr_arrays(adj)
    n = adj.shape[0]
    assert np.array_equal(propagate(Comm(), 0, n, indptr, indices, n, 4, 0.03, 0), part.assignment)
    for name, (make, parts, eps) in CASES.items():
        labels = rank_labels(Solo(), {name: arrays[name]})[name]
        check_partition(make(), labels, parts, eps, name)


@pytest.mark.slow  # a memory run: lp traced at several rank counts
def test_simulated_memory_per_rank_falls_with_ranks(arrays):
    """Each rank holds its block: its peak (traced) shrinks as the ranks grow."""
    peaks = {}
    for world in (2, 8):
        _, peak = simulate(rank_labels, world, {"sbm": arrays["sbm"]}, trace_memory=True)
        peaks[world] = max(peak)
    print(peaks)
    assert peaks[8] < 0.5 * peaks[2]


def test_a_coarsest_graph_too_large_to_gather_is_dealt_and_refined(arrays, monkeypatch):
    """Where coarsening stalls above the gathering limits, the ranks start from a dealt
    partition of the coarsest level instead: still valid, balanced and far below random."""
    from gnnmesh.partition import propagate as module
    monkeypatch.setattr(module, "GATHER_MAX_VERTICES", 0)
    dealt = []
    monkeypatch.setattr(module, "_dealt", lambda *a: dealt.append(1) or _dealt(*a))
    labels = joined(simulate(rank_labels, 2, {"sbm": arrays["sbm"]})[0], "sbm")
    assert len(dealt) == 2  # once per rank
    adj = sbm()
    check_partition(adj, labels, 4, 0.03, "dealt")
    assert quality(adj, labels)["volume_total"] < 0.6 * quality(adj, partition(adj, 4, "rp", cache=False))["volume_total"]


def _gathered_on(comm, indptr, indices, keep):
    """The first level of ``lp`` over the blocks of the ranks, gathered as the coarsest level
    is, keeping ``keep`` edges a vertex: (CSR of the whole, the first level's own CSR rows)."""
    from gnnmesh.partition import propagate as module
    n = indptr.shape[0] - 1
    lo, hi = block(n, comm.world_size, comm.rank)
    level = module._first_level(comm, lo, hi, indptr[lo:hi + 1] - indptr[lo], indices[indptr[lo]:indptr[hi]], n)
    own = (level.indptr, level.global_cols(), level.ew, lo)
    saved, module.COARSEST_DEGREE = module.COARSEST_DEGREE, keep
    try:
        whole = module._gathered(level)
    finally:
        module.COARSEST_DEGREE = saved
    return (whole.indptr, whole.adj, whole.ew, whole.vw), own


@pytest.mark.parametrize("keep", [3, 10**9])
def test_the_gathered_coarsest_graph_keeps_each_vertexs_heaviest_edges(keep):
    """Every rank gets the same symmetric graph: with a cap, each vertex keeps its ``keep``
    heaviest edges (ties: the lower column) and the edges its neighbours kept; without one,
    every edge, as the ranks hold them."""
    indptr, indices = csr_arrays(directed())
    results = simulate(_gathered_on, 3, indptr, indices, keep)[0]
    (wptr, wcols, wts, _), _ = results[0]
    for (ptr, cols, ew, _), _ in results[1:]:
        assert np.array_equal(ptr, wptr) and np.array_equal(cols, wcols) and np.array_equal(ew, wts)
    n = wptr.shape[0] - 1
    got = {(int(r), int(c)): int(w) for r, c, w in zip(np.repeat(np.arange(n), np.diff(wptr)), wcols, wts)}
    assert all(got[(c, r)] == w for (r, c), w in got.items())  # symmetric
    full = {}
    for _, (ptr, cols, ew, lo) in results:
        for i in range(ptr.shape[0] - 1):
            row = {int(c): int(w) for c, w in zip(cols[ptr[i]:ptr[i + 1]], ew[ptr[i]:ptr[i + 1]])}
            full[lo + i] = row
            mine = sorted(row, key=lambda c: (-row[c], c))[:keep]
            assert all(got.get((lo + i, c)) == row[c] for c in mine), lo + i
    assert all(full[r][c] == w for (r, c), w in got.items())  # only the graph's own edges
    if keep >= n:
        assert len(got) == sum(len(row) for row in full.values())
    else:
        assert len(got) < sum(len(row) for row in full.values())


def test_a_sparse_coarsest_graph_still_partitions_well(arrays, monkeypatch):
    """With the gathered coarsest graph cut down to 2 edges a vertex, the initial partition is
    rougher, and refinement on the whole levels still makes it valid, balanced, far below random."""
    from gnnmesh.partition import propagate as module
    monkeypatch.setattr(module, "COARSEST_DEGREE", 2)
    labels = joined(simulate(rank_labels, 2, {"sbm": arrays["sbm"]})[0], "sbm")
    adj = sbm()
    check_partition(adj, labels, 4, 0.03, "sparse coarsest")
    assert quality(adj, labels)["volume_total"] < 0.6 * quality(adj, partition(adj, 4, "rp", cache=False))["volume_total"]


def test_blocks_must_cover_the_vertices():
    indptr = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="consecutive"):
        propagate(Solo(), 0, 3, indptr, np.zeros(0, dtype=np.int64), 5, 2, 0.1, 0)
    with pytest.raises(ValueError, match="parts"):
        propagate(Solo(), 0, 3, indptr, np.zeros(0, dtype=np.int64), 3, 4, 0.1, 0)


def _gathered_root(comm, indptr, indices):
    from gnnmesh.partition import propagate as module
    n = indptr.shape[0] - 1
    lo, hi = block(n, comm.world_size, comm.rank)
    level = module._first_level(comm, lo, hi, indptr[lo:hi + 1] - indptr[lo], indices[indptr[lo]:indptr[hi]], n)
    everywhere, root = module._gathered(level), module._gathered(level, root=0)
    if root is None:
        return None
    return [np.array_equal(getattr(root, k), getattr(everywhere, k)) for k in ("indptr", "adj", "ew", "vw")]


def test_the_coarsest_graph_is_gathered_on_rank_0_alone():
    """Rank 0 gets the same graph every rank would; the others hold none of it."""
    indptr, indices = csr_arrays(directed())
    results = simulate(_gathered_root, 3, indptr, indices)[0]
    assert results[0] == [True] * 4
    assert results[1] is None and results[2] is None


def _rank_quota(comm, demands, room, turn):
    from gnnmesh.partition.propagate import _quota
    return _quota(comm, demands[comm.rank], room, turn)


@pytest.mark.parametrize("world,parts", [(5, 7), (4, 2), (3, 3)])
def test_a_parts_room_is_shared_in_turns_by_its_owner_rank(world, parts):
    """Each rank's share of a part's room, settled by the part's owner rank, is what serving
    the ranks in turn from rank (part + turn) % world gives: every rank's share at most its
    demand, the shares together at most the room, and a rank gets nothing while one served
    before it is short."""
    from gnnmesh.partition.propagate import _turns
    rng = np.random.default_rng(world * parts)
    demands = rng.integers(0, 5, (world, parts, 2))
    room = rng.integers(0, 9, (parts, 2)).astype(np.float64)
    for turn in (0, 3):
        shares = np.stack(simulate(_rank_quota, world, demands, room, turn)[0])
        assert np.array_equal(shares, _turns(demands, room, np.arange(parts), turn))
        assert (shares <= demands).all() and (shares.sum(0) <= room).all()
        for p in range(parts):
            first = (p + turn) % world
            assert np.array_equal(shares[first, p], np.minimum(demands[first, p], room[p]))


@pytest.mark.slow
def test_a_ranks_peak_but_rank_0s_does_not_grow_with_the_parts(arrays):
    """Only rank 0 holds arrays over all parts (the coarsest graph, the balancing plan):
    from 4 to 16 ranks and parts, every other rank's traced peak falls."""
    peaks = {}
    adj = sbm()
    indptr, indices = csr_arrays(adj)
    n = adj.shape[0]

    def labels_of(comm, parts):
        lo, hi = block(n, comm.world_size, comm.rank)
        return propagate(comm, lo, hi, indptr[lo:hi + 1] - indptr[lo], indices[indptr[lo]:indptr[hi]], n,
                         parts, 0.03, 0)

    for world in (4, 16):
        results, peak = simulate(labels_of, world, world, trace_memory=True)
        check_partition(adj, np.concatenate(results), world, 0.03, f"{world} parts")
        peaks[world] = max(peak[1:])
    print(peaks)
    assert peaks[16] < peaks[4]
