"""APT's mini-batch strategies (gdp, nfp, snp, dnp) for ``gnnmesh plan --allow-sampling``.

The dry run a ``--minibatch --strategy auto`` job makes (``parallel.minibatch.dryrun``: one
epoch's batches sampled once, each route's per-rank bytes and calls counted from them), here
for every rank in one process, priced with the planner's link rates instead of probed ones.
Like APT's model (§3.2, Eq. 2) it prices what differs between the routes, the feature reads
and the exchanges of ids, graph and hidden rows, and leaves out the sampling and the dense
compute, which are the same for all four. Its seconds rank the routes among themselves; they
are not an epoch's time, and a sampled epoch does other work than a full-graph one anyway, so
the two rankings are never merged.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..parallel.minibatch import ROUTES
from ..parallel.minibatch.dryrun import access_counts, cache_masks, predict, route_totals, sample_epoch
from ..sampling import DEFAULT_BATCH, RELATIONS, draw_batches, sampled_graph, sampled_operator, sampler_of
from .machine import ComputeRates, Network, world_links
from .trace import ELEMENT_BYTES


def links(rates: ComputeRates, network: Network, ranks: int, ranks_per_node: Optional[int]) -> dict:
    """The dry run's bandwidths (bytes/s) and latency from the planner's rates: feature rows
    read from host memory at ``gather_bw`` shared by the node's ranks (every step, they all
    read at once, and one reader alone is what the probe measures); gathered from a device
    cache as fast as an elementwise pass moves them; exchanged at an all-to-all's bandwidth
    and latency."""
    bandwidth, latency = world_links(ranks, ranks_per_node, network)[1]
    cache = ELEMENT_BYTES / rates.elementwise_per if rates.elementwise_per > 0 else float("inf")
    load = network.gather_bw / min(ranks_per_node or ranks, ranks)
    return {"load": load, "cache": cache, "net": bandwidth, "latency": latency}


def rank_routes(graph, ranks: int, net, rates: ComputeRates, network: Network, ranks_per_node: Optional[int] = None,
                *, fanouts, batch_size: Optional[int] = None, owner: Optional[np.ndarray] = None,
                cache_bytes: int = 0, seed: int = 0, attention: bool = False) -> list:
    """The routes' ``RoutePrediction``s for mini-batches of ``net`` (a built layer stack) on
    ``graph`` over ``ranks`` ranks, cheapest first. ``owner``: every vertex's rank, for the
    routes that partition (snp, dnp; left out without it); ``cache_bytes``: each rank's
    feature cache (``--cache-memory``), filled as the job fills it; ``attention``: the model
    has attention layers (the routes that split a row's sources are left out)."""
    op = sampled_operator(net)
    operator = sampled_graph(op, graph.adj)
    sampler = sampler_of(op, operator, fanouts, seed)
    train_ids = np.flatnonzero(graph.train_mask.numpy())
    batches = draw_batches(train_ids, batch_size or min(DEFAULT_BATCH, len(train_ids)), seed, 1)
    samples = {}
    for rank in range(ranks):   # each rank's steps, as the job's ranks sample them
        samples.update(sample_epoch(sampler, batches, ranks, rank, 1))
    width, counts = graph.num_features, access_counts(samples, graph.num_nodes)
    bandwidths = links(rates, network, ranks, ranks_per_node)
    out = []
    for name, kind in ROUTES.items():
        if (kind.needs_partition and owner is None) or (attention and not kind.attention) or \
                (op == RELATIONS and not kind.per_relation):
            continue
        route = kind(ranks, owner)
        route.bind(sampler, net, op, seed, "cpu")
        row_bytes = [ELEMENT_BYTES * (c.stop - c.start) for c in (route.feature_columns(width, q)
                                                                    for q in range(ranks))]
        caches = cache_masks(route, counts, cache_bytes, row_bytes, operator)
        out.append(predict(route, route_totals(route, samples, route.reply_width(net), caches, row_bytes),
                           bandwidths))
    return sorted(out, key=lambda p: (p.time, p.name))
