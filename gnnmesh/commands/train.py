"""``gnnmesh train``: train a GNN on a whole graph (or on sampled mini-batches), on one process or
many; every setting of ``gnnmesh.config`` is a flag."""

from __future__ import annotations

import argparse

from .. import progress
from .flags import add_config_flags, config_from_args, start_ranks


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("train", help="train a GNN on a whole graph")
    cmd.add_argument("--config", help="TOML file with settings (flags override it)")
    cmd.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    cmd.add_argument("--quiet", action="store_true", help="print only the summary")
    cmd.add_argument("--no-check-model", dest="check_model", action="store_false",
                     help="on several ranks, train a model of your own without first checking that it equals the "
                          "single process (see 'gnnmesh check-model')")
    add_config_flags(cmd)
    return cmd


def run(args, argv) -> int:
    config = config_from_args(args)
    if args.print_config:
        print(config.resolved().to_toml(defaults=config.model_defaults_used()), end="")
        return 0
    launched = start_ranks(config.run.nproc, argv, config.run.max_restarts, config.run.min_nproc)
    if launched is not None:
        return launched
    from ..train.run import run_training  # heavy imports only when training
    if args.quiet:
        progress.disable()
    run_training(config, quiet=args.quiet, check_model=args.check_model)
    return 0
