"""The contract between the trainer and a parallel strategy (``Strategy``), and what a rank
trains on (``RankData``; ``Shard`` is its former name, kept as a deprecated alias)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Optional

import torch

from .. import memory
from ..errors import ConfigError
from ..graph import Graph
from ..view import GraphView


@dataclass
class RankData:
    """What one rank trains on: its GraphView and the rows of vertex data it owns. ``ids``:
    the global ids of the rows of its labels, masks and outputs, where they are not the
    view's own rows (``GraphView.rows``)."""

    view: GraphView
    x: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor
    ids: Optional[torch.Tensor] = None

    def row_ids(self) -> torch.Tensor:
        """Global ids of the rows of this rank's labels, masks and the strategy's output."""
        if self.ids is not None:
            return self.ids
        rows = self.view.rows()
        return torch.arange(rows.start, rows.stop) if isinstance(rows, range) else torch.as_tensor(rows)


class Strategy:
    """Base class. A strategy decides which rows of the graph and vertex data a rank holds
    (``rank_data``), how the graph primitives run across ranks (its GraphView), and how dense
    parameters and metrics agree across ranks (``sync_gradients``, ``all_reduce``)."""

    name = "base"
    rank = 0
    world_size = 1
    holds_memory_budget = False  # whether it keeps its resident memory within a budget it plans
    # whether ``forward`` gives every row of the rank at once, differentiable; a strategy that
    # gives them a chunk at a time (``train_loss``, ``evaluate_rows``) sets it False
    outputs_at_once = True

    def rank_data(self, graph: Graph, x: torch.Tensor, seed: int, device) -> RankData:
        """What this rank trains on of ``graph`` and its features ``x``."""
        former = getattr(self, "shard", None)  # a strategy written against the former name
        if former is None:
            raise NotImplementedError
        warnings.warn(f"strategy '{self.name}': 'shard' is now named 'rank_data'", DeprecationWarning, stacklevel=2)
        return former(graph, x, seed, device)

    def rank_data_from_parts(self, parts, seed: int, device) -> RankData:
        """The same as ``rank_data``, read from this rank's folder of a parts directory
        (``gnnmesh.parts``) without ever holding the whole graph."""
        raise ConfigError(f"strategy '{self.name}' cannot train from --parts")

    def input_rows(self, data: RankData):
        """This rank's rows of model input as learned embeddings change them
        (``gnnmesh.parallel.input_rows``); called once the rank's data is made, before
        ``prepare``. A strategy that cannot give its input a gradient refuses in one line."""
        raise ConfigError(f"strategy '{self.name}' cannot learn input embeddings (--embed-dim); use partition, "
                          "tensor, offload, the mini-batch strategies or one process")

    def prepare(self, model: torch.nn.Module) -> None:
        """Plan what depends on the model (called once it is built, before training)."""

    def dry_run_lines(self) -> list:
        """What the strategy predicted of its own choices before training (a table's lines,
        printed under the run's header), if it made any."""
        return []

    def agree_parameters(self, model: torch.nn.Module) -> None:
        """Give every rank rank 0's parameters and buffers (a model the caller built under a
        torch seed of each rank's own starts out different on each)."""

    def forward(self, model: torch.nn.Module, view: GraphView, x: torch.Tensor) -> torch.Tensor:
        """The model's output for this rank's rows. Strategies that change the data layout
        between a model's stages (tensor with a decoupled model, grid3d) override this."""
        return model(view, x)

    def train_loss(self, model: torch.nn.Module, view: GraphView, x: torch.Tensor, loss_of) -> torch.Tensor:
        """This rank's part of the training loss: ``loss_of(logits, rows)`` of the logits of
        its rows ``rows`` (a slice of them). Out of core, the logits come chunk by chunk and the
        chunks' terms are summed; here, all rows at once."""
        return loss_of(self.forward(model, view, x), slice(None))

    def evaluate_rows(self, model: torch.nn.Module, view: GraphView, x: torch.Tensor, add) -> None:
        """``add(logits, rows)`` for this rank's rows, all at once or a slice at a time."""
        add(self.forward(model, view, x), slice(None))

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks (in place) and return it."""
        return tensor

    def metrics_comm(self):
        """The ``Comm`` over the ranks whose rows ``all_reduce`` sums (the metrics that are not
        sums, such as ROC-AUC, talk over it too); None where this process holds every row."""
        return None

    def sync_gradients(self, model: torch.nn.Module) -> None:
        """Make every rank's parameter gradients equal the full-graph gradient."""

    def reset_counters(self) -> None:
        """Forget traffic so far (setup); the next ``report`` covers only what follows."""

    def report(self, epoch_time: float, peaks: dict) -> dict:
        """Per-epoch extra figures (every rank's peak memory; communication, per-rank times).
        Called once per epoch on every rank (it may communicate) with this rank's epoch time
        and ``memory.rank_peaks``."""
        return memory.fields([peaks])

    def report_lines(self, extra: dict) -> list:
        """Human-readable lines for an epoch's ``report()``."""
        return []

    def describe(self) -> str:
        return self.name


def __getattr__(name: str):
    """``Shard``, the former name of ``RankData``, still imports (with a DeprecationWarning)."""
    if name == "Shard":
        warnings.warn("gnnmesh.parallel.Shard is now named RankData", DeprecationWarning, stacklevel=2)
        return RankData
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
