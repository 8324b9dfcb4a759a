"""What every view of ``gnnmesh plan`` reads: the machine's rates (a rates file, a probe or the
nominal GPU figures, with the bandwidth and latency flags on top), the size of a dataset, and the
checks of the flags they share."""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from typing import Optional

from ..errors import ConfigError
from ..planner.machine import GPU_NETWORK, GPU_RATES, ComputeRates, Network, SpMM
from ..planner.rates import MAX_SECONDS, MIN_PER_SECOND, read as read_rates, write as write_rates

DEFAULT_FEATURES, DEFAULT_CLASSES = 128, 10      # for a graph given by its size alone
MAX_RANKS = 1 << 20
# Sizes and widths beyond any graph: their products stay exact in float64 and fit in int64.
MAX_COUNT = 1 << 48


def check_flags(args) -> None:
    """The numeric and machine flags, and that one description of the graph is given."""
    positive = {"--nproc": args.nproc, "--gpus-per-node": args.per_node, "--nodes": args.nodes,
                "--features": args.features, "--hidden": args.hidden, "--classes": args.classes,
                "--layers": args.layers, "--threads": args.threads, "--top": args.top}
    for flag, value in {**positive, "--edges": args.edges}.items():
        if value is not None and value < (0 if flag == "--edges" else 1):
            raise ConfigError(f"{flag} must be >= {0 if flag == '--edges' else 1}, got {value}")
        if value is not None and value > MAX_COUNT:
            raise ConfigError(f"{flag} must be at most {MAX_COUNT:,} (2^48), got {value:,}")
    if args.nproc > MAX_RANKS:  # ranking every grid of more would take minutes and gigabytes
        raise ConfigError(f"--nproc must be at most {MAX_RANKS:,}, got {args.nproc:,}")
    low_bw = MIN_PER_SECOND / 1e9  # the rates file's bounds, in the flags' units
    for flag, value in {"--intra-bw": args.intra_bw, "--inter-bw": args.inter_bw}.items():
        if value is not None and not low_bw <= value < math.inf:
            raise ConfigError(f"{flag} must be a finite number >= {low_bw:g} GB/s, got {value}")
    high_latency = MAX_SECONDS * 1e6
    for flag, value in {"--intra-latency": args.intra_latency, "--inter-latency": args.inter_latency}.items():
        if value is not None and not 0 <= value <= high_latency:
            raise ConfigError(f"{flag} must be a number in [0, {high_latency:g}] microseconds, got {value}")
    sized = args.nodes is not None or args.edges is not None
    if args.dataset and sized:
        raise ConfigError("--dataset and --nodes/--edges describe the graph twice; give one")
    if not args.dataset and (args.nodes is None or args.edges is None):
        raise ConfigError("--dataset, or both --nodes and --edges, must describe the graph")
    if args.probe and args.rates:
        raise ConfigError("--rates and --probe both give the rates; choose one")


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
        if args.device == "auto":
            import torch
            args.device = "cuda" if torch.cuda.is_available() else "cpu"
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
