"""Stochastic hypergraph partitioning, ``shp`` (Demirci et al., PVLDB 2022, §4.3.3,
Algorithm 3): a vertex partition for mini-batch training that minimizes the expected
communication of a sampled batch instead of that of the whole graph.

    >>> part = stochastic_partition(graph, 8, [10, 5], 1024, seeds_pool=train_ids)
    >>> part.sampling["batches"], part.sampling["nets"]
    >>> batch_volumes(graph, [part, hp_part], [10, 5], 1024, seeds_pool=train_ids)  # held out

What a batch communicates. A sampled batch of an L-layer model is L blocks, and each layer
is one SpMM over its block: destinations are rows, the block's nodes columns, and column
j's input row lives on the owner of j in every layer (the first layer reads j's features;
a later one reads what the owner of j computed as a destination of the layer before). So a
layer communicates exactly as the full graph does, over its block: the owner of j sends
row j once to every other part holding a destination with an entry in column j. Block
column j is thus the net {j} + {destinations with an entry in column j} (global ids), and
the layer moves sum over j of (connectivity - 1) rows forward, as many backward.

The stochastic hypergraph. A batch's hypergraph is the union of the nets of all its blocks
(one set of nets per layer, as each layer communicates once); the nets of ``b`` batches
are merged, identical pin sets becoming one net weighted by their count. Its weighted
connectivity - 1 is then the total volume of the ``b`` batches, and mt-KaHyPar minimizing
it minimizes the mean volume of a batch, an estimate of the expected volume of any batch
drawn the same way. Vertices never sampled still take part (with no nets), weighted and
balanced as in ``hp``: every vertex is equally likely to be a seed, so the full graph's
load is the expected load.

How many batches. The mean connectivity of |N| random nets (each between 1 and P) is
within ``theta`` of the expected one with probability at least 1 - ``delta`` once
|N| >= (P - 1)^2 ln(2 / delta) / (2 theta^2) (Hoeffding; ``hoeffding_nets``). That bounds
the error of the estimate for a fixed partition, not for the one fitted to the sample: one
to five batches of 1,024 seeds reach the count up to P = 27 (theta 0.1, delta 0.5), yet
their partition places every vertex they did not reach for balance alone, and held-out
batches then moved 1.2-5.1x what ``hp``'s partition moves on GitHub and Facebook at P = 3,
9 and 27; fitted to one epoch's batches, 0.77-0.89x (``benchmarks/shp_volume.py``). So
batches are drawn until both hold: the merged hypergraph has the Hoeffding count of nets
that can be cut (two pins or more), and ``min_batches`` batches were drawn (default one
epoch's: every seed of the pool once); MAX_BATCHES ends the draw regardless. ``Partition.sampling["stop"]`` names the bound that
ended it; ``min_batches=1`` is the Hoeffding rule alone.

Batches are drawn as mini-batch training with the same seed draws those of epochs
BUILD_EPOCH, BUILD_EPOCH + 1, ...: a permutation of the seed pool keyed by (seed, epoch)
cut into ``batch_size`` pieces, each sampled by ``NeighborSampler`` at (epoch, step).
Later epochs are held out from the partition; ``batch_volumes`` measures any partition on
them.

Not done: per-layer net costs (a layer's rows are as wide as its input, the first layer's
the features), and ``hp``'s refinement of the largest send volume, which works on the full
graph's nets.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import scipy.sparse as sp

from .. import progress
from ..errors import ConfigError
from ..sampling import RELATIONS, draw_batches, parse_fanouts, sampled_graph, sampler_of
from ..sampling.relations import relation_fanouts
from ..validate import Range
from ..view import OPERATORS
from .api import cached_partition, check_settings
from .base import as_adjacency, csr_arrays, vertex_weights
from .halo import check_assignment
from .methods import _import_extra, hp_preset, partition_threads, relabel, run_mtkahypar
from .quality import cut_volume

BUILD_EPOCH = 0     # the epoch whose batches the partition is built from
MAX_BATCHES = 256   # the draw's bound where an epoch has more batches and Hoeffding asks more
UNIT = Range(0, 1, open="lowhigh")
NO_DRAW = {"batches": 0, "epochs": 0, "sampled_nets": 0, "nets": 0, "needed_nets": 0, "stop": "one part"}


@dataclass
class StochasticHypergraph:
    """Merged nets as CSR arrays (the pins of net k, ascending, are
    ``pins[starts[k]:starts[k + 1]]``) with their ``weights`` (how many times each was
    sampled); ``batches`` drawn from ``epochs`` epochs, ``sampled_nets`` before merging,
    ``needed`` the Hoeffding count and ``stop`` the bound that ended the draw."""

    starts: np.ndarray
    pins: np.ndarray
    weights: np.ndarray
    batches: int
    epochs: int
    sampled_nets: int
    needed: int
    stop: str

    @property
    def nets(self) -> int:
        return int(self.starts.shape[0] - 1)


def hoeffding_nets(parts: int, theta: float = 0.1, delta: float = 0.5) -> int:
    """The fewest nets whose mean connectivity (each in [1, parts]) is within ``theta`` of the
    expected one with probability at least 1 - ``delta``: (P - 1)^2 ln(2 / delta) / (2 theta^2)."""
    return math.ceil((parts - 1) ** 2 * math.log(2 / delta) / (2 * theta ** 2))


def _draws(pool: np.ndarray, batch_size: int, seed: int):
    """``(epoch, step, seeds)`` of every batch of epochs BUILD_EPOCH, BUILD_EPOCH + 1, ..."""
    epoch = BUILD_EPOCH
    while True:
        for step, seeds in enumerate(draw_batches(pool, batch_size, seed, epoch)):
            yield epoch, step, seeds
        epoch += 1


def block_pins(block) -> tuple:
    """``(net, pin)`` pairs of a block's column nets: for every entry (destination i, column
    j) the pair (j, i), and (j, j) for every column; ``net`` is the block's column, ``pin``
    a global id. Pairs may repeat (a destination with its own column)."""
    indptr, indices = csr_arrays(block.adj)
    columns = np.arange(block.nodes.shape[0], dtype=np.int64)
    rows = np.repeat(np.arange(block.num_dst, dtype=np.int64), np.diff(indptr))
    return np.concatenate([indices, columns]), block.nodes[np.concatenate([rows, columns])]


def block_nets(block, num_nodes: int) -> tuple:
    """``(starts, pins)``: the column-net hypergraph of one block in global ids, pins
    ascending; nets of a single pin (never cut) are left out."""
    net, pin = block_pins(block)
    nets = sp.csr_matrix((np.ones(net.shape[0], dtype=np.int8), (net, pin)),
                         shape=(block.nodes.shape[0], num_nodes))
    nets.sum_duplicates()  # distinct pins, sorted within each net
    sizes = np.diff(nets.indptr)
    keep = sizes > 1
    return _starts(sizes[keep]), nets.indices[np.repeat(keep, sizes)].astype(np.int64)


def batch_nets(sample, num_nodes: int) -> tuple:
    """``(starts, pins)``: the nets of every block of a sampled batch (one layer each)."""
    return concat_nets([block_nets(block, num_nodes) for block in sample.blocks])


def merge_nets(starts: np.ndarray, pins: np.ndarray, weights: np.ndarray) -> tuple:
    """``(starts, pins, weights)`` with identical nets (same ascending pins) merged into one
    whose weight is the sum of theirs; nets come out by size, then by pins."""
    sizes = np.diff(starts)
    by_size = np.argsort(sizes, kind="stable")
    bounds = np.flatnonzero(np.diff(sizes[by_size])) + 1
    out_pins, out_sizes, out_weights = [], [], []
    for group in np.split(by_size, bounds):  # a loop over distinct net sizes, not over nets
        if group.shape[0] == 0:
            continue
        size = int(sizes[group[0]])
        table = pins[starts[group][:, None] + np.arange(size)]  # one net per row
        unique, inverse = np.unique(table, axis=0, return_inverse=True)
        out_pins.append(unique.reshape(-1))
        out_sizes.append(np.full(unique.shape[0], size, dtype=np.int64))
        out_weights.append(np.bincount(inverse.reshape(-1), weights=weights[group],
                                       minlength=unique.shape[0]).astype(np.int64))
    if not out_pins:
        return starts.copy(), pins.copy(), weights.copy()
    return _starts(np.concatenate(out_sizes)), np.concatenate(out_pins), np.concatenate(out_weights)


def stochastic_hypergraph(operator, parts: int, fanouts: list, batch_size: int, pool: np.ndarray,
                          theta: float, delta: float, seed: int,
                          min_batches: Optional[int] = None, per_relation: bool = False) -> StochasticHypergraph:
    """Draw batches of epochs BUILD_EPOCH, BUILD_EPOCH + 1, ... from ``operator`` (an
    Adjacency; ``per_relation``: a typed graph's union, sampled per relation) until the merged
    nets reach the Hoeffding count and at least ``min_batches`` were drawn (default one
    epoch's), or MAX_BATCHES were."""
    n = operator.shape[0]
    needed = hoeffding_nets(parts, theta, delta)
    floor = math.ceil(pool.shape[0] / batch_size) if min_batches is None else min_batches
    sampler = sampler_of(RELATIONS if per_relation else "", operator, fanouts, seed)
    merged = (_starts(np.zeros(0, np.int64)), np.zeros(0, np.int64), np.zeros(0, np.int64))
    pending, bound = [], 0  # nets not merged yet; merged + pending nets bound the merged count
    sampled, drawn, stop = 0, 0, "max batches"
    for epoch, step, seeds in _draws(pool, batch_size, seed):
        pending.append(batch_nets(sampler.sample(seeds, epoch, step), n))
        count = pending[-1][0].shape[0] - 1
        sampled, drawn, bound = sampled + count, drawn + 1, bound + count
        if drawn >= floor and bound >= needed:  # merging only when its count could be enough
            merged, pending = _merge_into(merged, pending), []
            bound = merged[0].shape[0] - 1
            if bound >= needed:
                # the floor binds only where it asked for more than one batch and got no more
                floor_bound = drawn == floor and floor > 1
                stop = ("epoch" if min_batches is None else "min batches") if floor_bound else "hoeffding"
                break
        if drawn == MAX_BATCHES:
            break
    starts, pins, weights = _merge_into(merged, pending)
    return StochasticHypergraph(starts, pins, weights, drawn, epoch - BUILD_EPOCH + 1, sampled, needed, stop)


def _merge_into(merged: tuple, pending: list) -> tuple:
    """``merged`` (starts, pins, weights) with the ``pending`` (starts, pins) nets merged in."""
    if not pending:
        return merged
    starts, pins = concat_nets([merged[:2]] + pending)
    ones = [np.ones(p[0].shape[0] - 1, dtype=np.int64) for p in pending]
    return merge_nets(starts, pins, np.concatenate([merged[2]] + ones))


def stochastic_partition(graph, parts: int, fanouts, batch_size: int, *, seeds_pool=None,
                         operator: str = "gcn", theta: float = 0.1, delta: float = 0.5,
                         min_batches: Optional[int] = None, epsilon: float = 0.01, seed: int = 0,
                         cache: bool = True, cache_dir=None):
    """The ``shp`` Partition of ``graph`` (a Graph or Adjacency) into ``parts`` for
    mini-batch training with ``fanouts`` (one per layer, -1 for all; a list or "10,5"),
    ``batch_size`` seeds per batch drawn from ``seeds_pool`` (training node ids or a boolean
    mask; default every node), sampled from graph operator ``operator`` (``view.OPERATORS``)
    with seed ``seed``, as mini-batch training with that seed samples.

    mt-KaHyPar (``hp``'s preset and threads, the same vertex weights, imbalance ``epsilon``)
    partitions the stochastic hypergraph of at least ``min_batches`` batches (default: one
    epoch's) and of the Hoeffding count of nets that ``theta`` and ``delta`` set (see the
    module's notes). The result's ``sampling`` holds the settings and the draw: batches and
    epochs, sampled and merged nets, the Hoeffding count and the bound that stopped it.
    Stored and reused like ``partition()``'s results, keyed also by the sampling settings
    and the pool. Bad settings raise ConfigError; a missing mt-KaHyPar, MissingExtraError.
    """
    adj = as_adjacency(graph)
    parts, epsilon, seed = check_settings(adj, parts, epsilon, seed)
    settings, pool = check_sampling(adj, fanouts, batch_size, seeds_pool, operator)
    settings.update(theta=check_unit("theta", theta), delta=check_unit("delta", delta),
                    min_batches=_check_min_batches(min_batches))
    preset = hp_preset()

    def compute():
        if parts == 1:  # nothing to sample for
            return np.zeros(adj.shape[0], dtype=np.int64), {**settings, **NO_DRAW}
        _import_extra("mtkahypar", "shp")  # fail before sampling, naming the extra
        with progress.phase("shp: sampling batches"):
            hg = stochastic_hypergraph(sampled_graph(operator, adj), parts, settings["fanouts"], batch_size,
                                       pool, theta, delta, seed, min_batches, per_relation=operator == RELATIONS)
        draw = {"batches": hg.batches, "epochs": hg.epochs, "sampled_nets": hg.sampled_nets,
                "nets": hg.nets, "needed_nets": hg.needed, "stop": hg.stop}
        with progress.phase(f"shp: mt-KaHyPar, {preset} preset: {hg.nets:,} nets"):
            return _partition_nets(adj, hg, parts, epsilon, seed, preset), {**settings, **draw}

    return cached_partition(adj, parts, "shp", epsilon, seed, compute, preset=preset,
                            variant=_digest(settings, pool), cache=cache, cache_dir=cache_dir)


def check_sampling(adj, fanouts, batch_size, seeds_pool, operator) -> tuple:
    """``(settings, pool)``: the batches' settings as a JSON-able dict and the seed pool
    (int64 ids), or a ConfigError naming the bad one."""
    if operator == RELATIONS:  # a model that aggregates per relation: the typed graph sampled per relation
        if adj.relations is None:
            raise ConfigError(f"config field 'operator': {RELATIONS!r} samples a typed graph per relation; this "
                              "graph has none")
        fanouts = [list(hop) for hop in relation_fanouts(fanouts, adj.relations.names)]
    else:
        fanouts = parse_fanouts(fanouts)
    n = adj.shape[0]
    pool = _seed_pool(seeds_pool, n)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or not 1 <= batch_size <= pool.shape[0]:
        raise ConfigError(f"config field 'batch_size': must be an integer from 1 to the seed pool's "
                          f"{pool.shape[0]:,} nodes, got {batch_size!r}")
    if operator not in OPERATORS and operator != RELATIONS:
        raise ConfigError(f"config field 'operator': unknown graph operator {operator!r}; "
                          f"choose from {', '.join(sorted(OPERATORS))}, or {RELATIONS} (per relation)")
    return {"fanouts": fanouts, "batch_size": int(batch_size), "operator": operator,
            "seeds": int(pool.shape[0])}, pool


def _check_min_batches(value) -> Optional[int]:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                              or value < 1):
        raise ConfigError(f"config field 'min_batches': must be a positive integer, got {value!r}")
    return None if value is None else int(value)


def check_unit(name: str, value) -> float:
    """``value`` as a float in (0, 1) (theta, delta), else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise ConfigError(f"config field '{name}': must be a number in (0, 1), got {value!r}")
    UNIT.check(name, float(value))
    return float(value)


def batch_volumes(graph, assignments, fanouts, batch_size: int, *, seeds_pool=None,
                  operator: str = "gcn", seed: int = 0, epoch: Optional[int] = None,
                  batches: Optional[int] = None) -> np.ndarray:
    """Rows communicated per batch (all its layers, one direction) under each of
    ``assignments`` (Partitions or assignment arrays), over the first ``batches`` batches
    (default all) of ``epoch``, drawn as ``stochastic_partition`` draws them: an array
    [assignment, batch]. The default epoch is the first that no ``shp`` partition among
    ``assignments`` was built from (``held_out_epoch``)."""
    adj = as_adjacency(graph)
    settings, pool = check_sampling(adj, fanouts, batch_size, seeds_pool, operator)
    epoch = held_out_epoch(assignments) if epoch is None else epoch
    owners = [check_assignment(a, getattr(a, "parts", None), adj.shape[0]) for a in assignments]
    sampler = sampler_of(operator, sampled_graph(operator, adj), settings["fanouts"], seed)
    drawn = draw_batches(pool, settings["batch_size"], seed, epoch)[:batches]
    out = np.zeros((len(owners), len(drawn)), dtype=np.int64)
    for step, seeds in enumerate(drawn):
        sample = sampler.sample(seeds, epoch, step)
        for k, (owner, parts) in enumerate(owners):
            out[k, step] = sum(block_volume(block, owner, parts) for block in sample.blocks)
    return out


def held_out_epoch(partitions) -> int:
    """The first epoch whose batches none of ``partitions`` was built from."""
    return BUILD_EPOCH + max([(getattr(p, "sampling", None) or {}).get("epochs", 0) for p in partitions] + [0])


def block_volume(block, assignment: np.ndarray, parts: int) -> int:
    """Rows one block's SpMM moves under ``assignment``: over its columns j, the number of
    parts among the owners of j and of the destinations with an entry in column j, minus one."""
    net, pin = block_pins(block)
    return cut_volume(net, assignment[pin], block.nodes.shape[0], parts)


def _partition_nets(adj, hg: StochasticHypergraph, parts: int, epsilon: float, seed: int,
                    preset: str) -> np.ndarray:
    """mt-KaHyPar on the weighted nets, vertices relabeled by a seeded permutation for
    ``seed`` != 0 as ``hp`` does (the deterministic presets ignore the seed)."""
    n = adj.shape[0]
    order = np.random.default_rng(seed).permutation(n) if seed else np.arange(n)
    assignment = np.empty(n, dtype=np.int64)
    assignment[order] = run_mtkahypar(n, hg.starts, relabel(hg.pins, order), vertex_weights(adj)[order],
                                      parts, epsilon, preset, partition_threads(), seed,
                                      net_weights=hg.weights)
    return assignment


def _seed_pool(seeds_pool, n: int) -> np.ndarray:
    """Seed ids (int64) from ids or a boolean mask of the nodes; every node when None."""
    if seeds_pool is None:
        return np.arange(n, dtype=np.int64)
    pool = np.asarray(seeds_pool.cpu() if hasattr(seeds_pool, "cpu") else seeds_pool)
    if pool.dtype == bool and pool.shape == (n,):
        pool = np.flatnonzero(pool)
    if pool.ndim != 1 or pool.shape[0] == 0 or not np.issubdtype(pool.dtype, np.integer):
        raise ConfigError(f"config field 'seeds_pool': expected node ids or a boolean mask of the "
                          f"{n} nodes, got {pool.dtype} with shape {list(pool.shape)}")
    if pool.min() < 0 or pool.max() >= n or np.unique(pool).shape[0] != pool.shape[0]:
        raise ConfigError(f"config field 'seeds_pool': node ids must be distinct and in [0, {n})")
    return pool.astype(np.int64, copy=False)


def _digest(settings: dict, pool: np.ndarray) -> str:
    """A short content hash of the sampling settings and the seed pool, for the store key."""
    h = hashlib.blake2b(json.dumps(settings, sort_keys=True).encode(), digest_size=8)
    h.update(memoryview(np.ascontiguousarray(pool)))
    return h.hexdigest()


def _starts(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def concat_nets(nets: list) -> tuple:
    """Several ``(starts, pins)`` hypergraphs' nets as one."""
    sizes = np.concatenate([np.diff(starts) for starts, _ in nets])
    return _starts(sizes), np.concatenate([pins for _, pins in nets]).astype(np.int64)
