"""Graph transforms: normalizations, symmetrization, reordering, row subgraphs.

Normalizations return a new ``Adjacency`` (the operator a model multiplies with);
structural transforms return a new ``Graph`` with vertex data carried along.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.csgraph as csgraph
import torch

from .graph import Adjacency, Graph, entry_of_edges


ENTRY_BLOCK = 1 << 20  # entries per block of rows: bounds the temporaries of whole-graph passes


def row_blocks(indptr: np.ndarray) -> list:
    """``[(lo, hi), ...]`` row ranges covering every row, each holding about ENTRY_BLOCK
    entries (a row with more stands alone), so whole-graph work can run block by block."""
    n = indptr.shape[0] - 1
    starts = np.searchsorted(indptr, np.arange(0, int(indptr[-1]), ENTRY_BLOCK), side="right") - 1
    bounds = np.unique(np.concatenate([[0], starts, [n]])).tolist()
    return list(zip(bounds[:-1], bounds[1:]))


def _block(indptr, lo, hi):
    """Entry range and row id of every entry of rows [lo, hi)."""
    counts = np.diff(indptr[lo:hi + 1])
    return slice(int(indptr[lo]), int(indptr[hi])), np.repeat(np.arange(lo, hi, dtype=np.int64), counts)


def add_self_loops(adj: Adjacency, fill: float = 1.0) -> Adjacency:
    """Add a loop ``A[i, i] = fill`` to every row that has none (existing loops keep their
    weight). Built block by block of rows, so its temporaries stay a block's size."""
    indptr, indices = adj.indptr.numpy(), adj.indices.numpy()
    values = None if adj.values is None else adj.values.detach().numpy()
    n = adj.shape[0]
    missing = np.zeros(n, dtype=bool)
    missing[:min(adj.shape)] = True
    blocks = row_blocks(indptr)
    for lo, hi in blocks:
        entries, rows = _block(indptr, lo, hi)
        missing[rows[rows == indices[entries]]] = False
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.diff(indptr) + missing, out=new_indptr[1:])
    new_indices = np.empty(int(new_indptr[-1]), dtype=np.int64)
    new_values = np.empty(int(new_indptr[-1]), dtype=np.float32)
    for lo, hi in blocks:
        entries, rows = _block(indptr, lo, hi)
        cols = indices[entries]
        # indices are sorted in each row: a row's loop goes after its columns below the row id
        within = np.arange(cols.shape[0]) - (indptr[rows] - indptr[lo])
        at = new_indptr[rows] + within + (missing[rows] & (cols > rows))
        new_indices[at] = cols
        new_values[at] = 1.0 if values is None else values[entries]
        loops = lo + np.flatnonzero(missing[lo:hi])
        below = np.bincount(rows[cols < rows] - lo, minlength=hi - lo)
        at = new_indptr[loops] + below[loops - lo]
        new_indices[at] = loops
        new_values[at] = fill
    return Adjacency(torch.from_numpy(new_indptr), torch.from_numpy(new_indices),
                     torch.from_numpy(new_values), adj.shape)


def gcn_norm(adj: Adjacency, self_loops: bool = True) -> Adjacency:
    """``D^-1/2 (A + I) D^-1/2`` with ``D`` the row sums (weighted in-degree), as Kipf & Welling."""
    a = add_self_loops(adj) if self_loops else _weighted(adj)
    deg = torch.from_numpy(_row_sums(a))
    inv_sqrt = torch.where(deg > 0, deg.pow(-0.5), torch.zeros_like(deg)).numpy()
    return _scaled(a, lambda rows, cols, v: inv_sqrt[rows] * v * inv_sqrt[cols])


def mean_norm(adj: Adjacency) -> Adjacency:
    """``D^-1 A``: every row averages its in-neighbours (rows with none stay zero)."""
    a = _weighted(adj)
    deg = torch.from_numpy(_row_sums(a))
    inv = torch.where(deg > 0, 1.0 / deg, torch.zeros_like(deg)).numpy()
    return _scaled(a, lambda rows, cols, v: inv[rows] * v)


def _weighted(adj: Adjacency) -> Adjacency:
    if adj.values is not None:
        return adj
    return adj.with_values(torch.ones(adj.nnz, dtype=torch.float32))


def _row_sums(adj: Adjacency) -> np.ndarray:
    """Row sums, accumulated in float64 and rounded to float32."""
    indptr, values = adj.indptr.numpy(), adj.values.detach().numpy()
    sums = np.zeros(adj.shape[0], dtype=np.float64)
    for lo, hi in row_blocks(indptr):
        entries, rows = _block(indptr, lo, hi)
        sums[lo:hi] = np.bincount(rows - lo, weights=values[entries], minlength=hi - lo)
    return sums.astype(np.float32)


def _scaled(adj: Adjacency, scale) -> Adjacency:
    """``adj`` with values ``scale(rows, cols, values)``, computed block by block of rows."""
    indptr, indices, values = adj.indptr.numpy(), adj.indices.numpy(), adj.values.detach().numpy()
    out = np.empty(values.shape[0], dtype=np.float32)
    for lo, hi in row_blocks(indptr):
        entries, rows = _block(indptr, lo, hi)
        out[entries] = scale(rows, indices[entries], values[entries])
    return adj.with_values(torch.from_numpy(out))


def to_undirected(graph: Graph) -> Graph:
    """Add every reverse edge. Weights of an edge present both ways are kept from ``A`` (not summed)."""
    a = graph.adj
    row, col = a.row().numpy(), a.indices.numpy()
    values = None if a.values is None else np.concatenate([a.values.numpy(), a.values.numpy()])
    adj = Adjacency.from_coo(np.concatenate([row, col]), np.concatenate([col, row]), a.shape,
                             values=values, reduce="first")
    return graph.replace(adj=adj, directed=False)


def remove_self_loops(graph: Graph) -> Graph:
    a = graph.adj
    keep = (a.row() != a.indices).numpy()
    values = None if a.values is None else a.values.numpy()[keep]
    adj = Adjacency.from_coo(a.row().numpy()[keep], a.indices.numpy()[keep], a.shape, values=values)
    return graph.replace(adj=adj)


def permute(graph: Graph, order) -> Graph:
    """Renumber nodes so that new node ``k`` is old node ``order[k]``; vertex data follows."""
    order = torch.from_numpy(np.ascontiguousarray(order, dtype=np.int64))
    n = graph.num_nodes
    if order.shape != (n,) or not torch.equal(torch.sort(order).values, torch.arange(n)):
        raise ValueError(f"order must be a permutation of the {n} nodes")
    new_id = torch.empty_like(order)
    new_id[order] = torch.arange(n)
    mat = graph.adj.to_scipy()[order.numpy()][:, order.numpy()]
    adj = Adjacency.from_scipy(mat, weighted=graph.adj.values is not None)
    if graph.adj.edge_features is not None:  # each entry keeps its features: look up its old place
        old = entry_of_edges(graph.adj, order[adj.row()].numpy(), order[adj.indices].numpy())
        adj = adj.with_edge_features(graph.adj.edge_features[torch.from_numpy(old)], graph.name)
    data = {k: getattr(graph, k)[order] for k in Graph.VERTEX_FIELDS if getattr(graph, k) is not None}
    return graph.replace(adj=adj, **data)


def rcm_order(graph: Graph) -> np.ndarray:
    """Reverse Cuthill-McKee order on the symmetrized pattern: neighbours get nearby ids,
    so the rows an SpMM gathers sit close together in memory."""
    mat = graph.adj.to_scipy()
    pattern = (mat + mat.T).tocsr() if graph.directed else mat
    return np.asarray(csgraph.reverse_cuthill_mckee(pattern.astype(np.float32), symmetric_mode=True))


def degree_order(graph: Graph) -> np.ndarray:
    """Nodes by descending in-degree (hubs first); a cheap locality ordering for power-law graphs."""
    return np.argsort(-graph.adj.degrees().numpy(), kind="stable")


def reorder(graph: Graph, method: str = "rcm") -> Graph:
    if method not in ORDERS:
        raise ValueError(f"unknown ordering {method!r}; choose from {sorted(ORDERS)}")
    return permute(graph, ORDERS[method](graph))


# The node orderings ``--reorder`` names: new node k is old node ``order(graph)[k]``.
ORDERS = {"rcm": rcm_order, "degree": degree_order}


def row_block(adj: Adjacency, rows) -> Adjacency:
    """Rows ``rows`` of ``A`` (the in-edges of those vertices), columns keeping global ids:
    the ``len(rows) x N`` block a row-partitioned strategy multiplies with."""
    rows = np.asarray(rows, dtype=np.int64)
    return Adjacency.from_scipy(adj.to_scipy()[rows], weighted=adj.values is not None)


def row_range(adj: Adjacency, start: int, stop: int) -> Adjacency:
    """Rows ``start:stop`` of ``A`` with global column ids, sharing ``A``'s index and value
    storage (only the row pointer is new): contiguous row blocks and chunks cost nothing."""
    lo, hi = int(adj.indptr[start]), int(adj.indptr[stop])
    values = None if adj.values is None else adj.values[lo:hi]
    return Adjacency(adj.indptr[start:stop + 1] - lo, adj.indices[lo:hi], values, (stop - start, adj.shape[1]))


def induced_subgraph(graph: Graph, nodes) -> Graph:
    """The subgraph on ``nodes`` (renumbered ``0..len(nodes)-1`` in the given order) with their data."""
    nodes = np.asarray(nodes, dtype=np.int64)
    mat = graph.adj.to_scipy()[nodes][:, nodes]
    adj = Adjacency.from_scipy(mat, weighted=graph.adj.values is not None)
    index = torch.from_numpy(nodes)
    data = {k: getattr(graph, k)[index] for k in Graph.VERTEX_FIELDS if getattr(graph, k) is not None}
    return graph.replace(adj=adj, **data)
