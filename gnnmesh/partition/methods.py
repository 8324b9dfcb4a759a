"""The partitioners. Each takes ``(adj, parts, epsilon, seed)`` and returns an int64 array
with the part of every vertex; ``partition()`` in ``api.py`` validates, times and caches.

Vertex weight everywhere is a row's nonzeros + 1: the compute load of that row in SpMM
(Demirci et al. §4.3.2), with the +1 so that isolated vertices still count. ``gp`` balances
vertex counts as a second constraint (a rank's memory); mt-KaHyPar takes one weight, so
``hp`` balances the load only.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .. import progress
from ..graph import Adjacency
from ..errors import ConfigError
from . import metis_kway
from .base import MissingExtraError, csr_arrays, vertex_weights
from .registry import EXTRA_HINT
from .refine import reduce_max_send

# Mt-KaHyPar preset for 'hp' unless GNNMESH_HP_PRESET names another; measurements behind
# the choice: benchmarks/hp_speed.py and docs/performance.md.
HP_PRESET = "default"
HP_PRESETS = ("default", "quality", "highest_quality", "deterministic", "deterministic_quality",
              "large_k")
# Nets (columns) with more pins are left out of what mt-KaHyPar sees: a hub's net is nearly
# always cut anyway, and big nets dominate its run time (coarsening cannot shrink them, so
# initial partitioning works on most of the pins). Volume still counts them (docs/performance.md).
MAX_NET_PINS = 50
WORKER = Path(__file__).with_name("mtkahypar_worker.py")


def random(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    return random_parts(adj.shape[0], parts, seed)


def random_parts(n: int, parts: int, seed: int) -> np.ndarray:
    """A seeded random permutation of the ids dealt round-robin: part sizes differ by at most
    one. ``random_block_parts`` over ``0..n-1``."""
    return random_block_parts(np.arange(n, dtype=np.int64), n, parts, seed)


def random_block_parts(ids: np.ndarray, n: int, parts: int, seed: int) -> np.ndarray:
    """The random part of each of ``ids`` (in ``0..n-1``) among ``n`` nodes, computed from the
    ids alone, so that a process holding a block of ids gives them the parts the whole graph's
    ``random_parts`` does: node v's part is pi(v) mod ``parts``, pi a seeded permutation of
    ``0..n-1`` (``_permuted``), so the sizes still differ by at most one."""
    return (_permuted(np.asarray(ids, dtype=np.int64), n, seed) % parts).astype(np.int64)


_ROUNDS = 4  # Feistel rounds: four make a keyed permutation indistinguishable from random


def _permuted(ids: np.ndarray, n: int, seed: int) -> np.ndarray:
    """pi(ids) for a seeded permutation pi of ``0..n-1``: a Feistel network on the smallest
    even number of bits that holds n (its rounds keyed by ``seed``), walked along each id's
    cycle until it lands below n (fewer than four steps on average: the domain is < 4n)."""
    half = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    keys = _mix(np.uint64(seed % (1 << 64)) + np.arange(1, _ROUNDS + 1, dtype=np.uint64) *
                np.uint64(0x9E3779B97F4A7C15))
    out = ids.astype(np.uint64)
    walking = np.arange(len(out))
    while len(walking):
        x = out[walking]
        left, right = x >> np.uint64(half), x & mask
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        out[walking] = (left << np.uint64(half)) | right
        walking = walking[out[walking] >= np.uint64(n)]
    return out.astype(np.int64)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that scatters every input bit."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def contiguous(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    return contiguous_parts(vertex_weights(adj), parts)


def contiguous_parts(weights: np.ndarray, parts: int) -> np.ndarray:
    """Consecutive id ranges with about equal weight (``weights``: nonzeros + 1 per vertex),
    each non-empty."""
    n = weights.shape[0]
    total = int(np.sum(weights))
    bounds = contiguous_bounds(contiguous_cuts(weights, 0, 0, total, parts), n, parts)
    return np.repeat(np.arange(parts, dtype=np.int64), np.diff(bounds))


def contiguous_cuts(weights: np.ndarray, first: int, before: int, total: int, parts: int) -> dict:
    """The cuts of ``contiguous_parts`` that fall in a block of ids: ``weights`` those of ids
    ``first, first + 1, ...``, ``before`` the weight of the ids below ``first``, ``total``
    the whole graph's. Cut k (1 <= k < parts) is the id nearest the weight ``total k / parts``
    (the lower one on a tie) as ``{k: id}``; each cut falls in exactly one block."""
    prefix = before + np.cumsum(weights, dtype=np.int64)  # weight of the ids <= first + j
    targets = total * np.arange(1, parts, dtype=np.int64) / parts
    here = np.flatnonzero((before < targets) & (targets <= (prefix[-1] if len(prefix) else before)))
    at = np.searchsorted(prefix, targets[here])  # first j with prefix[j] >= target: cut first + j + 1
    below = np.where(at > 0, prefix[np.maximum(at - 1, 0)], before)  # weight of the ids < the cut
    closer_below = targets[here] - below < prefix[at] - targets[here]
    return {int(k) + 1: first + int(j) + 1 - int(c) for k, j, c in zip(here, at, closer_below)}


def contiguous_bounds(cuts: dict, n: int, parts: int) -> np.ndarray:
    """Part k's ids are ``bounds[k]:bounds[k + 1]``: the ``cuts`` (``contiguous_cuts`` of every
    block), made strictly increasing in [k, n - parts + k] so that no part is empty."""
    bounds = np.array([0] + [cuts[k] for k in range(1, parts)] + [n], dtype=np.int64)
    for k in range(1, parts):
        bounds[k] = max(bounds[k], bounds[k - 1] + 1)
    for k in range(parts - 1, 0, -1):
        bounds[k] = min(bounds[k], bounds[k + 1] - 1)
    return bounds


def _import_extra(module: str, method: str):
    """The optional package a method needs, or an error naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(f"method '{method}' needs {module}: {EXTRA_HINT}, "
                                "or --partitioner lp, which needs no extra") from err


def metis(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """METIS k-way on the symmetrized graph (pattern of A + A^T, no self-loops): minimizes
    edge cut, which only approximates communication volume. Two constraints are balanced
    within ``epsilon``: compute load (nonzeros + 1) and vertex count, which sets a rank's
    memory (see ``metis_kway``). Where the installed pymetis does not export METIS itself,
    only the load is balanced, with a warning."""
    pymetis = _import_extra("pymetis", "gp")
    n = adj.shape[0]
    if parts == 1:
        return np.zeros(n, dtype=np.int64)
    pattern = _pattern(adj)
    sym = (pattern + pattern.T).tocoo()
    off = sym.row != sym.col
    sym = sp.csr_matrix((sym.data[off], (sym.row[off], sym.col[off])), shape=sym.shape)
    xadj, adjncy = sym.indptr.astype(np.int64), sym.indices.astype(np.int64)
    if metis_kway.available():
        return metis_kway.part_graph_kway(xadj, adjncy, [vertex_weights(adj), np.ones(n, np.int64)],
                                          parts, epsilon, seed)
    warnings.warn("gnnmesh: this pymetis does not export METIS_PartGraphKway; 'gp' balances "
                  "nonzeros only, and vertex counts per part may differ widely", stacklevel=2)
    options = pymetis.Options(ufactor=max(1, int(round(1000 * epsilon))))  # ufactor: permille
    try:
        options.seed = int(seed)
    except (AttributeError, TypeError, ValueError):  # an old pymetis without the option
        pass
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2; older ones take xadj/adjncy
        graph = {"adjacency": pymetis.CSRAdjacency(xadj, adjncy)}
    else:
        graph = {"xadj": xadj, "adjncy": adjncy}
    result = pymetis.part_graph(parts, **graph, vweights=vertex_weights(adj), options=options,
                                recursive=False)
    return np.asarray(result[1], dtype=np.int64)


def label_propagation(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """``propagate`` (multilevel label propagation, ``propagate.py``) on one process: the
    same code that P ranks run on their blocks, here with one block holding every row.
    Balances vertex counts and nonzeros + 1 within ``epsilon``, as ``gp`` does."""
    from .propagate import Solo, propagate
    indptr, indices = csr_arrays(adj)
    n = adj.shape[0]
    return propagate(Solo(), 0, n, indptr, indices, n, parts, epsilon, seed)


def hypergraph(adj: Adjacency, parts: int, epsilon: float, seed: int) -> np.ndarray:
    """Mt-KaHyPar on the column-net hypergraph (one net per column j with pins {j} and the
    rows that reference j), minimizing connectivity - 1: exactly the halo volume. Then
    ``refine.reduce_max_send`` lowers the largest per-rank send volume (total volume may
    grow by at most 1%), which connectivity - 1 alone leaves unbalanced.

    Nets with more than MAX_NET_PINS pins are left out of the hypergraph mt-KaHyPar sees
    (they still count in the volume ``quality`` reports, and ``reduce_max_send`` works on
    the full graph). The preset is ``hp_preset()``, the threads ``partition_threads()``.
    Each call runs in a fresh child process (see ``mtkahypar_worker.py``): a given seed then
    gives the same partition on one thread under every preset, and on any number of threads
    under 'deterministic' and 'deterministic_quality'; the other presets on several threads
    vary from run to run.
    'deterministic' ignores the seed, so ``seed`` != 0 also relabels the vertices with a
    seeded permutation before partitioning (for every preset, alike); seed 0 keeps the
    graph's own order.
    """
    _import_extra("mtkahypar", "hp")  # fail here, naming the extra, not in the child process
    n = adj.shape[0]
    if parts == 1:
        return np.zeros(n, dtype=np.int64)
    preset, threads = hp_preset(), partition_threads()
    with progress.phase("hp: building the column-net hypergraph"):
        order = np.random.default_rng(seed).permutation(n) if seed else np.arange(n)
        starts, pins, dropped = column_nets(adj, order, max_pins=MAX_NET_PINS)
    weights = vertex_weights(adj)
    assignment = np.empty(n, dtype=np.int64)
    with progress.phase(f"hp: mt-KaHyPar, {preset} preset, {threads} thread{'s' * (threads > 1)}: "
                        f"{starts.shape[0] - 1:,} nets, {pins.shape[0]:,} pins "
                        f"({dropped:,} nets over {MAX_NET_PINS} pins left out)"):
        assignment[order] = run_mtkahypar(n, starts, pins, weights[order], parts, epsilon, preset,
                                          threads, seed)
    with progress.phase("hp: refining the largest send volume"):
        return reduce_max_send(adj, assignment, parts, weights, epsilon)


def hp_preset() -> str:
    """The Mt-KaHyPar preset 'hp' uses: $GNNMESH_HP_PRESET, else HP_PRESET."""
    text = os.environ.get("GNNMESH_HP_PRESET") or HP_PRESET
    if text.strip().lower() not in HP_PRESETS:
        raise ConfigError(f"GNNMESH_HP_PRESET must be one of {', '.join(HP_PRESETS)}, got {text!r}")
    return text.strip().lower()


def partition_threads() -> int:
    """Mt-KaHyPar's threads: $GNNMESH_PARTITION_THREADS, else 1 (deterministic under every
    preset; on a busy 2-core machine more threads were slower, see docs/performance.md)."""
    text = os.environ.get("GNNMESH_PARTITION_THREADS") or "1"
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"GNNMESH_PARTITION_THREADS must be a positive integer, got {text!r}")
    return int(text)


def column_nets(adj: Adjacency, order=None, max_pins=None) -> tuple:
    """The column-net hypergraph as ``(starts, pins, dropped)``: the pins of net k are
    ``pins[starts[k]:starts[k + 1]]``. Nets with a single pin can never be cut and are left
    out (fewer nets, same objective); so are the ``dropped`` nets with more than ``max_pins``
    pins. With ``order``, vertex ``order[k]`` is called k and the nets come in that order."""
    n = adj.shape[0]
    cols = (_pattern(adj) + sp.identity(n, dtype=np.int8, format="csr")).tocsc()
    cols.sort_indices()
    sizes = np.diff(cols.indptr)
    nets = np.arange(n) if order is None else np.asarray(order, dtype=np.int64)
    keep = sizes[nets] > 1
    dropped = 0
    if max_pins is not None:
        dropped = int((sizes[nets] > max_pins).sum())
        keep &= sizes[nets] <= max_pins
    nets = nets[keep]
    counts = sizes[nets]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pins = cols.indices[np.repeat(cols.indptr[nets] - starts[:-1], counts) + np.arange(starts[-1])]
    if order is not None:
        pins = relabel(pins, order)
    return starts, pins.astype(np.int64), dropped


def relabel(pins: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``pins`` with vertex ``order[k]`` called k."""
    new_id = np.empty(order.shape[0], dtype=np.int64)
    new_id[order] = np.arange(order.shape[0])
    return new_id[pins]


def run_mtkahypar(n: int, starts: np.ndarray, pins: np.ndarray, weights: np.ndarray, parts: int,
                  epsilon: float, preset: str, threads: int, seed: int,
                  net_weights=None) -> np.ndarray:
    """Mt-KaHyPar's partition (connectivity - 1) of the hypergraph given as CSR arrays, run
    in a child process.
    ``net_weights`` (positive ints, one per net; default 1 each) make it minimize the
    weighted sum of connectivity - 1."""
    extra = {} if net_weights is None else {"net_weights": np.asarray(net_weights, dtype=np.int64)}
    with tempfile.TemporaryDirectory(prefix="gnnmesh-hp-") as folder:
        folder = Path(folder)
        np.savez(folder / "input.npz", n=n, parts=parts, epsilon=epsilon, preset=preset,
                 threads=threads, seed=seed, net_starts=starts, pins=pins, weights=weights, **extra)
        with open(folder / "stderr.txt", "wb") as err:
            child = subprocess.Popen([sys.executable, str(WORKER), str(folder)], cwd=folder,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            try:
                code = child.wait()
            finally:  # interrupted: the child must not outlive us
                if child.poll() is None:
                    child.kill()
                    child.wait()
        if code != 0:
            lines = (folder / "stderr.txt").read_text(errors="replace").strip().splitlines()
            raise RuntimeError(f"mt-KaHyPar failed (exit status {code}): "
                               f"{lines[-1] if lines else 'no message'}")
        return np.load(folder / "output.npy", allow_pickle=False)


def _pattern(adj: Adjacency) -> sp.csr_matrix:
    indptr, indices = csr_arrays(adj)
    return sp.csr_matrix((np.ones(indices.shape[0], dtype=np.int8), indices, indptr), shape=adj.shape)


