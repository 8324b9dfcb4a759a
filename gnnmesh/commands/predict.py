"""``gnnmesh predict``: the outputs of a trained model (logits, class probabilities, labels or a
layer's embeddings) for every node or a chosen set, or a link model's scores of node pairs
(``--pairs``) and each node's best candidates (``--top-k``), on one process or many, under
any full-graph strategy; written as one part per rank and a manifest (``gnnmesh.predict``)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..settings import SECTIONS, STRATEGY_SECTIONS, flag_name
from .flags import add_config_flags, config_from_args, start_ranks

# What a prediction takes of the settings: the graph, the run, the strategies' settings (the
# model and its training are the checkpoint's).
SECTIONS_READ = ("data", "run") + STRATEGY_SECTIONS
NOT_READ = ("checkpoint", "checkpoint_every", "resume", "metrics", "log_every", "max_restarts", "min_nproc")
HELPS = {"dataset": "the graph to predict on (default: the checkpoint's dataset); another graph of the same "
                    "input width is inductive inference",
         "parts": "predict from a partitioned dataset written by 'gnnmesh partition --write-parts DIR': every "
                  "rank reads only its own folder"}


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("predict", help="write a trained model's outputs for every node")
    cmd.add_argument("--checkpoint", required=True, help="checkpoint written by 'gnnmesh train --checkpoint'")
    cmd.add_argument("--out", required=True, help="output directory (absent, empty, or an earlier prediction)")
    cmd.add_argument("--output", choices=("logits", "probs", "labels", "embeddings"),
                     help="what to write: logits, class probabilities, predicted labels, or embeddings (what the "
                          "model's embed(view, x) returns, else a hidden layer's output; a link model's: the "
                          "encoder's output; default: logits)")
    cmd.add_argument("--layer", type=int, help="--output embeddings: the layer whose output to write, 1 to "
                                               "--layers (default: the last hidden layer)")
    cmd.add_argument("--nodes", default="all", help="which nodes: all, train, val, test, or a file of node ids "
                                                    "(.npy, or text with one id per line; default: all)")
    cmd.add_argument("--node-type", dest="node_type", metavar="NAME",
                     help="a typed graph: the node type whose rows to write, or all (default: the target types); "
                          "every row names its node type and type-local id, and a --nodes file lists type-local "
                          "ids of this type")
    cmd.add_argument("--pairs", metavar="FILE", help="a link model: score the node pairs FILE lists (text, one "
                                                     "source,destination pair a line, commas or spaces, an optional "
                                                     "header), written in the file's order")
    cmd.add_argument("--top-k", dest="top_k", type=int, metavar="K",
                     help="a link model: write each query node's K best candidates among every node and their "
                          "scores, best first (ties: the lower id first)")
    cmd.add_argument("--queries", metavar="FILE", help="--top-k: the query nodes (.npy, or text with one id per "
                                                       "line; default: every node)")
    cmd.add_argument("--exclude-known", dest="exclude_known", action="store_true",
                     help="--top-k: leave out the query itself and its known positives (the edges the model was "
                          "trained on, both ways where the graph is undirected)")
    cmd.add_argument("--link-relation", dest="scored_relation", metavar="RELATION",
                     help="--pairs, --top-k of a link model trained on a typed graph's relations: the relation to "
                          "score (src__name__dst, or name where unambiguous; default: the one it was trained on)")
    cmd.add_argument("--format", dest="fmt", default="npy", choices=("npy", "parquet"),
                     help="the parts' file format (parquet needs gnnmesh[parquet]; default: npy)")
    cmd.add_argument("--weights", default="best", choices=("best", "last"),
                     help="the best-validation epoch's weights (what training reports) or the last epoch's")
    cmd.add_argument("--model", dest="user_model", metavar="FILE.py:CLASS",
                     help="a checkpoint of your own model: its class (FILE.py:CLASS or package.module:CLASS), "
                          "checked against the checkpoint's record of it (default: the file it was trained from, "
                          "where the checkpoint records it, from the checkpoint's directory, the current one, or "
                          "beside the checkpoint)")
    cmd.add_argument("--config", help="TOML file with settings (flags override it; its model settings are "
                                      "the checkpoint's)")
    cmd.add_argument("--quiet", action="store_true", help="print only the summary")
    only = [flag_name(f) for name in SECTIONS_READ for f in fields(SECTIONS[name]) if flag_name(f) not in NOT_READ]
    add_config_flags(cmd, sections=SECTIONS_READ, only=only,
                     helps=HELPS)
    return cmd


def run(args, argv) -> int:
    from .. import checkpoint  # heavy imports only when predicting
    from ..predict.run import Request, with_model
    request = Request(args.checkpoint, args.out, args.output, args.layer, args.nodes, args.fmt, args.weights,
                      args.user_model, args.pairs, args.top_k, args.queries, args.exclude_known, args.node_type,
                      args.scored_relation)
    request.check()
    _full_graph(args.strategy)
    saved = request.saved_config(checkpoint.load(args.checkpoint))
    request.check_model(saved)
    config = with_model(config_from_args(args), saved, args.checkpoint)  # refused before ranks start
    _full_graph(config.run.strategy)
    if "dataset" not in config.given and not config.data.parts:  # given as a flag or in --config
        config = config.updated(dataset=saved.data.dataset)
    launched = start_ranks(config.run.nproc, argv)
    if launched is not None:
        return launched
    from .. import progress
    from ..predict.run import run_prediction
    if args.quiet:
        progress.disable()
    run_prediction(config, request, quiet=args.quiet)
    return 0


def _full_graph(strategy) -> None:
    """A mini-batch strategy trains; predict runs the model over whole neighbourhoods, under a
    full-graph strategy (the config's own check would say to add --minibatch, which predict lacks)."""
    from .. import strategies
    from ..errors import ConfigError
    if strategy in strategies.names("minibatch") and strategy not in strategies.names("full"):
        raise ConfigError(f"--strategy {strategy} trains mini-batches; predict runs the model over the whole "
                          f"graph under any of {', '.join(strategies.names('full'))}, whichever trained it")

