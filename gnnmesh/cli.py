"""Command line: ``gnnmesh train | datasets``.

Bad input (a malformed graph file, an unknown dataset, an invalid flag or config value)
prints one line ``gnnmesh: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import fields
from typing import Optional

from . import __version__, progress
from .config import CHOICES, Config
from .errors import ConfigError, GraphError
from .launch import (PIPE_CLOSED, die_with_launcher, ignore_stop_signals, launched_rank, restore_signals,
                     say_interrupted, stop_on_signals, stop_signal, world_from_env)

HELP = {
    "dataset": "dataset name (see 'gnnmesh datasets'), generator spec such as "
               "'rmat:nodes=100000,edges=1000000', a graph file or an OGB dataset directory",
    "data_root": "directory holding the datasets (default: $GNNMESH_DATA)",
    "reorder": "renumber nodes for locality before training",
    "parts": "train from a partitioned dataset written by 'gnnmesh partition --write-parts DIR': "
             "every rank reads only its own folder, never the whole graph (without --strategy: "
             "the strategy the parts were written for)",
    "model": "GNN model",
    "hidden": "hidden width (per head for GAT); default: the model's",
    "layers": "number of GNN layers (MLP layers of a decoupled model)",
    "dropout": "feature dropout; default: the model's",
    "heads": "attention heads (GAT hidden layers)",
    "attn_dropout": "attention dropout (GAT)",
    "k": "propagation steps (decoupled)",
    "alpha": "teleport probability (decoupled)",
    "decoupled": "train the decoupled form of the model: its NN layers first, then k propagation "
                 "steps (gcn, sage, gat); under --strategy tensor: one layout switch each way per pass",
    "epochs": "training epochs",
    "lr": "Adam learning rate; default: the model's",
    "weight_decay": "L2 penalty; default: the model's",
    "seed": "random seed (weights, dropout, generated data splits)",
    "eval_every": "evaluate every N epochs",
    "strategy": "parallel strategy; auto: the full-graph strategy the planner predicts fastest for this "
                "job (it prints the ranking first); with --minibatch: gdp, nfp, snp or dnp (how the first layer is "
                "split across ranks), or auto (the one a dry run predicts fastest)",
    "nproc": "number of local processes (ranks) to start; under torchrun leave it out",
    "partitioner": "vertex partitioner for --strategy partition, offload, snp or dnp (default: hp, which "
                   "needs gnnmesh[partitioners]; shp: the stochastic hypergraph of sampled batches, snp/dnp)",
    "epsilon": "--strategy partition: allowed load imbalance of the partition (default: 0.01)",
    "rates": "--strategy auto: plan with the machine rates in this file (from 'gnnmesh plan --save-rates' or "
             "benchmarks/planner.py; default: this machine's, probed once and kept in the cache)",
    "partition_file": "--strategy partition: use this stored partition (from 'gnnmesh partition') "
                      "instead of computing one",
    "chunk_size": "tensor in memory: destination rows per aggregation chunk (default: the "
                  "whole graph in one chunk)",
    "pipeline": "tensor in memory: overlap per-chunk split/gather with aggregation (default: on)",
    "grid": "grid3d: process grid X,Y,Z (product = number of ranks; default: the most cubic "
            "grid; 'gnnmesh plan' ranks every grid by predicted epoch time)",
    "permute": "grid3d: balance the 2D adjacency blocks with a row and a column permutation "
               "(default: on)",
    "blocks": "grid3d: row blocks per aggregation, each block's all-reduce overlapping the next "
              "block's SpMM (default: 1)",
    "device_memory": "offload, tensor with --host-store: the fast tier's budget, e.g. 512MiB or 2GiB (the GPU's memory with "
                     "--device cuda, the process's working memory on CPU; default: 1GiB); auto: each rank's "
                     "memory, candidates predicted to need more are left out (default: no limit)",
    "host_store": "offload: where every layer's vertex data and gradients live: ram (pinned on "
                  "CUDA) or file (one file per layer under --store-dir; default: ram); tensor: "
                  "train out of core with this store (default: in memory); --minibatch with several "
                  "ranks: where input features not in the cache are read from (default: ram)",
    "store_dir": "offload or tensor with --host-store file: directory for the per-layer files; "
                 "--minibatch: for the input features' file",
    "chunks": "offload, tensor with --host-store: chunks of destination rows per rank, or auto: the fewest that fit "
              "--device-memory (default: auto)",
    "intermediates": "offload: cache each layer's aggregation in the host tier and recompute "
                     "only its update (gcn, sage, gin), or recompute whole layers; auto: cache "
                     "where the model allows (default)",
    "dedup": "offload, tensor with --host-store (intra only): load rows shared by a batch's chunks once (inter), keep rows consecutive "
             "chunks share (intra), both, or none (default: both)",
    "reorganize": "offload, tensor with --host-store: regroup and reorder chunks to share more rows (default: on)",
    "minibatch": "train on sampled mini-batches instead of the whole graph (strategies single, gdp, nfp, "
                 "snp, dnp, auto)",
    "bandwidths": "--minibatch with several ranks: the dry run's figures instead of probing them, any of "
                  "load=SIZE,cache=SIZE,net=SIZE,latency=TIME (per second; e.g. load=2GB,net=1GB,latency=50us)",
    "cache_memory": "--minibatch with several ranks: each rank's cache of hot input feature rows, e.g. "
                    "64MiB, chosen from a dry run's access counts (default: no cache)",
    "fanouts": "--minibatch: in-edges sampled per node at each hop, from the seeds outward, -1 for "
               "all (e.g. 25,10; default: 10 per layer)",
    "batch_size": "--minibatch: seed nodes per batch (default: 1024, or the training set if smaller)",
    "eval_fanouts": "--minibatch: fanouts for evaluation (default: all neighbours)",
    "device": "compute device",
    "threads": "compute threads per process (default: torch's choice)",
    "checkpoint": "checkpoint file",
    "checkpoint_every": "write the checkpoint every N epochs (0: only at the end)",
    "resume": "continue from --checkpoint",
    "metrics": "write one JSON object per epoch to this file",
    "log_every": "print progress every N epochs",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2
        self.exit(2, f"gnnmesh: error: {message}\n")


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        kind = _flag_type(f)
        if kind is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=HELP.get(f.name))
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None, choices=CHOICES.get(f.name),
                                help=HELP.get(f.name), metavar=None if f.name in CHOICES else f.name.upper())


def _flag_type(f):
    annotation = str(f.type)
    for name, kind in (("bool", bool), ("int", int), ("float", float)):
        if annotation.replace("Optional[", "").rstrip("]") == name:
            return kind
    return str


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gnnmesh", description="Full-graph GNN training on one process or many.")
    parser.add_argument("--version", action="version", version=f"gnnmesh {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser("train", help="train a GNN on a whole graph")
    train.add_argument("--config", help="TOML file with settings (flags override it)")
    train.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    train.add_argument("--quiet", action="store_true", help="print only the summary")
    _add_config_flags(train)

    data = sub.add_parser("datasets", help="list the datasets and their sizes, or download one")
    data.add_argument("--data-root", dest="data_root", help="directory holding the datasets")
    data.add_argument("--fetch", metavar="NAME",
                      help="download dataset NAME's public upstream files into the data root, "
                           "checked against their pinned sha256 ($GNNMESH_MIRROR replaces "
                           "https://raw.githubusercontent.com in their URLs)")

    from .commands import partition as partition_command, plan as plan_command, report as report_command
    partition_command.add_parser(sub)
    plan_command.add_parser(sub)
    report_command.add_parser(sub)
    return parser


def config_from_args(args) -> Config:
    config = Config.from_toml(args.config) if args.config else Config()
    flags = {f.name: getattr(args, f.name) for f in fields(Config) if getattr(args, f.name) is not None}
    return config.updated(**flags)


def cmd_train(args, argv) -> int:
    config = config_from_args(args)
    if args.print_config:
        print(config.resolved().to_toml(defaults=config.model_defaults_used()), end="")
        return 0
    world = world_from_env()
    if world is None and config.nproc > 1:
        from .launch import launch
        return launch(argv, config.nproc)
    if world is not None and config.nproc > 1 and config.nproc != world[1]:
        raise ConfigError(f"--nproc {config.nproc} but the job has {world[1]} ranks (leave --nproc out under torchrun)")
    from .train.run import run_training  # heavy imports only when training
    if args.quiet:
        progress.disable()
    run_training(config, quiet=args.quiet)
    return 0


def cmd_datasets(args, argv) -> int:
    from . import datasets
    if args.fetch:
        from .datasets.fetch import fetch
        print(fetch(args.fetch, args.data_root))
        return 0
    root = args.data_root or os.environ.get("GNNMESH_DATA")
    if args.data_root and not os.path.isdir(args.data_root):
        raise ConfigError(f"--data-root {args.data_root}: no such directory")
    rows = datasets.available(root)
    print(f"{'name':<16} {'nodes':>10} {'edges':>11} {'features':>9} {'classes':>8}  {'here':<5} description")
    for row in rows:
        here = "yes" if row.present else ("-" if row.present is None else "no")
        print(f"{row.name:<16} {_num(row.nodes):>10} {_num(row.edges):>11} {_num(row.features):>9} "
              f"{_num(row.classes):>8}  {here:<5} {row.description}")
    if root is None:
        print("(no data root: pass --data-root or set GNNMESH_DATA to see which files are present)")
    elif not os.path.isdir(root):
        print(f"(the data root {root} from GNNMESH_DATA does not exist: no files are present)")
    return 0


def cmd_partition(args, argv) -> int:
    from .commands import partition as partition_command
    return partition_command.run(args)


def cmd_plan(args, argv) -> int:
    from .commands import plan as plan_command
    return plan_command.run(args)


def cmd_report(args, argv) -> int:
    from .commands import report as report_command
    return report_command.run(args)


def _num(value) -> str:
    return "-" if value is None else f"{value:,}"


def main(argv: Optional[list] = None) -> int:
    """The program (``argv=None``: the command line's), or one command run in-process."""
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    world = world_from_env()
    if program and (world is None or world[0] == 0):  # the library stays quiet; rank 0 speaks for a job
        progress.enable()
    die_with_launcher()
    previous, formatwarning = stop_on_signals(), warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        if world_from_env() is not None:  # a rank of a distributed job: record failures for the launcher
            from torch.distributed.elastic.multiprocessing.errors import record
            return record(_main)(argv)
        return _main(argv)
    except BaseException:
        signum = stop_signal()
        if signum is None:
            raise
        return _interrupted(128 + signum)
    finally:
        if program:
            ignore_stop_signals()  # the process is ending: see ignore_stop_signals
        else:
            restore_signals(previous)
            warnings.formatwarning = formatwarning


def _interrupted(status: int) -> int:
    say_interrupted()
    return status


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    text = str(message)
    return f"gnnmesh: warning: {text[len('gnnmesh: '):] if text.startswith('gnnmesh: ') else text}\n"


def _main(argv: list) -> int:
    commands = {"train": cmd_train, "datasets": cmd_datasets, "partition": cmd_partition,
                "plan": cmd_plan, "report": cmd_report}
    world = world_from_env()
    speak = world is None or world[0] == 0  # in a job, rank 0 alone reports bad input
    try:
        args = build_parser().parse_args(argv)  # imports torch: seconds in which to be interrupted
        return commands[args.command](args, argv)
    except (GraphError, ConfigError) as err:
        if speak:
            print(f"gnnmesh: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # stdout closed by its reader (e.g. '| head'): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush there
        return PIPE_CLOSED
    except OSError as err:  # e.g. an unwritable --metrics or --checkpoint path
        where = f"{err.filename}: " if err.filename else ""
        if speak:
            print(f"gnnmesh: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM/SIGHUP (see gnnmesh.launch)
        return _interrupted(getattr(err, "exit_status", 130))
    except Exception as err:
        if launched_rank() and _peer_lost(err):  # the launcher names the rank that failed first
            return 1
        raise


def _peer_lost(err: Exception) -> bool:
    """Whether ``err`` is a collective failing because another rank went away."""
    text = str(err).lower()
    return type(err).__name__ in ("DistBackendError", "DistNetworkError", "RuntimeError") and any(
        phrase in text for phrase in ("connection closed by peer", "connection reset by peer",
                                      "broken pipe", "socket closed", "timed out"))


if __name__ == "__main__":
    sys.exit(main())
