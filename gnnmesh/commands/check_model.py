"""``gnnmesh check-model FILE.py:CLASS``: run a model on a small graph as one process and
split among 2 and then 3 ranks under the partition and tensor strategies, from the same
parameters, and print the largest gap between their outputs. A model that draws its own
random numbers or takes statistics over the rows it is given (``F.dropout``, ``torch.rand``,
a batch norm of its own) shows a gap; one written on the view's primitives shows none.

The ranks are real (short-lived local processes, one job per rank count), so what is
checked is what training runs. Exit status 0: exact (every gap at most 1e-5 of the largest
output); 1: not exact; 2: bad input (a refused module, a missing file)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from ..structured import load_json
from .flags import add_config_flags

RANKS = (2, 3)


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("check-model", help="check that a model of your own is exact across ranks")
    cmd.add_argument("model", metavar="FILE.py:CLASS", help="the model, as --model names it")
    add_config_flags(cmd, sections=("data", "model", "training", "run"),
                     only=("model_args", "dataset", "data_root", "seed", "device"),
                     helps={"dataset": "the graph to run it on (default: a small generated one)"})
    cmd.add_argument("--report", help=argparse.SUPPRESS)  # where the ranks of one job leave their gaps
    return cmd


def run(args, argv) -> int:
    from ..launch import launch, world_from_env
    if world_from_env() is not None:  # a rank of a job: check on its ranks
        return _check_in_job(args)
    gaps = []
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "gaps.json")
        for ranks in RANKS:
            status = launch([*argv, "--report", report], ranks)
            if status:
                return status
            with open(report) as fh:
                gaps += load_json(fh)
    return _summary(gaps, args.model)


def _check_in_job(args) -> int:
    from dataclasses import asdict

    from .. import comm, datasets
    from ..config import Config
    from ..train.model_check import model_gaps, small_graph
    from ..train.trainer import rank_device
    settings = {"model": args.model, "model_args": args.model_args, "seed": args.seed, "device": args.device}
    config = Config.of(**{k: v for k, v in settings.items() if v is not None})
    comm.init(rank_device(config.resolved()))
    try:
        graph = datasets.load(args.dataset, root=args.data_root) if args.dataset else None
        if graph is not None:
            graph.require_node_classification()
        graph = graph or small_graph()
        gaps = model_gaps(config, graph)
        if _rank() == 0:
            for gap in gaps:
                print(gap.line())
            if args.report:
                with open(args.report, "w") as fh:
                    json.dump([asdict(g) for g in gaps], fh)
    finally:
        comm.shutdown()
    return 0 if args.report else _summary([asdict(g) for g in gaps], args.model)


def _rank() -> int:
    from ..launch import world_from_env
    return (world_from_env() or (0, 1))[0]


def _summary(records: list, model: str) -> int:
    from ..train.model_check import TOLERANCE, Gap, inexact
    gaps = [Gap(**r) for r in records]
    checked = [g for g in gaps if not g.refused]
    if _rank() != 0:
        return 0 if not inexact(gaps) else 1
    if not checked:
        print(f"{model}: no strategy could run it")
        return 1
    worst = max(checked, key=lambda g: g.largest)
    exact = not inexact(gaps)
    print(f"{model}: largest gap {worst.largest:.1e} ({worst.strategy} x{worst.ranks}): "
          + (f"exact (at most {TOLERANCE:g})" if exact else
             f"NOT exact (more than {TOLERANCE:g}): its forward depends on how the rows are split; "
             "use view.dropout and view.batch_norm, not F.dropout, torch.rand or statistics of its own"))
    return 0 if exact else 1
