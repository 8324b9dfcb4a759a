"""The planner-model protocol: what every strategy's planner model is given, and what it gives.

A strategy's ``StrategySpec.planner`` names a function ``(job: PlanJob) -> list`` that returns
its candidates for the job: ``Estimate``s (``estimate.py``), and a ``Dropped`` for each
candidate it cannot price or run, with the reason. A model decides for itself where it
applies: one whose strategy splits nothing but runs on one rank returns nothing for several
ranks, and so on. ``rank.rank_strategies`` asks every registered full-graph strategy's model
and puts their candidates side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from ..layout.grid import RANK_ORDER
from ..partition import MissingExtraError, partition
from ..partition.base import RANKED_METHODS
from .machine import ComputeRates, Network
from .sized import SizedGraph


@dataclass(frozen=True)
class Dropped:
    """A candidate left out of the ranking, and why."""
    name: str
    reason: str


@dataclass(frozen=True)
class PlanJob:
    """One ranking's question: ``model`` (``decoupled``: its decoupled form; ``options``: its
    constructor's, e.g. ``heads``, ``k``) with ``widths`` (input, hidden..., classes) on
    ``graph`` (a loaded Graph, or a ``SizedGraph`` known by its size) over ``ranks`` ranks,
    ``ranks_per_node`` to a node (None: one node), on the machine ``rates`` and ``network``.
    ``memory_limit``: bytes per rank (None: no limit); ``partitioners``: the methods the
    partitioned strategies rank (``epsilon``, ``seed`` and the store: ``cache``,
    ``cache_dir``); ``order``: the grid axes' rank order; ``evaluate``: count the evaluation
    pass; ``inference``: price one inference pass instead of an epoch."""

    graph: object
    ranks: int
    model: str
    widths: tuple
    rates: ComputeRates
    network: Network
    ranks_per_node: Optional[int] = None
    memory_limit: Optional[int] = None
    partitioners: tuple = RANKED_METHODS
    decoupled: bool = False
    evaluate: bool = True
    inference: bool = False
    seed: int = 0
    epsilon: float = 0.01
    cache: bool = True
    cache_dir: Optional[str] = None
    order: str = RANK_ORDER
    options: dict = field(default_factory=dict)

    @property
    def sized(self) -> bool:
        """Whether the graph is known by its size alone (no structure to partition)."""
        return isinstance(self.graph, SizedGraph)

    @property
    def nodes(self) -> int:
        return self.graph.nodes if self.sized else getattr(self.graph, "adj", self.graph).shape[0]

    @property
    def model_args(self) -> dict:
        """The keyword arguments every model's ``estimate`` takes for the model's form."""
        return dict(decoupled=self.decoupled, inference=self.inference, **self.options)

    @cached_property
    def partitions(self) -> tuple:
        """(method, Partition or the MissingExtraError that kept it from running) for each of
        ``partitioners``, computed once for every model that prices a partition."""
        out = []
        for method in self.partitioners:
            try:
                out.append((method, partition(self.graph, self.ranks, method, epsilon=self.epsilon, seed=self.seed,
                                              cache=self.cache, cache_dir=self.cache_dir)))
            except MissingExtraError as err:
                out.append((method, err))
        return tuple(out)
