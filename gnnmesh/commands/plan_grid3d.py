"""``gnnmesh plan --strategy grid3d``: every X x Y x Z grid of 3D-parallel GCN training for G
ranks, ranked by the performance model (``gnnmesh.planner.grid3d``), with each grid's compute and
communication per group of ranks."""

from __future__ import annotations

from ..errors import ConfigError
from ..layout.grid import AXES, WORLD
from ..planner.estimate import name_of
from ..planner.explain import choice, significant
from ..planner.grid3d import Workload, grid3d_estimate, payload_bytes, rank_grids
from ..planner.machine import ComputeRates, Network
from ..planner.rank import Ranking
from ..report.plan_file import Candidate, write_plan
from .plan_inputs import DEFAULT_CLASSES, DEFAULT_FEATURES, check_flags, graph_size, machine, machine_lines

DEFAULT_HIDDEN = 16           # the train command's GCN default


def run(args) -> int:
    """Every grid for ``args.nproc`` ranks in detail (the flags are ``plan.py``'s)."""
    if args.epochs is not None:
        raise ConfigError("--epochs applies to --strategy all (it spreads partitioning time over the run)")
    for flag, value in {"--allow-sampling": args.allow_sampling or None, "--fanouts": args.fanouts,
                        "--batch-size": args.batch_size, "--cache-memory": args.cache_memory}.items():
        if value is not None:
            raise ConfigError(f"{flag} applies to --strategy all (the mini-batch strategies ranked apart)")
    if args.nproc is None:
        raise ConfigError("--nproc G: the number of ranks to plan grids for")
    args.hidden = args.hidden or DEFAULT_HIDDEN
    check_flags(args)
    name, work = workload(args)
    rates, network = machine(args)
    per_node = min(args.per_node or args.nproc, args.nproc)
    ranked = rank_grids(work, args.nproc, rates, network, per_node, args.order)
    shown = ranked[:args.top] if args.top else ranked
    if args.json:
        write_plan(args.json, "grid3d", [candidate(p, work) for p in shown])
    for line in header(name, work, args.nproc, per_node, args.order, rates, network):
        print(line)
    for line in table(shown):
        print(line)
    print(choice(Ranking(tuple(grid3d_estimate(work, p) for p in ranked), (), 1)))
    return 0


def candidate(prediction, work: Workload) -> Candidate:
    """A grid's entry in the plan file; ``dominant`` names its largest term."""
    terms = {"spmm": prediction.spmm, "dense": prediction.dense,
             **{f"comm {group}": t for group, t in prediction.comm.items()}}
    return Candidate(name_of("grid3d", grid=prediction.grid), prediction.total, payload_bytes(work, prediction.grid),
                     None, max(terms, key=terms.get))  # the model does not predict memory


def workload(args) -> tuple:
    """(a name for the graph, the Workload) from the graph and model flags."""
    if args.dataset:
        name, nodes, entries, features, classes = graph_size(args.dataset, args.data_root)
    else:
        name, nodes, entries, features, classes = "graph", args.nodes, args.edges, None, None
    features = args.features or features or DEFAULT_FEATURES
    classes = args.classes or classes or DEFAULT_CLASSES
    return name, Workload.gcn(nodes, entries, features, args.hidden, classes, args.layers,
                              evaluate=args.eval)


# ---------------------------------------------------------------------------- output

def header(name: str, work: Workload, world: int, per_node: int, order: str, rates: ComputeRates,
           network: Network) -> list:
    nodes = -(-world // per_node)
    widths = "-".join(str(w) for w in work.widths)
    return [
        f"grid3d plan: {world} ranks on {nodes} node{'s' if nodes > 1 else ''} ({per_node} per node), "
        f"rank order {order} ({order[-1].upper()} fastest)",
        f"graph:   {name}, {work.nodes:,} nodes, {work.nnz:,} adjacency entries with self-loops; "
        f"GCN {widths}{', with evaluation pass' if work.evaluate else ''}",
        *machine_lines(rates, network),
        "",
    ]


def _ms(seconds: float) -> str:
    return significant(seconds * 1e3)


def table(ranked: list) -> list:
    groups = AXES + (WORLD,)
    lines = [f"{'rank':>4}  {'grid XxYxZ':<14} {'total ms':>11} {'compute ms':>11} {'comm ms':>11}   "
             f"comm {' / '.join(groups)} (ms)"]
    for i, p in enumerate(ranked, 1):
        split = " / ".join(_ms(p.comm[g]) for g in groups)
        lines.append(f"{i:>4}  {str(p.grid):<14} {p.total * 1e3:>11.3f} {p.compute * 1e3:>11.3f} "
                     f"{p.communication * 1e3:>11.3f}   {split}")
    return lines
