"""What the mini-batch trainer (``train.minibatch``) asks of a strategy, beyond ``Strategy``.

A mini-batch strategy holds the whole graph's structure on every rank (``rank_data``), takes its
share of every batch's seeds (``share``), and computes a batch's first layer by a route it
is told to use; every layer after it runs on the rank's own blocks. The trainer calls, in
this order:

* ``rank_data(graph, x, seed, device)``: the whole graph (``Strategy``'s contract);
* ``place(graph, sampling)``: assign vertices to ranks where a route needs it;
* ``choose_route(setup)``: pick the route (``use`` it) and supply the features (a ``FeatureSupply``);
* ``first_layer(model, view, sample, features)`` at every training step;
* ``epoch_counts(mine)``: every rank's feature-read counts of an epoch;

and reads ``rank``, ``world_size``, ``name`` (the route asked for, ``auto`` until ``use``),
``owner`` (every vertex's rank, or None), ``hosts`` (the machines the input features are
spread over) and ``comm`` (a ``Comm`` over the ranks, or None on one process).
``SingleProcessMiniBatch`` is the contract on one process, ``MiniBatchParallel`` on many.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ...sampling import FeatureTier
from ..single import SingleProcess
from .routes import Route, read_and_run


def share(ids: np.ndarray, world: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s share of a batch: a contiguous run, the runs' sizes differing by at most one."""
    n = len(ids)
    return ids[(n * rank) // world:(n * (rank + 1)) // world]


@dataclass
class BatchSetup:
    """What the mini-batch trainer has built when its strategy chooses a route: the resolved
    config, the rank's data, the sampler and model, the sampled operator (its name ``op``),
    the device and the first epoch's batches, which the dry run samples."""

    config: object
    rank_data: object
    sampler: object
    model: torch.nn.Module
    op: str
    operator: object
    device: torch.device
    first_batches: list


@dataclass
class FeatureSupply:
    """Where a rank's input features come from: for training steps and for evaluation."""

    features: FeatureTier
    eval_features: FeatureTier
    predictions: list = field(default_factory=list)  # the dry run's, one per route it priced


class MiniBatchStrategy(ABC):
    """The calls and fields above; a strategy implementing it subclasses it beside ``Strategy``."""

    name: str
    rank: int
    world_size: int
    hosts: int = 1
    owner: Optional[np.ndarray] = None
    comm = None

    @abstractmethod
    def place(self, graph, sampling: dict) -> None:
        """Assign vertices to ranks where the route needs it, the same on every rank.
        ``sampling`` (fanouts, batch size, the training ids and the sampled operator) is what
        a partitioner that samples (``shp``) draws its batches with."""

    @abstractmethod
    def use(self, route: Route) -> None:
        """Run ``route`` (bound) from now on."""

    @abstractmethod
    def choose_route(self, setup: BatchSetup) -> FeatureSupply:
        """Pick the route this strategy runs (``use`` it) and supply the rank's input features."""

    @abstractmethod
    def epoch_counts(self, mine: dict) -> list:
        """Every rank's ``mine`` (an epoch's feature-read counts), in rank order."""

    @abstractmethod
    def first_layer(self, model, view, sample, features) -> torch.Tensor:
        """Layer 1's output (before its activation) for this rank's first-layer destinations of
        ``sample``, its input rows read from ``features`` (a ``FeatureTier``)."""


class SingleProcessMiniBatch(SingleProcess, MiniBatchStrategy):
    """One process: nothing to place, and every step's first layer its own (GDP's route)."""

    def __init__(self):
        self.route = Route(1)

    def place(self, graph, sampling: dict) -> None:
        return None

    def use(self, route: Route) -> None:
        self.route = route

    def choose_route(self, setup: BatchSetup) -> FeatureSupply:
        tier = FeatureTier.local(setup.rank_data.x.cpu(), setup.device)  # every row in this process's memory
        return FeatureSupply(tier, tier)

    def epoch_counts(self, mine: dict) -> list:
        return [mine]

    def first_layer(self, model, view, sample, features) -> torch.Tensor:
        return read_and_run(model, view, sample, features)
