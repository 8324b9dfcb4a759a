"""``gnnmesh plan``: rank every full-graph strategy for G ranks by predicted epoch time
(``--strategy all``, the default: ``plan_all.py``), every X x Y x Z grid of 3D-parallel GCN
training in detail (``--strategy grid3d``, here: ``gnnmesh.planner.grid3d``), or one rank's
out-of-core plan (``--strategy offload``: ``plan_offload.py``), for this machine or one
described by flags."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from typing import Optional

from ..atomic import check_writable
from ..errors import ConfigError
from ..layout.grid import AXES, RANK_ORDER, WORLD, rank_orders
from . import plan_offload
from ..planner.grid3d import Workload, payload_bytes, rank_grids
from ..planner.machine import GPU_NETWORK, GPU_RATES, ComputeRates, Network, SpMM
from ..planner.estimate import name_of
from ..planner.explain import choice, significant
from ..planner.rank import Ranking, grid3d_estimate
from ..planner.rates import read as read_rates, write as write_rates
from ..report.plan_file import Candidate, write_plan

DEFAULT_HIDDEN, DEFAULT_LAYERS = 16, 2           # the train command's GCN defaults
DEFAULT_FEATURES, DEFAULT_CLASSES = 128, 10      # for a graph given by its size alone


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("plan", help="rank the parallel strategies for a graph and a number of ranks "
                                "by predicted epoch time")
    cmd.add_argument("--strategy", choices=("all", "grid3d", "offload"), default="all",
                     help="what to plan (default all: every full-graph strategy, partition under each "
                          "partitioner, tensor, every grid3d grid, ranked; grid3d: every grid in detail; "
                          "offload: the out-of-core plan of one rank)")
    cmd.add_argument("--nproc", type=int, metavar="G", help="number of ranks (GPUs) G (offload: default 1)")
    cmd.add_argument("--gpus-per-node", "--nodes-per-host", dest="per_node", type=int, metavar="K",
                     help="ranks per node (default: all G on one node)")
    graph = cmd.add_argument_group("graph and model (a dataset, or its size)")
    graph.add_argument("--dataset", metavar="NAME", help="dataset name, generator spec or graph file (grid3d sizes "
                       "R-MAT specs without generating them)")
    graph.add_argument("--data-root", dest="data_root", metavar="DIR", help="directory holding the datasets "
                       "(default: $GNNMESH_DATA)")
    graph.add_argument("--nodes", type=int, metavar="N", help="number of nodes")
    graph.add_argument("--edges", type=int, metavar="E", help="stored adjacency entries (an undirected edge "
                       "counts twice); self-loops are added")
    graph.add_argument("--features", type=int, metavar="F", help="input width (default: the dataset's, "
                       f"else {DEFAULT_FEATURES})")
    graph.add_argument("--hidden", type=int, metavar="H",
                       help=f"hidden width (default: grid3d {DEFAULT_HIDDEN}, offload the model's)")
    graph.add_argument("--classes", type=int, metavar="C", help="output width (default: the dataset's, "
                       f"else {DEFAULT_CLASSES})")
    graph.add_argument("--layers", type=int, default=DEFAULT_LAYERS, metavar="L",
                       help=f"GCN layers (default {DEFAULT_LAYERS})")
    graph.add_argument("--eval", action=argparse.BooleanOptionalAction, default=True,
                       help="count the evaluation pass the trainer runs every epoch (default: yes)")
    rates = cmd.add_argument_group("machine (default: a nominal GPU cluster; see --probe)")
    rates.add_argument("--intra-bw", dest="intra_bw", type=float, metavar="GBps",
                       help="bandwidth of a rank within its node, GB/s (1e9 bytes/s)")
    rates.add_argument("--inter-bw", dest="inter_bw", type=float, metavar="GBps",
                       help="injection bandwidth of a node, shared by its ranks, GB/s")
    rates.add_argument("--intra-latency", dest="intra_latency", type=float, metavar="US",
                       help="latency per message step within a node, microseconds")
    rates.add_argument("--inter-latency", dest="inter_latency", type=float, metavar="US",
                       help="latency per message step between nodes, microseconds")
    rates.add_argument("--probe", action="store_true",
                       help="measure SpMM/GEMM rates and all-reduce bandwidth on this machine "
                            "(a few seconds); bandwidth flags still override")
    rates.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="device to probe")
    rates.add_argument("--threads", type=int, metavar="N", help="compute threads per rank for the probe")
    rates.add_argument("--rates", metavar="FILE", help="read rates from this JSON file (see --save-rates)")
    rates.add_argument("--save-rates", dest="save_rates", metavar="FILE", help="write the rates used to this JSON file")
    cmd.add_argument("--rank-order", dest="order", choices=rank_orders(), default=RANK_ORDER,
                     help=f"grid axes from slowest to fastest varying rank number (default {RANK_ORDER}, "
                          "the grid3d strategy's)")
    cmd.add_argument("--top", type=int, metavar="N", help="show only the best N candidates")
    cmd.add_argument("--json", metavar="FILE", help="also write the ranked candidates to FILE as JSON "
                     "(what 'gnnmesh report --plan' draws)")
    plan_offload.add_arguments(cmd)
    every = cmd.add_argument_group("every strategy (--strategy all; also --model, --decoupled, --device-memory, "
                                   "--partitioner)")
    every.add_argument("--epochs", type=int, metavar="E", help="epochs the partitioning time is spread over "
                       "in the ranking (default: the train command's, 200)")
    every.add_argument("--allow-sampling", dest="allow_sampling", action="store_true",
                       help="also rank the mini-batch strategies (gdp, nfp, snp, dnp), apart: a sampled epoch "
                            "does other work than a full-graph one")
    every.add_argument("--fanouts", metavar="F1,F2,...", help="with --allow-sampling: neighbours sampled per hop "
                       "(default 10 per layer)")
    every.add_argument("--batch-size", dest="batch_size", type=int, metavar="B",
                       help="with --allow-sampling: seeds per batch (default 1024, at most the training set)")
    every.add_argument("--cache-memory", dest="cache_memory", metavar="SIZE",
                       help="with --allow-sampling: each rank's cache of hot feature rows (default none)")
    return cmd


def run(args) -> int:
    if args.json:  # fail before planning, which may load a dataset or probe the machine
        check_writable(args.json, "plan file")
    if args.strategy == "offload":
        args.hidden_given = args.hidden is not None
        return plan_offload.run(args)
    if args.strategy == "all":
        from . import plan_all
        return plan_all.run(args)
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


MAX_RANKS = 1 << 20


def check_flags(args) -> None:
    """The numeric and machine flags, and that one description of the graph is given."""
    positive = {"--nproc": args.nproc, "--gpus-per-node": args.per_node, "--nodes": args.nodes,
                "--features": args.features, "--hidden": args.hidden, "--classes": args.classes,
                "--layers": args.layers, "--threads": args.threads, "--top": args.top}
    for flag, value in positive.items():
        if value is not None and value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
    if args.nproc > MAX_RANKS:  # ranking every grid of more would take minutes and gigabytes
        raise ConfigError(f"--nproc must be at most {MAX_RANKS:,}, got {args.nproc:,}")
    for flag, value in {"--intra-bw": args.intra_bw, "--inter-bw": args.inter_bw}.items():
        if value is not None and not value > 0:
            raise ConfigError(f"{flag} must be > 0 GB/s, got {value}")
    for flag, value in {"--intra-latency": args.intra_latency, "--inter-latency": args.inter_latency}.items():
        if value is not None and not value >= 0:
            raise ConfigError(f"{flag} must be >= 0 microseconds, got {value}")
    if args.edges is not None and args.edges < 0:
        raise ConfigError(f"--edges must be >= 0, got {args.edges}")
    sized = args.nodes is not None or args.edges is not None
    if args.dataset and sized:
        raise ConfigError("--dataset and --nodes/--edges describe the graph twice; give one")
    if not args.dataset and (args.nodes is None or args.edges is None):
        raise ConfigError("--dataset, or both --nodes and --edges, must describe the graph")
    if args.probe and args.rates:
        raise ConfigError("--rates and --probe both give the rates; choose one")


# ---------------------------------------------------------------------------- inputs

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


def graph_size(dataset: str, data_root: Optional[str]) -> tuple:
    """(name, nodes, stored entries, input width, classes) of a dataset. R-MAT specs are
    sized from their options (a billion-edge spec is planned, not generated); anything
    else is loaded (through the dataset cache)."""
    from .. import datasets
    from ..datasets.generators import RMAT_OPTIONS, rmat_size
    from ..datasets.options import COMMON, parse_spec, resolve

    head, spec = parse_spec(dataset)
    if head.lower() == "rmat":
        o = resolve({**COMMON, **RMAT_OPTIONS}, spec, "rmat")
        nodes, edges = rmat_size(o["scale"], o["nodes"], o["edges"], o["edge_factor"])
        entries = edges * (2 if o["undirected"] else 1)
        features = o["features"] or (1 if o["undirected"] else 2)   # degree features otherwise
        return dataset, nodes, entries, features, o["classes"]
    graph = datasets.load(dataset, root=data_root)
    features = graph.num_features or (2 if graph.directed else 1)
    return graph.name, graph.num_nodes, graph.num_edges, features, graph.num_classes


def machine(args) -> tuple:
    """(ComputeRates, Network): from --rates, --probe or the nominal GPU figures, then the
    bandwidth and latency flags on top; written to --save-rates if given."""
    if args.rates:
        rates, network = read_rates(args.rates)
    elif args.probe:
        from ..planner.probe import probe_compute, probe_network
        if args.device == "cuda":
            import torch
            if not torch.cuda.is_available():
                raise ConfigError("--device cuda: no GPU is visible to probe")
        # one node's ranks, but no more processes than cores: the probe should see links, not queues
        ranks = max(2, min(args.nproc, args.per_node or args.nproc, os.cpu_count() or 2))
        rates, network = probe_compute(args.device, args.threads), probe_network(ranks, args.device)
    else:
        rates, network = GPU_RATES, GPU_NETWORK
    given = {"intra_bw": _si(args.intra_bw, 1e9), "inter_bw": _si(args.inter_bw, 1e9),
             "intra_latency": _si(args.intra_latency, 1e-6), "inter_latency": _si(args.inter_latency, 1e-6)}
    given = {k: v for k, v in given.items() if v is not None}
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        source = "given" if len(given) == 4 else f"{network.source} with {flags}"
        network = Network(**{**asdict(network), **given, "source": source})
    if args.save_rates:
        write_rates(args.save_rates, rates, network)
    return rates, network


def _si(value, unit):
    return None if value is None else value * unit


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


def machine_lines(rates: ComputeRates, network: Network) -> list:
    """The header's compute and network lines."""
    return [
        f"compute: {rates.source}: SpMM {_gflops(rates, 128):.1f} GFLOP/s at width 128, "
        f"{_gflops(rates, 8):.1f} at width 8; GEMM {rates.gemm_flops / 1e9:.1f} GFLOP/s",
        f"network: {network.source}: intra-node {network.intra_bw / 1e9:.3g} GB/s, "
        f"inter-node {network.inter_bw / 1e9:.3g} GB/s per node; latency "
        f"{network.intra_latency * 1e6:.3g} / {network.inter_latency * 1e6:.3g} us",
    ]


def _gflops(rates: ComputeRates, width: int) -> float:
    """SpMM speed on a large square block with 16 nonzeros per row, for the header."""
    rows = 1 << 20
    op = SpMM(rows, rows, 16 * rows, width)
    return 2.0 * op.nnz * width / rates.spmm(op) / 1e9


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
