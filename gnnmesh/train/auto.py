"""``--strategy auto`` for full-graph training: rank every strategy for this job with the
planner (``gnnmesh.planner.rank``), print the top candidates and the choice with its reason,
and train with the choice.

Rank 0 plans (it loads the graph, partitions it under each partitioner, prices every
candidate) and sends the choice to the others, so that every rank trains the same strategy
even though partitioning times, which the ranking counts, differ from run to run.
"""

from __future__ import annotations

import os
from typing import Optional

from .. import comm, strategies
from ..config import Config, settings_read_by, strategy_default
from ..errors import ConfigError, GraphError
from ..planner import rates as machine_rates
from ..planner.estimate import Estimate
from ..planner.explain import choice, dropped, table
from ..planner.rank import Ranking, input_width, rank_strategies
from ..validate import parse_bytes
from ..trained import model_options

SHOWN = 5   # candidates printed before the choice
_SINGLE = Estimate.build({}, {}, {}, [0], strategy="single")


def choose(config: Config, load, rank: int, world_size: int, say, inference: Optional[int] = None) -> tuple:
    """(``config`` with the chosen strategy's settings, the record every epoch's metrics carry:
    ``candidate`` and ``predicted_epoch_time``). ``load``: a function returning the graph
    (called on rank 0 only); ``say``: rank 0's print. ``inference``: rank the strategies for
    one inference pass of a model with this many classes instead of training epochs."""
    outcome = None
    if rank == 0:
        try:
            outcome = plan(config, load(), world_size, say, inference)
        except (GraphError, ConfigError) as err:  # every rank stops with the same error
            outcome = err
    if world_size > 1:
        outcome = comm.setup_comm().broadcast_object(outcome)
    if isinstance(outcome, Exception):
        raise outcome
    settings, record = outcome
    return config.updated(**settings).resolved(), record


def plan(config: Config, graph, ranks: int, say, inference: Optional[int] = None) -> tuple:
    """Rank the strategies for ``config`` on ``graph`` over ``ranks`` ranks (``inference``: for
    one inference pass, as ``choose``), print the ranking, and return (the config fields of the
    choice, its record)."""
    if inference is None:
        graph.require_node_classification()
    if ranks == 1 and not config.host_tier.device_memory:
        say("strategy auto: one rank and no --device-memory: the single process")
        return settings_of(_SINGLE, config), {"candidate": "single"}
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", ranks))
    rates, network = _rates(config, ranks, per_node, say)
    widths, options = planned_model(config, graph, classes=inference)
    limit = parse_bytes(config.host_tier.device_memory, "device_memory") if config.host_tier.device_memory else None
    ranking = rank_strategies(graph, ranks, config.model.name, widths, rates, network, per_node,
                              epochs=config.training.epochs, inference=inference is not None,
                              memory_limit=limit, partitioners=(config.partition.partitioner,) if config.partition.partitioner
                              else None, decoupled=config.model.decoupled, seed=config.training.seed,
                              epsilon=strategy_default("epsilon") if config.partition.epsilon is None else config.partition.epsilon,
                              **options)
    for line in _lines(ranking):
        say(line)
    if not ranking.ranked:
        raise ConfigError("--strategy auto: no strategy fits this job (above); raise --device-memory or "
                          "add ranks")
    best = ranking.ranked[0]
    return settings_of(best, config), {"candidate": best.strategy, "predicted_epoch_time": best.epoch_s}


def planned_model(config: Config, graph, features=None, classes=None) -> tuple:
    """(widths, options) of the model ``config`` (resolved) trains on ``graph``, as the
    planner takes them: input (``features``, else the graph's), hidden..., output (``classes``,
    else the graph's); the constructor's other options."""
    features, classes = features or input_width(graph), classes or graph.num_classes
    if config.model.user:  # the user's class builds its own layers from its arguments
        return (features, classes), {"args": config.model.args}
    widths = (features,) + (config.model.hidden,) * (config.model.layers - 1) + (classes,)
    options = {k: v for k, v in model_options(config).items() if k not in ("hidden", "layers")}
    relations = getattr(getattr(graph, "adj", None), "relations", None)
    if "relations" in options and options["relations"] is None and relations is not None:
        options["relations"] = relations.names  # a model of relations is planned with the graph's, as it trains
    return widths, options


def settings_of(estimate, config: Config) -> dict:
    """The config changes that train ``estimate``'s candidate: its strategy and settings; the
    plan's own settings cleared, except the imbalance of a partitioned choice."""
    settings = {k: v for k, v in estimate.settings.items() if k != "decoupled"}   # the model's already
    partitioned = strategies.spec(settings["strategy"]).reads_setting("partition", "epsilon")
    planned = settings_read_by(strategies.engine_for("auto"))
    settings.update({f: None for f in planned if f not in settings and not (partitioned and f == "epsilon")})
    return settings


def _rates(config: Config, ranks: int, per_node: int, say) -> tuple:
    """The rates file's, else this machine's; on CPU, slowed where this node's ranks share cores."""
    import torch
    threads = torch.get_num_threads()
    if config.plan.rates:
        rates, network = machine_rates.read(config.plan.rates, "config field 'rates'")
    else:
        rates, network = machine_rates.this_machine(config.run.device, threads, ranks, say=say)
    if config.run.device == "cpu":
        rates = machine_rates.sharing_cores(rates, per_node, threads, os.cpu_count() or 1)
    return rates, network


def _lines(ranking: Ranking) -> list:
    shown = ranking.ranked[:SHOWN]
    measure = "the predicted time of one inference pass" if ranking.inference else "predicted epoch time"
    return ([f"strategy auto: every full-graph strategy for this job, by {measure}:"]
            + ["  " + line for line in table(ranking, shown) + dropped(ranking)] + [choice(ranking)])
