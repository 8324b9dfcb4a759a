"""``gnnmesh plan`` (``--strategy all``): every full-graph strategy for a dataset, or for a graph
known by its size (``--nodes/--edges``, ``gnnmesh.planner.sized``), on G ranks, ranked by the
planner's models (``gnnmesh.planner.rank``): 1D partition under each partitioner, tensor
parallelism and every 3D grid, with the candidates a memory limit or the model rules out and
why, and one line naming the choice."""

from __future__ import annotations

from ..config import Config, strategy_default
from ..errors import ConfigError
from ..parallel.minibatch import dryrun
from ..partition import MissingExtraError, partition
from ..partition import registry as partitioners
from ..planner.explain import choice, dropped, table
from ..planner.minibatch import rank_routes
from ..planner.rank import rank_sized, rank_strategies
from ..planner.sized import SizedGraph
from ..planner.trace import build
from ..report.plan_file import Candidate, write_plan
from ..train.auto import planned_model
from ..validate import parse_bytes
from .plan_inputs import DEFAULT_CLASSES, DEFAULT_FEATURES, check_flags, machine, machine_lines

MAX_RANKS = 4096


def run(args) -> int:
    """The command; the flags are ``plan.py``'s."""
    if args.nproc is None:
        raise ConfigError("--nproc G: the number of ranks to rank the strategies for")
    check_flags(args)
    if args.nproc > MAX_RANKS:   # every pair of ranks' halo is priced: memory and time grow as G^2
        raise ConfigError(f"--nproc: --strategy all plans at most {MAX_RANKS:,} ranks, got {args.nproc:,} "
                          "(--strategy grid3d plans more)")
    config = Config.of(model=args.model, model_args=args.model_args, decoupled=args.decoupled, hidden=args.hidden, layers=args.layers,
                    strategy="partition", nproc=args.nproc, data_root=args.data_root,
                    **({"epochs": args.epochs} if args.epochs is not None else {})).resolved()
    methods = _partitioners(args.partitioner)
    limit = parse_bytes(args.device_memory, "device_memory") if args.device_memory else None
    if args.allow_sampling and not args.dataset:
        raise ConfigError("--allow-sampling samples the dataset's own graph: give --dataset, not --nodes/--edges")
    given = [flag for flag, value in (("--fanouts", args.fanouts), ("--batch-size", args.batch_size),
                                      ("--cache-memory", args.cache_memory)) if value is not None]
    if given and not args.allow_sampling:
        raise ConfigError(f"{given[0]} applies with --allow-sampling")
    sampling = Config.of(dataset=args.dataset, data_root=args.data_root, model=args.model,
                         model_args=args.model_args, decoupled=args.decoupled,
                      hidden=args.hidden, layers=args.layers, minibatch=True, strategy="auto", nproc=args.nproc,
                      fanouts=args.fanouts, batch_size=args.batch_size,
                      cache_memory=args.cache_memory).resolved() if args.allow_sampling else None
    if args.dataset:
        from .. import datasets
        graph = datasets.load(args.dataset, root=config.data.data_root)
        graph.require_node_classification()
        widths, options = planned_model(config, graph, args.features, args.classes)
        described = f"{graph.name}, {graph.num_nodes:,} nodes, {graph.adj.nnz:,} adjacency entries"
    else:
        graph = SizedGraph(args.nodes, args.edges)
        widths, options = planned_model(config, None, args.features or DEFAULT_FEATURES,
                                        args.classes or DEFAULT_CLASSES)
        described = (f"a graph of {graph.nodes:,} nodes and {graph.entries:,} adjacency entries, known by its size "
                     "(partition rp: the halos of uniformly spread entries, an upper bound)")
    rates, network = machine(args)
    per_node = min(args.per_node or args.nproc, args.nproc)
    common = dict(epochs=config.training.epochs, memory_limit=limit, partitioners=methods, decoupled=config.model.decoupled,
                  evaluate=args.eval, order=args.order, **options)
    if args.dataset:
        ranking = rank_strategies(graph, args.nproc, config.model.name, widths, rates, network, per_node,
                                  seed=config.training.seed, epsilon=config.partition.epsilon, **common)
    else:
        ranking = rank_sized(graph, args.nproc, config.model.name, widths, rates, network, per_node, **common)
    shown = ranking.ranked[:args.top] if args.top else ranking.ranked
    if args.json and shown:
        write_plan(args.json, "all", [candidate(e) for e in shown])
    nodes = -(-args.nproc // per_node)
    model = f"{'decoupled ' if config.model.decoupled else ''}{config.model.name} {'-'.join(str(w) for w in widths)}"
    if config.model.heads is not None:
        model += f" ({config.model.heads} heads)"
    print(f"plan of every strategy: {described}; {model}{', with evaluation pass' if args.eval else ''}")
    print(f"ranks:   {args.nproc} on {nodes} node{'s' if nodes > 1 else ''} ({per_node} per node)")
    for line in machine_lines(rates, network) + [""]:
        print(line)
    for line in table(ranking, shown) + [""] + dropped(ranking) + [choice(ranking, args.json)]:
        print(line)
    if sampling:
        for line in [""] + _sampled(sampling, graph, widths, options, rates, network, per_node, methods):
            print(line)
    return 0 if ranking.ranked else 1


def _sampled(config: Config, graph, widths, options: dict, rates, network, per_node: int, methods: tuple) -> list:
    """The mini-batch strategies' ranking (``planner.minibatch``) for ``config`` (a resolved
    mini-batch auto job), as printed: the dry run's table of ``train --minibatch --strategy
    auto`` and a choice line. snp and dnp run on the mini-batch default partitioner's
    partition (hp) where it is among ``methods``."""
    default = strategy_default("partitioner")
    method = default if default in methods else methods[0]
    owner, note = None, f"snp and dnp on the {method} partition"
    try:
        owner = partition(graph, config.run.nproc, method, epsilon=config.partition.epsilon, seed=config.training.seed).assignment
    except MissingExtraError as err:
        note = f"snp and dnp not ranked: {err}"
    net = build(widths, config.model.name, False, **options)
    predictions = rank_routes(graph, config.run.nproc, net, rates, network, per_node, fanouts=config.minibatch.fanouts,
                              batch_size=config.minibatch.batch_size, owner=owner, seed=config.training.seed,
                              cache_bytes=config.minibatch.cache_bytes(),
                              attention=config.model.attention)
    best = predictions[0]
    cache = f", a {config.minibatch.cache_memory} feature cache per rank" if config.minibatch.cache_memory else ""
    return ([f"mini-batch strategies (--allow-sampling), ranked apart: fanouts {config.minibatch.fanouts}, "
             f"{config.minibatch.batch_size or 'default'} seeds per batch{cache}; {note}",
             "seconds: one epoch's feature reads and exchanges (APT's dry run); the sampling and the dense "
             "compute, the same for every route, are left out"]
            + dryrun.table_lines(predictions, best.name)
            + [f"mini-batch choice: {best.name} (least predicted feature reading and exchange"
               + (f", {predictions[1].time / best.time:.2f}x less than {predictions[1].name})"
                  if len(predictions) > 1 and best.time > 0 else ")")])


def _partitioners(text) -> tuple:
    """``--partitioner`` for --strategy all: a comma-separated list (default: the ranked ones,
    ``PartitionerSpec.ranked``)."""
    if not text:
        return partitioners.names(ranked=True)
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",")))
    usable = partitioners.names(sampled=False)
    for name in names:
        if name not in usable:
            raise ConfigError(f"--partitioner: {name!r} is not a full-graph partitioner; choose from "
                              f"{', '.join(usable)} (comma-separated)")
    return names


def candidate(estimate) -> Candidate:
    """A candidate's entry in the plan file: its predicted epoch (without setup), the largest
    rank's bytes and peak."""
    return Candidate(estimate.strategy, estimate.epoch_s, max(estimate.rank_bytes), max(estimate.peak_bytes),
                     estimate.dominant)
