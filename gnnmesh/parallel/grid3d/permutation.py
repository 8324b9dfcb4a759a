"""Double permutation (Plexus §5.1): separate random permutations of rows and columns.

A 2D block decomposition of ``A`` is as balanced as its nonzeros are spread; graphs with
communities pile them up near the diagonal. Renumbering rows with ``P_r`` and columns with
``P_c`` (and alternating the two per layer, so one layer's output rows are the next
layer's input columns) scatters them.

Blocks are the ``R x C`` pieces cut by ``block_bounds``: rows in ``R`` contiguous ranges of
near-equal size, columns in ``C``. ``block_nnz`` counts the nonzeros each block would hold
under a renumbering without building the renumbered matrix, and ``balance`` compares the
original order, one permutation (``P A P^T``) and two (``P_r A P_c^T``).

Random permutations leave counting noise (few nonzeros per block) and whatever the
heaviest rows and columns pile up. ``balanced_permutations`` picks the pair instead, to
make the largest block small; any pair is a relabelling, so it can stand in for
``permutations`` anywhere. ``peak_bound`` is what no pair can beat.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse as sp

from ...errors import ConfigError
from ...graph import Adjacency
from ...layout.ranges import block_bounds
from ...transforms import add_self_loops

# Entries counted per step in block_nnz: bounds the temporaries (a few int64 arrays of
# this length) whatever the graph size.
_CHUNK = 1 << 22


def permutations(num_nodes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(row_perm, col_perm): ``perm[old_id] = new_id``, two independent random permutations."""
    rng = np.random.default_rng(seed)
    return rng.permutation(num_nodes), rng.permutation(num_nodes)


def check_grid(grid, shape, what: str = "grid") -> tuple[int, int]:
    """``(R, C)`` as ints, each at least 1 and at most the rows/columns it cuts, so that no
    block is empty by construction. ``what`` names the setting in the error message."""
    try:
        rows, cols = (int(v) for v in grid)
        ok = all(float(v) == int(v) for v in grid)
    except (TypeError, ValueError):
        ok = False
    if not ok or rows < 1 or cols < 1:
        raise ConfigError(f"{what} must be two positive integers R,C, got {grid!r}")
    if rows > shape[0] or cols > shape[1]:
        raise ConfigError(f"{what} {rows},{cols} cuts a {shape[0]} x {shape[1]} matrix into "
                          "more blocks than it has rows or columns")
    return rows, cols


def _check_perm(perm, size: int, what: str) -> Optional[np.ndarray]:
    if perm is None:
        return None
    perm = np.asarray(perm, dtype=np.int64)
    if perm.shape != (size,) or (size and (perm.min() < 0 or perm.max() >= size
                                           or np.bincount(perm, minlength=size).max() != 1)):
        raise ValueError(f"{what} must be a permutation of {size} ids")
    return perm


def inverse(perm) -> np.ndarray:
    """``order`` with ``order[new_id] = old_id`` for ``perm[old_id] = new_id``."""
    perm = np.asarray(perm, dtype=np.int64)
    order = np.empty_like(perm)
    order[perm] = np.arange(perm.shape[0], dtype=np.int64)
    return order


def _block_of(size: int, parts: int, perm: Optional[np.ndarray]) -> np.ndarray:
    """Block index (int32) of every old id once renumbered by ``perm``."""
    new_ids = np.arange(size, dtype=np.int64) if perm is None else perm
    return (np.searchsorted(block_bounds(size, parts), new_ids, side="right") - 1).astype(np.int32)


def block_nnz(adj: Adjacency, grid, row_perm=None, col_perm=None) -> np.ndarray:
    """``[R, C]`` int64 counts of the nonzeros in each block of ``P_r A P_c^T`` (a ``None``
    permutation keeps that side's order). Streams over the entries in chunks, so memory
    stays at the per-node arrays plus a fixed-size buffer."""
    rows, cols = check_grid(grid, adj.shape)
    row_block = _block_of(adj.shape[0], rows, _check_perm(row_perm, adj.shape[0], "row_perm"))
    col_block = _block_of(adj.shape[1], cols, _check_perm(col_perm, adj.shape[1], "col_perm"))
    indptr, indices = adj.indptr.numpy(), adj.indices.numpy()
    counts = np.zeros(rows * cols, dtype=np.int64)
    # Row ranges of about _CHUNK entries each (a row longer than that is a chunk of its own).
    starts = np.unique(np.searchsorted(indptr, np.arange(0, adj.nnz, _CHUNK), side="right") - 1)
    for lo, hi in zip(starts, np.append(starts[1:], adj.shape[0])):
        first, last = indptr[lo], indptr[hi]
        key = np.repeat(row_block[lo:hi].astype(np.int64) * cols, np.diff(indptr[lo:hi + 1]))
        key += col_block[indices[first:last]]
        counts += np.bincount(key, minlength=rows * cols)
    return counts.reshape(rows, cols)


def max_over_mean(counts) -> float:
    """Load imbalance of a block decomposition: largest block over the average (1 is perfect)."""
    counts = np.asarray(counts)
    mean = counts.mean()
    return float(counts.max() / mean) if mean > 0 else 1.0


def peak_bound(adj: Adjacency, grid) -> int:
    """A lower bound on the largest block count of ``P_r A P_c^T`` over all pairs of
    permutations (blocks of ``block_bounds``): the mean, rounded up; and for the longest
    row, its row stripe holds at least it plus the lightest rows that fill the smallest
    row block, spread over ``C`` blocks at best (likewise for the longest column)."""
    rows, cols = check_grid(grid, adj.shape)
    indptr, indices = adj.indptr.numpy(), adj.indices.numpy()
    bound = -(-adj.nnz // (rows * cols))
    for lengths, parts, across in ((np.diff(indptr), rows, cols),
                                   (np.bincount(indices, minlength=adj.shape[1]), cols, rows)):
        lengths = np.sort(lengths)
        stripe = lengths[-1] + lengths[:lengths.shape[0] // parts - 1].sum()
        bound = max(bound, -(-int(stripe) // across))
    return int(bound)


def balance(adj: Adjacency, grid, seed: int = 0, self_loops: bool = False,
            balanced: bool = False) -> dict:
    """Block counts for the original order (``"original"``), one permutation applied to rows
    and columns (``"one"``: ``P_r A P_r^T``) and the double permutation (``"two"``:
    ``P_r A P_c^T``), with ``P_r, P_c = permutations(n, seed)``; with ``balanced``, also
    for the pair of ``balanced_permutations`` (``"balanced"``).

    ``self_loops`` counts ``A + I``, the pattern GCN multiplies with. One permutation keeps
    the diagonal inside the diagonal blocks, so on sparse graphs (a few nonzeros per row)
    those blocks stay heavy; only separate row and column permutations scatter it.
    """
    if adj.shape[0] != adj.shape[1]:
        raise ValueError(f"balance needs a square adjacency, got {adj.shape}")
    if self_loops:
        adj = add_self_loops(adj)
    row_perm, col_perm = permutations(adj.shape[0], seed)
    counts = {"original": block_nnz(adj, grid),
              "one": block_nnz(adj, grid, row_perm, row_perm),
              "two": block_nnz(adj, grid, row_perm, col_perm)}
    if balanced:
        pair = balanced_permutations(adj, grid, seed, self_loops=False)  # loops already in
        counts["balanced"] = block_nnz(adj, grid, *pair)
    return counts


def permute_adjacency(adj: Adjacency, row_perm=None, col_perm=None) -> Adjacency:
    """``P_r A P_c^T`` as a new Adjacency: entry ``(i, j)`` moves to
    ``(row_perm[i], col_perm[j])``; values (if any) follow their entries."""
    row_perm = _check_perm(row_perm, adj.shape[0], "row_perm")
    col_perm = _check_perm(col_perm, adj.shape[1], "col_perm")
    mat = adj.to_scipy()
    if row_perm is not None:
        mat = mat[inverse(row_perm)]
    if col_perm is not None:
        mat = sp.csr_matrix((mat.data, col_perm[mat.indices], mat.indptr), shape=mat.shape)
        mat.sort_indices()
    return Adjacency.from_scipy(mat, weighted=adj.values is not None)


# ---------------------------------------------------------------------------------------
# Balanced double permutation.
#
# A pair (P_r, P_c) only decides which row block each row and which column block each
# column lands in; the order inside a block changes no count. So the pair is chosen as two
# part maps, rows -> row parts and columns -> column parts, every part receiving exactly
# its size, and turned into permutations at the end.
#
# Given the column map, row i brings a vector v_i (its nonzeros per column part) to the row
# of block counts of the part it joins: placing rows is packing vectors into bins of fixed
# item counts so that no coordinate overflows. Columns given the row map likewise. Steps:
# (1) columns as whole stripes, (2) rows against those columns, (3) columns against those
# rows, each a greedy heaviest-first placement; then (4) swaps of items between parts,
# alternating sides while the largest block shrinks.

# Items placed one at a time by the greedy, heaviest first; the rest are dealt in bulk.
_EXACT = 16384
# The swaps draw on at most _SAMPLE items (at random), grouped into kinds (items with the
# same vector); the _KINDS most common kinds (then the lightest) are the candidates.
_SAMPLE = 1 << 16
_KINDS = 256
# Kinds considered for leaving the heaviest part per step (the rest wait for later steps).
_OUT = 32
# Swaps per side and round at most, and in a row without lowering the peak.
_SWAPS = 1000
_PATIENCE = 100
_ROUNDS = 4


def balanced_permutations(adj: Adjacency, grid, seed: int = 0,
                          self_loops: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(row_perm, col_perm), ``perm[old_id] = new_id``, chosen so that the largest block of
    ``P_r A P_c^T`` (``A + I`` with ``self_loops``) is small, with the blocks of
    ``block_bounds`` (the sizes ``permutations`` gives). Deterministic for a seed, which
    also orders the ids inside each block (at random).

    ``grid`` is ``(R, C)``, or a list of shapes for a caller that cuts the same pair in
    several ways. Then the parts balanced are those of the finest common refinement (all
    the shapes' row cut points together, likewise for columns), and each block of the
    refinement aims at the nonzeros in proportion to its area: a block of any listed shape
    is a union of refined blocks, so its excess over its share is at most the sum of
    theirs. Balancing only the largest shape would leave the other shapes at the random
    pair's level (their cut points fall inside its blocks). The price: refined blocks hold
    fewer nonzeros each, so the finest adjustments are relatively coarser.

    grid3d on an X x Y x Z grid multiplies ``P_r A P_c^T`` at even layers and ``P_c A P_r^T``
    at odd ones, rows and columns cut by the axes of the layer's plane; for a symmetric
    pattern that puts P_r's ids in Z, X or Y parts and P_c's in X, Y or Z parts over the
    six-layer cycle, so the call is ``balanced_permutations(adj, [(Z, X), (X, Y), (Y, Z)])``.
    A non-symmetric pattern's odd layers count ``A^T`` and are not covered.
    """
    grids = _grid_list(grid, adj.shape)
    if self_loops:
        adj = add_self_loops(adj)
    rng = np.random.default_rng(seed)
    row_perm, col_perm = rng.permutation(adj.shape[0]), rng.permutation(adj.shape[1])
    mat = adj.to_scipy()
    rows, cols = _Side(mat, [g[0] for g in grids]), _Side(mat.tocsc(), [g[1] for g in grids])
    share = _shares(rows.sizes, cols.sizes, adj.nnz, len(grids) > 1)
    stripes = _shares(cols.sizes, np.array([adj.shape[0]]), adj.nnz, len(grids) > 1)
    col_part = _greedy(cols.vectors(np.zeros(adj.shape[0], np.int32), 1), cols.sizes, stripes, rng)
    row_part = _greedy(rows.vectors(col_part, cols.parts), rows.sizes, share, rng)
    col_part = _greedy(cols.vectors(row_part, rows.parts), cols.sizes, share.T, rng)
    row_vecs = rows.vectors(col_part, cols.parts)
    peak = _peak(row_vecs, row_part, share)
    for _ in range(_ROUNDS):
        row_part = _refine(row_vecs, row_part, share, rng)
        col_part = _refine(cols.vectors(row_part, rows.parts), col_part, share.T, rng)
        row_vecs = rows.vectors(col_part, cols.parts)
        last, peak = peak, _peak(row_vecs, row_part, share)
        if peak >= last:
            break
    return _to_perm(row_part, row_perm), _to_perm(col_part, col_perm)


def _grid_list(grid, shape) -> list:
    """One ``(R, C)`` or several, each checked against the matrix."""
    several = (isinstance(grid, (list, tuple)) and len(grid) > 0
               and all(isinstance(g, (list, tuple, np.ndarray)) for g in grid))
    return [check_grid(g, shape) for g in (grid if several else [grid])]


class _Side:
    """Rows (a CSR matrix) or columns (a CSC one) as items to place: each item's ids on the
    other side, and the sizes of its own side's parts."""

    def __init__(self, mat, shapes: list):
        self.indptr, self.indices = mat.indptr, mat.indices
        self._ones = np.ones(self.indices.shape[0], dtype=np.int32)
        size = mat.indptr.shape[0] - 1
        self.sizes = np.diff(np.unique(np.concatenate([block_bounds(size, p) for p in shapes])))
        self.parts = self.sizes.shape[0]

    def vectors(self, other_part: np.ndarray, other_parts: int) -> np.ndarray:
        """``[items, other_parts]`` counts of each item's nonzeros per part of the other side."""
        mat = sp.csr_matrix((self._ones, other_part[self.indices], self.indptr),
                            shape=(self.indptr.shape[0] - 1, other_parts))
        return mat.toarray()  # sums the repeated parts


def _shares(own: np.ndarray, other: np.ndarray, total: int, refined: bool) -> np.ndarray:
    """What each block is measured against: the quantity kept low is count - share. Zero
    for one grid (the plain count: its blocks are the same size up to one row or column);
    for a refinement, whose blocks differ in size, the nonzeros in proportion to area."""
    if not refined:
        return np.zeros((own.shape[0], other.shape[0]))
    return total * np.outer(own / own.sum(), other / other.sum())


def _loads(vecs: np.ndarray, part: np.ndarray, parts: int) -> np.ndarray:
    """``[parts, other]`` sums of the items' vectors per part."""
    items = part.shape[0]
    member = sp.csr_matrix((np.ones(items), (part, np.arange(items))), shape=(parts, items))
    return member @ vecs


def _peak(vecs, part, share) -> float:
    return float((_loads(vecs, part, share.shape[0]) - share).max())


def _fingerprint(vecs: np.ndarray) -> np.ndarray:
    """A 64-bit hash per row of ``vecs``: equal rows, equal values (unequal rows rarely
    collide, and callers only rely on the former)."""
    mult = np.random.default_rng(12345).integers(1, 2**63, size=vecs.shape[1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (vecs.astype(np.uint64) * (mult | 1)).sum(axis=1, dtype=np.uint64)


def _to_perm(part: np.ndarray, base: np.ndarray) -> np.ndarray:
    """The permutation putting every id in its part's range, ordered inside by ``base``."""
    return inverse(np.argsort(part.astype(np.int64) * base.shape[0] + base))


# -- greedy placement -------------------------------------------------------------------

def _greedy(vecs: np.ndarray, sizes: np.ndarray, share: np.ndarray, rng) -> np.ndarray:
    """Part of every item: the ``_EXACT`` heaviest one by one, the rest dealt out."""
    weight = vecs.sum(axis=1)
    order = rng.permutation(weight.shape[0])  # random order among equal weights
    order = order[np.argsort(-weight[order], kind="stable")]
    part = np.empty(weight.shape[0], dtype=np.int32)
    left = _place_heavy(vecs, order[:_EXACT], sizes, share, part)
    _deal(vecs, order[_EXACT:], left, part, rng)
    return part


def _place_heavy(vecs, items, sizes, share, part) -> np.ndarray:
    """Put each item where the projected block row peaks lowest; returns the room left per
    part. The projection fills each part's remaining room with the mean vector of the
    items not placed yet, so a part holding a few heavy items is kept for light ones
    rather than looking emptier than it will end up."""
    left = sizes.astype(np.float64)
    load = -share
    rest = vecs.sum(axis=0, dtype=np.float64)
    unplaced = vecs.shape[0]
    step = 256  # items per update of the mean, which drifts slowly
    for lo in range(0, items.shape[0], step):
        chunk = vecs[items[lo:lo + step]].astype(np.float64)
        rest -= chunk.sum(axis=0)
        unplaced -= chunk.shape[0]
        mean = rest / max(unplaced, 1)
        proj = load + left[:, None] * mean
        full = np.where(left == 0, np.inf, 0.0)
        for i, item in enumerate(items[lo:lo + step]):
            shift = chunk[i] - mean
            # The lowest peak; among ties the least loaded part.
            p = int(((proj + shift).max(axis=1) + 1e-9 * proj.sum(axis=1) + full).argmin())
            proj[p] += shift
            load[p] += chunk[i]
            left[p] -= 1
            if left[p] == 0:
                full[p] = np.inf
            part[item] = p
    return left.astype(np.int64)


def _deal(vecs, items, left, part, rng) -> None:
    """Spread the light items so that every part gets its share (by room left) of every
    run of similar items: sorted by weight then vector, equal vectors are adjacent, and
    each part takes its turns evenly along the list (in random order within a turn)."""
    if items.shape[0] == 0:
        return
    items = items[np.lexsort((_fingerprint(vecs[items]), -vecs[items].sum(axis=1)))]
    slot = np.repeat(np.arange(left.shape[0]), left)
    turn = np.arange(items.shape[0]) - np.repeat(np.cumsum(left) - left, left)
    part[items] = slot[np.argsort((turn + rng.random(items.shape[0])) / left[slot], kind="stable")]


# -- refinement by swaps ----------------------------------------------------------------

def _refine(vecs: np.ndarray, part: np.ndarray, share: np.ndarray, rng) -> np.ndarray:
    """Swap items between parts while it helps; returns the new part map, the best one
    met. Swaps keep every part's item count."""
    kinds = _Kinds(vecs, part, share.shape[0], rng)
    load = _loads(vecs, part, share.shape[0])
    search = _SwapSearch(load - share, kinds, soft=max(1.0, float(load.mean()) / 1000))
    best, best_count, since = search.x.max(), kinds.count.copy(), 0
    for _ in range(_SWAPS):
        if since == _PATIENCE or not search.step():
            break
        since += 1
        if search.x.max() < best:
            best, best_count, since = search.x.max(), kinds.count.copy(), 0
    kinds.count = best_count
    return kinds.realize(part)


class _Kinds:
    """Candidate kinds: distinct vectors among up to ``_SAMPLE`` items, the ``_KINDS`` most
    common (then lightest), with ``count[kind, part]``, which the swaps change."""

    def __init__(self, vecs, part, parts: int, rng):
        items = np.arange(vecs.shape[0])
        if items.shape[0] > _SAMPLE:
            items = rng.choice(items, _SAMPLE, replace=False)
        # By fingerprint, then part. A fingerprint shared by unequal vectors only splits its
        # run into several kinds, each still one vector with its items sorted by part.
        items = items[np.lexsort((part[items], _fingerprint(vecs[items])))]
        sub = vecs[items]
        first = np.ones(items.shape[0], dtype=bool)
        first[1:] = (sub[1:] != sub[:-1]).any(axis=1)
        count = np.bincount((np.cumsum(first) - 1) * parts + part[items],
                            minlength=int(first.sum()) * parts).reshape(-1, parts)
        starts = np.flatnonzero(first)
        keep = np.sort(np.lexsort((sub[starts].sum(axis=1), -count.sum(axis=1)))[:_KINDS])
        self._items, self._starts = items, starts[keep]
        self.vectors = sub[self._starts].astype(np.float64)
        self.count = count[keep]
        self._initial = self.count.copy()

    def realize(self, part: np.ndarray) -> np.ndarray:
        """``part`` with items moved so that every kind has its new counts per part."""
        part = part.copy()
        for t in np.flatnonzero((self.count != self._initial).any(axis=1)):
            had, want = self._initial[t], self.count[t]
            items = self._items[self._starts[t]:self._starts[t] + had.sum()]
            rank = np.arange(items.shape[0]) - np.repeat(np.cumsum(had) - had, had)
            movers = items[rank >= np.repeat(want, had)]
            part[movers] = np.repeat(np.arange(had.shape[0]), np.maximum(want - had, 0))
        return part


class _SwapSearch:
    """Local search over ``kinds.count``: part p trades items of one kind for as many of
    another kind from part q. ``x`` is count - share per block. Objective: sum over blocks
    of exp(x / soft), a smooth maximum, so lowering one of several equal peaks is
    progress too. Its change for every trade at once is a few matrix products, as exp of
    a sum is a product of per-kind factors."""

    def __init__(self, x: np.ndarray, kinds: _Kinds, soft: float):
        self.x, self.kinds, self.soft = x, kinds, soft
        self.gain = np.exp(kinds.vectors / soft)  # [kind, other]: factor of joining a part
        self.lose = 1 / self.gain
        self.gain_t = np.ascontiguousarray(self.gain.T)  # fast right-hand matmul operands
        self.lose_t = np.ascontiguousarray(self.lose.T)

    def step(self) -> bool:
        """One trade out of the part of one of the heaviest blocks; False if none helps."""
        top = self.x.max()
        weights = np.exp((self.x - top) / self.soft)
        for cell in np.argsort(-self.x, axis=None)[:4]:
            p, j = divmod(int(cell), self.x.shape[1])
            if self._trade_from(p, j, top, weights):
                return True
        return False

    def _trade_from(self, p: int, j: int, top: float, weights: np.ndarray) -> bool:
        count = self.kinds.count
        out = np.flatnonzero((count[:, p] > 0) & (self.kinds.vectors[:, j] > 0))
        if out.shape[0] == 0:
            return False
        if out.shape[0] > _OUT:  # those whose leaving lightens part p most
            relief = (weights[p] * self.lose[out]).sum(axis=1)
            out = out[np.argpartition(relief, _OUT - 1)[:_OUT]]
        row = weights.sum(axis=1)
        # change[q, a, b]: objective change when p gives one out[a] for one kind b of q.
        change = np.matmul(weights[:, None, :] * self.gain[out], self.lose_t)
        change += (np.where(count.T > 0, 0.0, np.inf) - row[:, None])[:, None, :]
        change += (weights[p] * self.lose[out]) @ self.gain_t - row[p]
        change[p] = np.inf
        tries = min(8, change.size)
        best = np.argpartition(change, tries - 1, axis=None)[:tries]
        for flat in best[np.argsort(change.flat[best])]:
            if not change.flat[flat] < -1e-12:
                break
            q, a, b = np.unravel_index(flat, change.shape)
            if self._trade(p, int(q), int(out[a]), int(b), top):
                return True
        return False

    def _trade(self, p: int, q: int, a: int, b: int, top: float) -> bool:
        """Part p gives k items of kind a to part q for k of kind b, the best k among powers
        of two up to what both hold; False if no k helps."""
        count = self.kinds.count
        most = int(min(count[a, p], count[b, q]))
        ks = np.unique(np.minimum(most, 2 ** np.arange(most.bit_length() + 1)))[:, None]
        delta = self.kinds.vectors[b] - self.kinds.vectors[a]
        new_p, new_q = self.x[p] + ks * delta, self.x[q] - ks * delta
        with np.errstate(over="ignore"):
            after = (np.exp((new_p - top) / self.soft).sum(axis=1)
                     + np.exp((new_q - top) / self.soft).sum(axis=1))
        now = np.exp((self.x[[p, q]] - top) / self.soft).sum()
        pick = int(np.argmin(after))
        if not after[pick] < now * (1 - 1e-12):
            return False
        k = int(ks[pick, 0])
        self.x[p], self.x[q] = new_p[pick], new_q[pick]
        count[a, p] -= k
        count[b, p] += k
        count[a, q] += k
        count[b, q] -= k
        return True
