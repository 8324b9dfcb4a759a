"""``gnnmesh plan --strategy all``: every full-graph strategy for a dataset on G ranks, ranked by
the planner's models (``gnnmesh.planner.rank``): 1D partition under each partitioner, tensor
parallelism and every 3D grid, with the candidates a memory limit or the model rules out and why,
and one line naming the choice."""

from __future__ import annotations

from ..config import Config
from ..errors import ConfigError
from ..partition import METHODS, STOCHASTIC_METHODS
from ..planner.explain import choice, dropped, table
from ..planner.rank import PARTITIONERS, rank_strategies
from ..report.plan_file import Candidate, write_plan
from ..train.auto import planned_model
from ..validate import parse_bytes
from .plan import check_flags, machine, machine_lines


def run(args) -> int:
    """The command; the flags are ``plan.py``'s."""
    if not args.dataset:
        raise ConfigError("--strategy all ranks the strategies on a dataset's own graph (its partitions and halos): "
                          "give --dataset, not --nodes/--edges")
    if args.nproc is None:
        raise ConfigError("--nproc G: the number of ranks to rank the strategies for")
    check_flags(args)
    config = Config(dataset=args.dataset, data_root=args.data_root, model=args.model, decoupled=args.decoupled,
                    hidden=args.hidden, layers=args.layers, strategy="partition", nproc=args.nproc,
                    **({"epochs": args.epochs} if args.epochs is not None else {})).resolved()
    methods = _partitioners(args.partitioner)
    limit = parse_bytes(args.device_memory, "device_memory") if args.device_memory else None
    from .. import datasets
    graph = datasets.load(config.dataset, root=config.data_root)
    graph.require_node_classification()
    widths, options = planned_model(config, graph, args.features, args.classes)
    rates, network = machine(args)
    per_node = min(args.per_node or args.nproc, args.nproc)
    ranking = rank_strategies(graph, args.nproc, config.model, widths, rates, network, per_node,
                              epochs=config.epochs, memory_limit=limit, partitioners=methods,
                              decoupled=config.decoupled, evaluate=args.eval, seed=config.seed,
                              epsilon=config.epsilon, order=args.order, **options)
    shown = ranking.ranked[:args.top] if args.top else ranking.ranked
    if args.json and shown:
        write_plan(args.json, "all", [candidate(e) for e in shown])
    nodes = -(-args.nproc // per_node)
    model = f"{'decoupled ' if config.decoupled else ''}{config.model} {'-'.join(str(w) for w in widths)}"
    if config.model == "gat":
        model += f" ({config.heads} heads)"
    print(f"plan of every strategy: {graph.name}, {graph.num_nodes:,} nodes, {graph.adj.nnz:,} adjacency entries; "
          f"{model}{', with evaluation pass' if args.eval else ''}")
    print(f"ranks:   {args.nproc} on {nodes} node{'s' if nodes > 1 else ''} ({per_node} per node)")
    for line in machine_lines(rates, network) + [""]:
        print(line)
    for line in table(ranking, shown) + [""] + dropped(ranking) + [choice(ranking, args.json)]:
        print(line)
    return 0 if ranking.ranked else 1


def _partitioners(text) -> tuple:
    """``--partitioner`` for --strategy all: a comma-separated list (default rp, gp and hp)."""
    if not text:
        return PARTITIONERS
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",")))
    usable = [m for m in METHODS if m not in STOCHASTIC_METHODS]
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
