"""Whether a model is exact across ranks, found by running it: its outputs under the
partition and tensor strategies on this job's ranks against the single process's, on a
small graph, from the same parameters, in training mode (its draws and batch statistics)
and in eval mode.

The modules known to mix rows are refused when a model is built
(``gnnmesh.models.row_wise``); what only running finds is a functional call in
``forward`` (``F.dropout``, ``torch.rand``, a statistic over the rows it was given). Every
rank of the job calls ``model_gaps``; the single process's outputs are computed on each
rank alone, so they need no other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import comm, datasets
from ..config import Config
from ..errors import ConfigError
from ..parallel.single import SingleProcess
from .trainer import Trainer

CHECKED = ("partition", "tensor")  # the strategies that run any model written on the primitives
SETTINGS = {"partition": {"partitioner": "rp"}}  # a random cut: rows split every way
TOLERANCE = 1e-5  # relative to the largest output: exact, as parity is measured
SMALL_GRAPH = "sbm:nodes=240,classes={classes},features={features}"
SMALL_WIDTHS = {"features": 8, "classes": 3}  # the small graph's, where no dataset gives its own


@dataclass
class Gap:
    """The largest difference from the single process's outputs under ``strategy`` on
    ``ranks`` ranks (relative to the largest output), or why the strategy refused the model."""
    strategy: str
    ranks: int
    training: float = 0.0
    eval: float = 0.0
    refused: str = ""

    @property
    def largest(self) -> float:
        return max(self.training, self.eval)

    def line(self) -> str:
        where = f"{self.strategy} x{self.ranks}"
        if self.refused:
            return f"{where}: not checked ({self.refused})"
        return f"{where}: largest gap {self.training:.1e} in training, {self.eval:.1e} in eval"


def small_graph(features: int = SMALL_WIDTHS["features"], classes: int = SMALL_WIDTHS["classes"]):
    """A small generated graph whose inputs and classes have the given widths."""
    return datasets.load(SMALL_GRAPH.format(features=features, classes=max(classes, 2)))


def model_gaps(config: Config, graph) -> list:
    """A ``Gap`` per strategy of ``CHECKED`` for the model ``config`` names (with its
    ``model_args``, ``seed`` and ``device``) on ``graph``, on this job's ranks."""
    settings = {"model": config.model.name, "model_args": config.model.args, "seed": config.training.seed,
                "device": config.run.device, "epochs": 1}
    reference = _outputs(Config.of(**settings), graph, SingleProcess())
    ranks = comm.world_size()
    gaps = []
    for strategy in CHECKED:
        try:
            ids, training, evaluated = _outputs(Config.of(strategy=strategy, **settings, **SETTINGS.get(strategy, {})),
                                                graph)
        except ConfigError as refusal:  # its contract, or a primitive it cannot run
            gaps.append(Gap(strategy, ranks, refused=str(refusal)))
            continue
        mine = [_gap(training, reference[1][ids]), _gap(evaluated, reference[2][ids])]
        everyone = comm.setup_comm().all_gather_object(mine)
        gaps.append(Gap(strategy, ranks, max(g[0] for g in everyone), max(g[1] for g in everyone)))
    return gaps


def _outputs(config: Config, graph, strategy=None) -> tuple:
    """(global ids of this rank's rows, their outputs in training mode, then in eval mode),
    each forward pass from the same torch random state."""
    torch.manual_seed(config.training.seed)
    trainer = Trainer(config, graph, strategy=strategy)
    mine, model = trainer.rank_data, trainer.model
    out = []
    with torch.no_grad():
        for training in (True, False):
            model.train(training)
            mine.view.set_epoch(1)
            torch.manual_seed(config.training.seed + 1)
            out.append(trainer.strategy.forward(model, mine.view, mine.x).float().cpu())
    return (mine.row_ids().cpu(), *out)


def _gap(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.shape != want.shape:
        return float("inf")
    if not got.numel():
        return 0.0
    scale = max(float(want.abs().max()), 1.0)
    return float((got - want).abs().max()) / scale


def check_before_training(config: Config, features: int, classes: int) -> list:
    """``model_gaps`` of ``config``'s model, built for ``features`` inputs and ``classes``
    outputs, on a small graph of those widths; a ConfigError (``problem``) if it is not exact."""
    gaps = model_gaps(config, small_graph(features, classes))
    line = problem(gaps, config.model.name)
    if line:
        raise ConfigError(line)
    return gaps


def inexact(gaps: list) -> list:
    """The gaps past ``TOLERANCE``."""
    return [g for g in gaps if not g.refused and not g.largest <= TOLERANCE]


def problem(gaps: list, model: str) -> str:
    """The one line that refuses ``model`` for its gaps ('' when it is exact)."""
    bad = inexact(gaps)
    if not bad:
        return ""
    worst = max(bad, key=lambda g: g.largest)
    return (f"config field 'model' ({model}): its outputs under {worst.strategy} x{worst.ranks} differ from the "
            f"single process's by up to {worst.largest:.1e} (relative; exact is {TOLERANCE:g}): something in its "
            "forward depends on how the rows are split (F.dropout, torch.rand, a statistic over rows); use "
            "view.dropout and view.batch_norm ('gnnmesh check-model' shows the gaps; --no-check-model trains anyway)")
