"""``gnnmesh plan``: rank every full-graph strategy for G ranks by predicted epoch time
(``--strategy all``, the default: ``plan_all.py``), or one strategy's plan in detail, for this
machine or one described by flags: every grid of 3D-parallel training (``--strategy grid3d``:
``plan_grid3d.py``) or one rank's out-of-core plan (``--strategy offload``: ``plan_offload.py``).
Which strategies have a detailed view is the registry's word (``StrategySpec.plan_view``); the
settings the plan shares with training take their flags from the same fields
(``commands.flags``)."""

from __future__ import annotations

import argparse

from .. import strategies
from ..atomic import check_writable
from ..layout.grid import RANK_ORDER, rank_orders
from . import plan_all
from .flags import add_config_flags
from .plan_inputs import DEFAULT_CLASSES, DEFAULT_FEATURES


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("plan", help="rank the parallel strategies for a graph and a number of ranks "
                                "by predicted epoch time")
    views = ", ".join(f"{name}: its plan in detail" for name in detailed())
    cmd.add_argument("--strategy", choices=("all",) + detailed(), default="all",
                     help=f"what to plan (default all: every full-graph strategy, partition under each "
                          f"partitioner, tensor, every 3D grid, ranked; {views})")
    cmd.add_argument("--nproc", type=int, metavar="G", help="number of ranks (GPUs) G (offload: default 1)")
    cmd.add_argument("--gpus-per-node", "--nodes-per-host", dest="per_node", type=int, metavar="K",
                     help="ranks per node (default: all G on one node)")
    graph = cmd.add_argument_group("graph and model (a dataset, or its size)")
    add_config_flags(graph, only=("dataset", "data_root", "hidden"),
                     helps={"hidden": "hidden width (default: grid3d 16, offload the model's)"})
    add_config_flags(graph, only=("model", "decoupled", "layers"), defaults=True)
    add_config_flags(graph, only=("model_args",))
    graph.add_argument("--nodes", type=int, metavar="N", help="number of nodes")
    graph.add_argument("--edges", type=int, metavar="E", help="stored adjacency entries (an undirected edge "
                       "counts twice); self-loops are added")
    graph.add_argument("--features", type=int, metavar="F", help="input width (default: the dataset's, "
                       f"else {DEFAULT_FEATURES})")
    graph.add_argument("--classes", type=int, metavar="C", help="output width (default: the dataset's, "
                       f"else {DEFAULT_CLASSES})")
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
    add_config_flags(rates, only=("device",), defaults=True, helps={"device": "device to probe"})
    add_config_flags(rates, only=("threads", "rates"),
                     helps={"threads": "compute threads per rank for the probe",
                            "rates": "read rates from this JSON file (see --save-rates)"})
    rates.add_argument("--save-rates", dest="save_rates", metavar="FILE", help="write the rates used to this JSON file")
    cmd.add_argument("--rank-order", dest="order", choices=rank_orders(), default=RANK_ORDER,
                     help=f"grid axes from slowest to fastest varying rank number (default {RANK_ORDER}, "
                          "the grid3d strategy's)")
    cmd.add_argument("--top", type=int, metavar="N", help="show only the best N candidates")
    cmd.add_argument("--json", metavar="FILE", help="also write the ranked candidates to FILE as JSON "
                     "(what 'gnnmesh report --plan' draws)")
    every = cmd.add_argument_group("every strategy (--strategy all) and the out-of-core plan")
    every.add_argument("--partitioner", default=None, help="the partitioners to rank, comma-separated (default "
                       "rp,gp,hp); --strategy offload: the vertex partitioner for several ranks (default hp)")
    add_config_flags(every, only=("epochs",), helps={"epochs": "epochs the partitioning time is spread over in "
                                                      "the ranking (default: the train command's, 200)"})
    add_config_flags(every, only=("device_memory",), helps={"device_memory": "each rank's memory: candidates "
                     "predicted to need more are left out; --strategy offload: the fast tier's budget (required)"})
    add_config_flags(every, only=("chunks", "dedup", "intermediates", "reorganize"), defaults=True)
    add_config_flags(every, only=("overlap",), helps={"overlap": "--strategy offload: plan for transfers that "
                     "overlap compute, as training with --device cuda runs them (default: off, as on CPU)"})
    sampled = cmd.add_argument_group("mini-batch strategies (--allow-sampling, ranked apart)")
    sampled.add_argument("--allow-sampling", dest="allow_sampling", action="store_true",
                         help="also rank the mini-batch strategies, apart: a sampled epoch does other work than "
                              "a full-graph one")
    add_config_flags(sampled, only=("fanouts", "batch_size", "cache_memory"))
    return cmd


def run(args, argv=None) -> int:
    if args.json:  # fail before planning, which may load a dataset or probe the machine
        check_writable(args.json, "plan file")
    if args.strategy == "all":
        return plan_all.run(args)
    return strategies.load(strategies.spec(args.strategy).plan_view)(args)


def detailed() -> tuple:
    """The strategies with a detailed plan of their own."""
    return tuple(name for name in strategies.names() if strategies.spec(name).plan_view)
