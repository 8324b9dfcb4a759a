"""``partition()``: validate, reuse a stored result or compute, fix up, time and store
(``cached_partition``, which ``stochastic_partition`` shares)."""

from __future__ import annotations

import time
import warnings

import numpy as np

from .. import progress
from ..validate import check_seed
from ..errors import ConfigError, GraphError
from .base import Partition, as_adjacency, check_method, check_parts, fill_empty_parts, graph_key
from .registry import DEFAULT, load, spec
from .store import entry_path, is_current, load_partition, save_partition, store_dir


def partition(graph, parts: int, method: str = DEFAULT, *, epsilon: float = 0.01, seed: int = 0,
              cache: bool = True, cache_dir=None) -> Partition:
    """Assign every vertex (row of A) of ``graph`` (a Graph or Adjacency) to one of ``parts``.

    Methods: ``rp`` (random, equal vertex counts), ``contiguous`` (id ranges of equal
    nonzeros), ``gp`` (METIS edge cut on A + A^T), ``hp`` (Mt-KaHyPar connectivity - 1 on the
    column-net hypergraph: the exact halo volume; then a greedy pass lowers the largest
    per-rank send volume, see ``refine.py``). ``gp``/``hp`` balance nonzeros + 1 per
    vertex within ``epsilon`` where the graph allows it (a hub heavier than a part's share
    cannot be split); ``gp`` also balances vertex counts, which set a rank's memory. Every
    part is non-empty; results are deterministic per ``seed`` (for ``hp``, see
    ``methods.hypergraph`` for the presets and thread counts where they are).

    With ``cache`` the result is stored under ``store_dir(cache_dir)`` and reused by later
    calls with the same graph structure and arguments.
    """
    check_method(method)
    adj = as_adjacency(graph)
    parts, epsilon, seed = check_settings(adj, parts, epsilon, seed)
    chosen = spec(method)
    preset = load(chosen.preset)() if chosen.preset else None
    return cached_partition(adj, parts, method, epsilon, seed,
                            lambda: (chosen.load()(adj, parts, epsilon, seed), None),
                            preset=preset, cache=cache, cache_dir=cache_dir)


def check_settings(adj, parts, epsilon, seed) -> tuple:
    """``(parts, epsilon, seed)`` checked for ``adj``: a ConfigError names a bad one."""
    parts = check_parts(parts, adj.shape[0])
    epsilon, seed = float(epsilon), check_seed(int(seed))
    if not epsilon >= 0:
        raise ConfigError(f"epsilon must be a non-negative number, got {epsilon}")
    return parts, epsilon, seed


def cached_partition(adj, parts: int, method: str, epsilon: float, seed: int, compute, *,
                     preset=None, variant=None, cache: bool = True, cache_dir=None) -> Partition:
    """The stored partition for these arguments, else ``compute()`` -> ``(assignment,
    sampling)`` timed, with empty parts filled, and stored. ``variant`` names the further
    arguments of the entry (``store.entry_path``)."""
    key = graph_key(adj)
    path = (entry_path(store_dir(cache_dir), key, method, parts, epsilon, seed, variant)
            if cache else None)
    if path is not None and is_current(path, method, preset):  # else absent, older or another preset
        try:
            stored = load_partition(path, adj, parts=parts)
            stored.from_cache = True
            return stored
        except GraphError as exc:  # a damaged entry is recomputed, not an error
            warnings.warn(f"gnnmesh: ignoring unusable stored partition: {exc}", stacklevel=3)

    start = time.perf_counter()
    with progress.phase(f"{method}: partitioning {adj.shape[0]:,} vertices into {parts} parts"):
        assignment, sampling = compute()
    assignment = fill_empty_parts(np.asarray(assignment, dtype=np.int64), parts)
    seconds = time.perf_counter() - start
    result = Partition(assignment=assignment, parts=parts, method=method, epsilon=epsilon,
                       seed=seed, seconds=seconds, graph_key=key, preset=preset, sampling=sampling)
    if path is not None and save_partition(result, path):
        result.path = str(path)
    return result
