"""APT's dry run and cost model (§3.2, Eq. 2; §4.3 for the caches): which mini-batch route a
``--minibatch --strategy auto`` job runs, and what ``gnnmesh plan --allow-sampling`` ranks.

One epoch's batches are sampled once (rank r samples the steps ``step % ranks == r``, every
rank's share of each) and reused for every route: the first-layer reads give each vertex's
access count, from which each route's caches are chosen, and each route's pure steps give,
per rank, the ids it would send, the hidden rows it would send (forward and backward) and
the feature rows it would read, from its cache or from the store. Nothing is loaded,
computed or exchanged but those counts. Bytes become seconds through probed bandwidths, and
each collective call adds a probed latency; a route's predicted time is its slowest rank's,
and the cheapest route wins. Sampling and the dense compute are the same for every route
and are left out of the comparison (Eq. 2's T_train), as APT does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from ...sampling import row_positions
from ...sampling.features import tier_counts
from ...validate import LINK_KEYS
from .contract import share

FIELDS = ("graph_bytes", "shuffle_bytes", "load_bytes", "cache_bytes", "hits", "misses", "calls", "remote_bytes",
          "features_bytes")
# Per probe of a bandwidth: larger than the CPU's caches, or reads from a warm cache would
# promise what a batch's scattered rows never get.
PROBE_BYTES = 64 << 20
PROBE_REPEATS = 3


@dataclass
class RoutePrediction:
    """One route over one epoch, per rank: ``FIELDS`` and the predicted seconds."""

    name: str
    ranks: dict  # field -> per-rank list
    seconds: list

    @property
    def time(self) -> float:
        return max(self.seconds)

    def as_dict(self) -> dict:
        return {"strategy": self.name, "predicted_time": self.time, "rank_seconds": self.seconds,
                **{f"rank_{k}": v for k, v in self.ranks.items()}}


def cache_rows(route, counts: np.ndarray, capacity: int, rank: int, operator) -> np.ndarray:
    """The rows rank ``rank`` caches under ``route`` (APT §4.3): the globally hottest (GDP,
    NFP), the hottest of its partition (SNP), or of its partition and 1-hop in-neighbours
    (DNP, whose ranks read the sources of their rows' edges). Ties go to the lower id."""
    if capacity <= 0:
        return np.zeros(0, dtype=np.int64)
    candidates = np.arange(len(counts))
    if route.needs_partition:
        candidates = np.flatnonzero(route.owner == rank)
        if route.caches_in_neighbours:
            indptr, indices = np.asarray(operator.indptr), np.asarray(operator.indices)   # numpy, not torch
            candidates = np.union1d(candidates, indices[row_positions(indptr, candidates)])
    hot = np.lexsort((candidates, -counts[candidates]))[:capacity]
    return np.sort(candidates[hot])


def cache_masks(route, counts: np.ndarray, cache_bytes: int, row_bytes: list, operator) -> list:
    """Every rank's cache under ``route``, as a mask over the vertices: the rows ``cache_rows``
    picks for ``cache_bytes`` of rows of ``row_bytes[q]`` bytes (none where a rank reads no
    feature columns, as nfp's may when there are more ranks than features)."""
    masks = [np.zeros(len(counts), dtype=bool) for _ in row_bytes]
    for q, mask in enumerate(masks):
        if row_bytes[q]:
            mask[cache_rows(route, counts, cache_bytes // row_bytes[q], q, operator)] = True
    return masks


def sample_epoch(sampler, batches: list, world: int, rank: int, epoch: int) -> dict:
    """{step: every rank's first-layer block} for this rank's steps of the epoch."""
    return {step: [sampler.sample(share(batch, world, q), epoch, step).layer_block(0) for q in range(world)]
            for step, batch in enumerate(batches) if step % world == rank}


def access_counts(samples: dict, num_nodes: int) -> np.ndarray:
    """How often each vertex is a first-layer input, over the sampled steps."""
    counts = np.zeros(num_nodes, dtype=np.int64)
    for blocks in samples.values():
        for block in blocks:
            counts += np.bincount(block.nodes, minlength=num_nodes)
    return counts


def route_totals(route, samples: dict, width: int, caches: list, row_bytes: list, homes=None) -> np.ndarray:
    """[FIELDS x ranks] summed over the sampled steps, with rank q caching ``caches[q]`` (a mask)
    and, when the features are spread over hosts, ``homes`` (``FeatureHomes``) saying where."""
    out = np.zeros((len(FIELDS), route.world), dtype=np.int64)
    for blocks in samples.values():
        costs = route.step_costs(blocks, width)
        for q, cost in enumerate(costs):
            reads = tier_counts(caches[q], cost.load, row_bytes[q])
            local = reads["load_bytes"] if homes is None else 0  # else: counted below, host by host
            out[:, q] += [cost.graph_bytes, cost.shuffle_bytes, local, reads["cache_bytes"], reads["hits"],
                          reads["misses"], cost.calls, 0, 0]
        if homes is not None:
            misses = [cost.load[~caches[q][cost.load]] for q, cost in enumerate(costs)]
            for name, values in homes.step_counts(misses, [b // 4 for b in row_bytes]).items():
                out[FIELDS.index(name)] += values
    return out


def probe_bandwidths(comm, store, device, given: dict = None) -> dict:
    """Bytes per second of reading feature rows from ``store`` (a ``RowStore``), of gathering them
    from a cache in the device's memory and of an all-to-all (each rank's bytes sent), and an
    all-to-all's latency (seconds for one id to each rank): the median of a few probes, the
    slowest rank's. Figures in ``given`` are taken as they are (``store`` may then be None). On a CPU the cache and the store are the same memory, and the probes say so."""
    given = given or {}
    seconds = dict.fromkeys(LINK_KEYS, 0.0)  # per byte, and per call for the latency
    if not {"load", "cache"} <= set(given):
        row_bytes = 4 * store.width
        rows = max(1, min(store.num_rows, PROBE_BYTES // row_bytes))
        ids = np.sort(np.random.default_rng(0).choice(store.num_rows, rows, replace=False))
        seconds["load"] = _median_seconds(lambda: store.read(ids)) / (rows * row_bytes)
        cache = torch.zeros(rows, store.width, device=device)
        order = torch.from_numpy(np.random.default_rng(1).permutation(rows)).to(device)
        seconds["cache"] = _median_seconds(lambda: cache.index_select(0, order)) / (rows * row_bytes)
    if comm.world_size > 1 and not {"net", "latency"} <= set(given):
        ones = [1] * comm.world_size
        tiny = torch.zeros(comm.world_size, dtype=torch.int64, device=comm.device)
        seconds["latency"] = _median_seconds(lambda: comm.all_to_all(tiny, ones, ones))
        per_peer = PROBE_BYTES // 16 // comm.world_size
        data = torch.zeros(per_peer * comm.world_size, device=comm.device)
        counts = [per_peer] * comm.world_size
        seconds["net"] = max(_median_seconds(lambda: comm.all_to_all(data, counts, counts)) - seconds["latency"],
                             1e-9) / (4 * per_peer * (comm.world_size - 1))
    slowest = torch.tensor([seconds[k] for k in LINK_KEYS], dtype=torch.float64, device=comm.device)
    if comm.world_size > 1:  # every rank's figures, the largest of each
        slowest = comm.all_gather(slowest.unsqueeze(0)).max(dim=0).values
    comm.take()  # the probes are no epoch's traffic
    probed = {k: (1.0 / v if v > 0 else float("inf")) for k, v in zip(LINK_KEYS, slowest.tolist())}
    probed["latency"] = slowest[LINK_KEYS.index("latency")].item()
    return {**probed, **given}


def _median_seconds(fn) -> float:
    times = []
    for _ in range(PROBE_REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def predict(route, totals: np.ndarray, bandwidths: dict) -> RoutePrediction:
    ranks = {k: totals[i].tolist() for i, k in enumerate(FIELDS)}
    seconds = [ranks["load_bytes"][q] / bandwidths["load"] + ranks["cache_bytes"][q] / bandwidths["cache"]
               + (ranks["graph_bytes"][q] + ranks["shuffle_bytes"][q] + ranks["features_bytes"][q]) / bandwidths["net"]
               + ranks["calls"][q] * bandwidths["latency"]
               for q in range(route.world)]
    return RoutePrediction(route.name, ranks, seconds)


def table_lines(predictions: list, chosen: str) -> list:
    """The dry run's table, as printed: one line per route, the chosen one marked."""
    remote = any(sum(p.ranks["remote_bytes"]) for p in predictions)  # features spread over hosts
    lines = [f"{'strategy':>8} {'predicted ms':>12} {'load MiB':>9} {'graph MiB':>9} {'shuffle MiB':>11} "
             f"{'hit rate':>8}" + (f" {'remote MiB':>10}" if remote else "")]
    for p in predictions:
        r = p.ranks
        reads = sum(r["hits"]) + sum(r["misses"])
        lines.append(f"{p.name:>8} {p.time * 1e3:12.4g} {sum(r['load_bytes']) / 2**20:9.2f} "
                     f"{sum(r['graph_bytes']) / 2**20:9.2f} {sum(r['shuffle_bytes']) / 2**20:11.2f} "
                     f"{sum(r['hits']) / max(reads, 1):8.1%}"
                     + (f" {sum(r['remote_bytes']) / 2**20:10.2f}" if remote else "")
                     + ("  <- chosen" if p.name == chosen else ""))
    return lines
