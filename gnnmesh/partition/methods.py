"""The partitioners. Each takes ``(adj, parts, epsilon, seed)`` and returns an int64 array
with the part of every vertex; ``partition()`` in ``api.py`` validates, times and caches.

Vertex weight everywhere is a row's nonzeros + 1: the compute load of that row in SpMM
(Demirci et al. §4.3.2), with the +1 so that isolated vertices still count.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import scipy.sparse as sp

from ..graph import Adjacency
from ..errors import ConfigError
from .base import EXTRA_HINT, MissingExtraError, csr_arrays, vertex_weights
from .refine import reduce_max_send

# Mt-KaHyPar preset for 'hp'. The deterministic one gives the same partition for any thread
# count; its quality matched 'default' on our graphs (benchmarks/partition_quality.py).
HP_PRESET = "DETERMINISTIC"


def random(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """A seeded random permutation dealt round-robin: part sizes differ by at most one."""
    n = adj.shape[0]
    order = np.random.default_rng(seed).permutation(n)
    assignment = np.empty(n, dtype=np.int64)
    assignment[order] = np.arange(n, dtype=np.int64) % parts
    return assignment


def contiguous(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """Consecutive id ranges with about equal weight (nonzeros + 1), each non-empty."""
    n = adj.shape[0]
    prefix = np.concatenate([[0], np.cumsum(vertex_weights(adj))])  # prefix[c] = weight of rows < c
    targets = prefix[-1] * np.arange(1, parts) / parts
    cuts = np.searchsorted(prefix, targets)  # first c with prefix[c] >= target
    closer_below = (cuts > 0) & (targets - prefix[np.maximum(cuts - 1, 0)] < prefix[cuts] - targets)
    cuts = cuts - closer_below
    # strictly increasing cuts in [k, n - parts + k]: no part empty
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    for k in range(1, parts):
        bounds[k] = max(bounds[k], bounds[k - 1] + 1)
    for k in range(parts - 1, 0, -1):
        bounds[k] = min(bounds[k], bounds[k + 1] - 1)
    return np.repeat(np.arange(parts, dtype=np.int64), np.diff(bounds))


def _import_extra(module: str, method: str):
    """The optional package a method needs, or an error naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(f"method '{method}' needs {module}: {EXTRA_HINT}") from err


def metis(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """METIS k-way on the symmetrized graph (pattern of A + A^T, no self-loops): minimizes
    edge cut, which only approximates communication volume."""
    pymetis = _import_extra("pymetis", "gp")
    n = adj.shape[0]
    if parts == 1:
        return np.zeros(n, dtype=np.int64)
    pattern = _pattern(adj)
    sym = (pattern + pattern.T).tocoo()
    off = sym.row != sym.col
    sym = sp.csr_matrix((sym.data[off], (sym.row[off], sym.col[off])), shape=sym.shape)
    options = pymetis.Options(ufactor=max(1, int(round(1000 * epsilon))))  # ufactor: permille
    try:
        options.seed = int(seed)
    except (AttributeError, TypeError, ValueError):  # an old pymetis without the option
        pass
    xadj, adjncy = sym.indptr.astype(np.int64), sym.indices.astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2; older ones take xadj/adjncy
        graph = {"adjacency": pymetis.CSRAdjacency(xadj, adjncy)}
    else:
        graph = {"xadj": xadj, "adjncy": adjncy}
    result = pymetis.part_graph(parts, **graph, vweights=vertex_weights(adj), options=options,
                                recursive=False)
    return np.asarray(result[1], dtype=np.int64)


def hypergraph(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """Mt-KaHyPar on the column-net hypergraph (one net per column j with pins {j} and the
    rows that reference j), minimizing connectivity - 1: exactly the halo volume. Then
    ``refine.reduce_max_send`` lowers the largest per-rank send volume (total volume may
    grow by at most 1%), which connectivity - 1 alone leaves unbalanced.

    Uses the deterministic preset: the result does not depend on the thread count (default
    min(2, cores), override with GNNMESH_PARTITION_THREADS). That preset fixes its own
    random seed (``set_seed`` does not reach it), so ``seed`` != 0 also relabels the vertices
    with a seeded permutation before partitioning; seed 0 keeps the graph's own order.
    """
    mtkahypar = _import_extra("mtkahypar", "hp")
    n = adj.shape[0]
    if parts == 1:
        return np.zeros(n, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(n) if seed else np.arange(n)
    nets = column_nets(adj, order)
    init = _mtkahypar_initializer(mtkahypar)
    context = init.context_from_preset(getattr(mtkahypar.PresetType, HP_PRESET))
    context.set_partitioning_parameters(parts, float(epsilon), mtkahypar.Objective.KM1)
    context.logging = False
    mtkahypar.set_seed(int(seed))
    weights = vertex_weights(adj)[order].tolist()
    hg = init.create_hypergraph(context, n, len(nets), nets, weights, [1] * len(nets))
    assignment = np.empty(n, dtype=np.int64)
    assignment[order] = hg.partition(context).get_partition()
    return reduce_max_send(adj, assignment, parts, vertex_weights(adj), epsilon)


def column_nets(adj: Adjacency, order=None) -> list:
    """Pins of every net of the column-net hypergraph, as lists of vertex ids. Nets with a
    single pin can never be cut and are left out (fewer nets, same objective). With
    ``order``, vertex ``order[k]`` is called k and the nets come in that order."""
    n = adj.shape[0]
    cols = (_pattern(adj) + sp.identity(n, dtype=np.int8, format="csr")).tocsc()
    cols.sort_indices()
    pins = cols.indices
    if order is not None:
        new_id = np.empty(n, dtype=np.int64)
        new_id[order] = np.arange(n)
        pins = new_id[pins]
    pins, starts = pins.tolist(), cols.indptr.tolist()  # Python ints convert fastest
    nets = range(n) if order is None else order.tolist()
    return [pins[starts[j]:starts[j + 1]] for j in nets if starts[j + 1] - starts[j] > 1]


_MTKAHYPAR = {}


def _mtkahypar_initializer(mtkahypar):
    """Mt-KaHyPar's thread pool is process-wide and may be initialized only once."""
    if "init" not in _MTKAHYPAR:
        text = os.environ.get("GNNMESH_PARTITION_THREADS") or str(min(2, os.cpu_count() or 1))
        if not text.isdigit() or int(text) < 1:
            raise ConfigError(f"GNNMESH_PARTITION_THREADS must be a positive integer, got {text!r}")
        _MTKAHYPAR["init"] = mtkahypar.initialize(int(text), False)
    return _MTKAHYPAR["init"]


def _pattern(adj: Adjacency) -> sp.csr_matrix:
    indptr, indices = csr_arrays(adj)
    return sp.csr_matrix((np.ones(indices.shape[0], dtype=np.int8), indices, indptr), shape=adj.shape)


PARTITIONERS = {"rp": random, "contiguous": contiguous, "gp": metis, "hp": hypergraph}
