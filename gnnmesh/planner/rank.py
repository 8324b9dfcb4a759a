"""Every full-graph strategy for a graph on P ranks, ranked by the strategies' own planner
models: ``rank_strategies``.

The candidates are what each registered strategy's planner model (``StrategySpec.planner``,
the ``PlanJob`` protocol of ``job.py``) gives for the job: for the built-in strategies, 1D
partition parallelism under each partitioner (the partition is computed, or read from the
partition store, so its bytes are exact and its partitioning time is the candidate's setup),
tensor parallelism (its decoupled form when the model is), every X x Y x Z grid of P ranks,
out-of-core training under a memory limit, and on one rank the single process. A strategy
registered from a user's module is ranked beside them. They are ranked by ``epoch_s +
setup_s / epochs``: the predicted epoch with the one-off setup spread over the run. Ranked
for ``inference``, each candidate's ``epoch_s`` is one inference pass (the evaluation's
forward in eval mode alone) and its setup counts in full (``epochs`` is 1). Each model's
bytes are checked against runs on its own (``tests/planner/test_estimates.py``); the ranking
across strategies, which rests on their times, is checked against measured epochs by
``benchmarks/planner.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import strategies
from ..layout.grid import RANK_ORDER
from ..partition.base import RANKED_METHODS
from .estimate import Estimate
from .grid3d import grid3d_estimate, grid3d_refusal  # noqa: F401  (named here by the plan commands)
from .job import Dropped, PlanJob
from .machine import ComputeRates, Network
from .sized import SizedGraph


@dataclass(frozen=True)
class Ranking:
    """``ranked``: the candidates' Estimates, best first; ``dropped``: those left out;
    ``epochs``: how many epochs the setup is spread over; ``inference``: each Estimate is one
    inference pass, its setup counted in full (``epochs`` is 1)."""
    ranked: tuple
    dropped: tuple
    epochs: int
    inference: bool = False

    def cost(self, estimate: Estimate) -> float:
        return cost(estimate, self.epochs)


def input_width(graph) -> int:
    """The width of the features a run trains ``graph`` with: its own, else the trainer's
    degree features (in-degree, and out-degree when directed)."""
    return graph.num_features or (2 if graph.directed else 1)


def cost(estimate: Estimate, epochs: int) -> float:
    """What the ranking sorts on: seconds per epoch with the setup spread over ``epochs``."""
    return estimate.epoch_s + estimate.setup_s / epochs


def ranked_specs() -> list:
    """The strategies the ranking asks: every registered one that trains full graphs and has
    a planner model, in registry order."""
    return [s for s in map(strategies.spec, strategies.names("full")) if s.planner]


def rank_strategies(graph, ranks: int, model: str, widths, rates: ComputeRates, network: Network,
                    ranks_per_node: Optional[int] = None, *, epochs: int = 200, memory_limit: Optional[int] = None,
                    partitioners=RANKED_METHODS, decoupled: bool = False, evaluate: bool = True, seed: int = 0,
                    epsilon: float = 0.01, cache: bool = True, cache_dir=None, order: str = RANK_ORDER,
                    inference: bool = False, **options) -> Ranking:
    """Rank the strategies for ``model`` (``decoupled``: its decoupled form; ``options``: the
    constructor's, e.g. ``heads``, ``k``) with ``widths`` (input, hidden..., classes; GAT's
    hidden per head) on ``graph`` (a loaded Graph, or a ``SizedGraph``) over ``ranks`` ranks,
    ``ranks_per_node`` to a node (default: one node); the other arguments are ``PlanJob``'s.

    Every strategy of ``ranked_specs`` gives its candidates, or drops them with the reason.
    ``memory_limit``: bytes per rank; a candidate whose largest peak exceeds it is dropped
    (and out-of-core training with that fast-tier budget joins the candidates). ``epochs``:
    how many epochs the setup is spread over. ``inference``: rank for one full-graph
    inference pass instead of training: every candidate's ``epoch_s`` is the predicted time
    of the evaluation's forward pass alone, its peak that of a pass without gradients where
    the model knows one, and its setup counts in full: the ranking's ``epochs`` is 1."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    job = PlanJob(graph, ranks, model, tuple(widths), rates, network, ranks_per_node, memory_limit,
                  tuple(partitioners), decoupled, evaluate, inference, seed, epsilon, cache, cache_dir, order,
                  options)
    found = [item for spec in ranked_specs() for item in strategies.load(spec.planner)(job)]
    dropped = [item for item in found if isinstance(item, Dropped)]
    candidates = [item for item in found if not isinstance(item, Dropped)]
    return _ranked(candidates, dropped, 1 if inference else epochs, memory_limit, inference)


def rank_sized(graph: SizedGraph, ranks: int, model: str, widths, rates: ComputeRates, network: Network,
               ranks_per_node: Optional[int] = None, **settings) -> Ranking:
    """``rank_strategies`` for a graph known by its size (``SizedGraph``): the random
    partition with its expected halos (an upper bound, see ``sized``), tensor parallelism
    and every grid. The partitioners that follow the graph's structure, and out-of-core
    training (whose chunks do), are dropped with the reason. ``inference``: as there."""
    return rank_strategies(graph, ranks, model, widths, rates, network, ranks_per_node, **settings)


def _ranked(candidates: list, dropped: list, epochs: int, memory_limit: Optional[int],
            inference: bool = False) -> Ranking:
    """``candidates`` best first, less those over ``memory_limit`` (added to ``dropped``)."""
    kept = []
    for estimate in candidates:
        peak = max(estimate.peak_bytes)
        if memory_limit is not None and peak > memory_limit:
            dropped.append(Dropped(estimate.strategy, f"peak {peak / 2**20:.3g} MiB per rank is over the "
                                                      f"limit of {memory_limit / 2**20:.3g} MiB"))
        else:
            kept.append(estimate)
    return Ranking(tuple(sorted(kept, key=lambda e: (cost(e, epochs), e.strategy))), tuple(dropped), epochs,
                   inference)
