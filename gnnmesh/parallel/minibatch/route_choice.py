"""How a mini-batch strategy on several ranks chooses its route and supplies its features:
``auto`` runs the dry run (``dryrun``) and takes its cheapest route, the caches are filled from
the dry run's access counts, and on several hosts a rank keeps only the feature rows homed on
its host."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ... import strategies
from ...errors import ConfigError
from ...host_store import made_together
from ...sampling import RELATIONS, FeatureTier
from ...sampling.features import LocalSource, RowStore
from ...validate import parse_links
from . import dryrun
from .contract import BatchSetup, FeatureSupply
from .feature_homes import FeatureHomes, HomedSource
from .routes import ROUTES

# Bytes of one feature value (float32) in a row a cache or a store holds.
VALUE_BYTES = 4


def candidate_names(strategy, setup: BatchSetup) -> list:
    """The routes to choose from: the one asked for, or under ``auto`` every route the model can take."""
    if not strategies.spec(strategy.name).planned:
        return [strategy.name]
    return [n for n, r in ROUTES.items() if (r.attention or not setup.config.model.attention)
            and (r.per_relation or setup.op != RELATIONS)]


def bound_routes(strategy, setup: BatchSetup, names: list) -> dict:
    routes = {}
    for name in names:
        routes[name] = ROUTES[name](strategy.world_size, strategy.owner)
        routes[name].bind(setup.sampler, setup.model, setup.op, setup.config.training.seed, setup.device)
    return routes


def summed(strategy, array: np.ndarray) -> np.ndarray:
    """An integer array summed over ranks."""
    return strategy.all_reduce(torch.from_numpy(array.astype(np.int64))).numpy()


@dataclass
class _Stores:
    """The feature stores of one rank: the store's settings, and on several hosts the rows homed on its own."""

    settings: dict
    homes: object = None
    host_rows: object = None


def feature_stores(strategy, config, x: torch.Tensor) -> _Stores:
    kind, folder = config.host_tier.host_store or "ram", config.host_tier.store_dir
    shared = made_together(folder, strategy.comm) if kind == "file" and folder else ()
    settings = dict(store=kind, store_dir=folder, shared=shared)
    if strategy.hosts <= 1:
        return _Stores(settings)
    homes = FeatureHomes(x.shape[0], strategy.world_size, strategy.hosts, strategy.owner)
    return _Stores(settings, homes, RowStore(x[homes.rows(homes.host(strategy.rank))], **settings))


def route_widths(routes: dict, width: int, world: int) -> dict:
    """Per route, the feature columns each rank reads."""
    return {n: [r.feature_columns(width, q).stop - r.feature_columns(width, q).start for q in range(world)]
            for n, r in routes.items()}


def check_cache(config, widths: dict) -> None:
    smallest = VALUE_BYTES * min(min(w) for w in widths.values())
    if 0 < config.minibatch.cache_bytes() < smallest:
        raise ConfigError(f"config field 'cache_memory': {config.minibatch.cache_memory} holds no feature row "
                          f"({smallest} bytes each)")


def measured_bandwidths(strategy, config, x, stores: _Stores, device) -> dict:
    """The links the dry run prices with: given ones, the rest probed (on a store like the run's)."""
    given = parse_links(config.minibatch.bandwidths) if config.minibatch.bandwidths else {}
    probe = stores.host_rows or (RowStore(x, **stores.settings) if not {"load", "cache"} <= set(given) else None)
    bandwidths = dryrun.probe_bandwidths(strategy.comm, probe, device, given)
    if probe is not None and probe is not stores.host_rows:
        probe.close()
    return bandwidths


def dry_run(strategy, setup: BatchSetup, routes: dict, widths: dict, stores: _Stores, x) -> tuple:
    """(access counts summed over ranks, one prediction per route) from one sampled epoch."""
    samples = dryrun.sample_epoch(setup.sampler, setup.first_batches, strategy.world_size, strategy.rank, 1)
    counts = summed(strategy, dryrun.access_counts(samples, x.shape[0]))
    bandwidths = measured_bandwidths(strategy, setup.config, x, stores, setup.device)
    cache_bytes = setup.config.minibatch.cache_bytes()
    predictions = []
    for name, route in routes.items():
        row_bytes = [VALUE_BYTES * w for w in widths[name]]
        masks = dryrun.cache_masks(route, counts, cache_bytes, row_bytes, setup.operator)
        totals = summed(strategy, dryrun.route_totals(route, samples, route.reply_width(setup.model), masks,
                                                      row_bytes, stores.homes))
        predictions.append(dryrun.predict(route, totals, bandwidths))
    return counts, predictions


def supply(strategy, setup: BatchSetup, route, stores: _Stores, x) -> FeatureSupply:
    """The feature tiers of ``route``; on several hosts the rank data's own rows are dropped."""
    world, s = strategy.world_size, setup.rank_data
    columns = [route.feature_columns(x.shape[1], q) for q in range(world)]
    if not stores.homes:
        tier = FeatureTier(LocalSource(RowStore(x, columns[strategy.rank], **stores.settings)), x.shape[0],
                           setup.device)
        return FeatureSupply(tier, tier)
    s.x = None  # what this rank reads now comes through its host's store
    tier = FeatureTier(HomedSource(strategy.comm, stores.homes, stores.host_rows, columns), x.shape[0], setup.device)
    whole = [slice(0, x.shape[1])] * world  # evaluation reads whole rows (nfp trains on slices)
    evaluation = tier if columns == whole else \
        FeatureTier(HomedSource(strategy.comm, stores.homes, stores.host_rows, whole), x.shape[0], setup.device)
    return FeatureSupply(tier, evaluation)


def choose_route(strategy, setup: BatchSetup) -> FeatureSupply:
    """Pick the route (``auto``: the dry run's cheapest), tell ``strategy`` to use it, and
    supply its features, the caches filled from the dry run's access counts."""
    config, x = setup.config, setup.rank_data.x.cpu()
    names = candidate_names(strategy, setup)
    routes = bound_routes(strategy, setup, names)
    stores = feature_stores(strategy, config, x)
    widths = route_widths(routes, x.shape[1], strategy.world_size)
    check_cache(config, widths)
    cache_bytes = config.minibatch.cache_bytes()
    counts, predictions, chosen = None, [], names[0]
    if cache_bytes or len(names) > 1:
        counts, predictions = dry_run(strategy, setup, routes, widths, stores, x)
        chosen = min(predictions, key=lambda p: p.time).name
    strategy.use(routes[chosen])
    result = supply(strategy, setup, routes[chosen], stores, x)
    result.predictions = predictions
    if counts is not None and cache_bytes:
        capacity = cache_bytes // (VALUE_BYTES * widths[chosen][strategy.rank])
        result.features.fill(dryrun.cache_rows(routes[chosen], counts, capacity, strategy.rank, setup.operator))
    strategy.reset_counters()
    return result
